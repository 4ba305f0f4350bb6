//! The demo's Metal3 host: Metal3's CRDs (the renditions in `testbed/crds/`), the
//! BareMetalSwitch `tor-5` of `examples/14-metal3-switch.yaml` pointed at a
//! simulated Cisco, and the HostNetworkAttachment and BareMetalHost of
//! `examples/15-metal3-host.yaml`. The demo plays the baremetal-operator: it moves
//! the host through `inspecting`, `provisioning` and `provisioned`, each once
//! patchbay has let the host go (its pause gone, its port ready), and the port
//! follows: the provisioning network, then the attachment's trunk. Talks to its
//! own devplane only (patchbay dials the simulator).

use anyhow::{Result, bail};

use super::create;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use patchbay::api::metal3::BareMetalHost;
use patchbay::api::metal3_attachment::HostNetworkAttachment;
use patchbay::api::metal3_switch::BareMetalSwitch;
use patchbay::api::{ConfigurationRef, Switch};
use patchbay_testbed::SimSwitch;
use serde_json::json;

const NS: &str = "network-infra";
/// The simulated switch the BareMetalSwitch stands for.
pub const SWITCH: &str = "tor-5";
/// The host.
pub const HOST: &str = "server-51";
/// BMO's states the demo walks the host through, and patchbay's phase each leads
/// to.
const WALK: [(&str, &str); 3] = [
    ("inspecting", "Available"),
    ("provisioning", "Provisioning"),
    ("provisioned", "Provisioned"),
];

/// Metal3's CRDs, as the tests install them.
const CRDS: [&str; 4] = [
    include_str!("../../../../testbed/crds/metal3.io_baremetalswitches.yaml"),
    include_str!("../../../../testbed/crds/metal3.io_hostnetworkattachments.yaml"),
    include_str!("../../../../testbed/crds/metal3.io_baremetalhosts.yaml"),
    include_str!("../../../../testbed/crds/metal3.io_hardwaredata.yaml"),
];

/// The examples, in order.
const EXAMPLES: [(&str, &str); 2] = [
    (
        "14-metal3-switch.yaml",
        include_str!("../../../../examples/14-metal3-switch.yaml"),
    ),
    (
        "15-metal3-host.yaml",
        include_str!("../../../../examples/15-metal3-host.yaml"),
    ),
];

/// What the host's port carries while it is provisioned with: the examples'
/// provisioning network (`--metal3-provisioning-configuration`).
pub fn provisioning() -> ConfigurationRef {
    ConfigurationRef {
        name: "provisioning".into(),
        namespace: Some(NS.into()),
    }
}

/// Where the walk is: the index of the next state in [`WALK`]; past it, shown.
#[derive(Default)]
pub struct Metal3Host {
    next: usize,
    shown: bool,
}

impl Metal3Host {
    /// Installs Metal3's CRDs.
    pub async fn install(client: &Client) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for text in CRDS {
            let crd: CustomResourceDefinition = patchbay_providers::yaml::from_str(text)?;
            api.create(&PostParams::default(), &crd).await?;
        }
        println!(
            "installed Metal3's BareMetalSwitch, HostNetworkAttachment, BareMetalHost and \
             HardwareData CRDs"
        );
        Ok(())
    }

    /// Applies the Metal3 examples, the BareMetalSwitch and its Secret pointed at
    /// `sim`.
    pub async fn apply(client: &Client, sim: &SimSwitch) -> Result<()> {
        for (file, text) in EXAMPLES {
            for mut doc in patchbay_providers::yaml::documents(text)? {
                let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
                let c = client.clone();
                let name = match kind.as_str() {
                    "Secret" => {
                        let data = &mut doc["stringData"];
                        data["username"] = sim.username.clone().into();
                        data["password"] = sim.password.clone().into();
                        data["admin-password"] = sim.enable_password.clone().into();
                        create(Api::<Secret>::namespaced(c, NS), doc, file).await?
                    }
                    "BareMetalSwitch" => {
                        doc["spec"]["address"] = sim.address.clone().into();
                        doc["spec"]["port"] = u64::from(sim.port).into();
                        doc["metadata"]["annotations"]["patchbay.dev/host-key"] =
                            sim.host_key_fingerprint.clone().into();
                        create(Api::<BareMetalSwitch>::namespaced(c, NS), doc, file).await?
                    }
                    "Switch" => create(Api::<Switch>::namespaced(c, NS), doc, file).await?,
                    "HostNetworkAttachment" => {
                        create(Api::<HostNetworkAttachment>::namespaced(c, NS), doc, file).await?
                    }
                    "BareMetalHost" => {
                        create(Api::<BareMetalHost>::namespaced(c, NS), doc, file).await?
                    }
                    other => bail!("{file}: unexpected kind {other:?}"),
                };
                println!("  applied {kind} {name}");
            }
        }
        Ok(())
    }

    /// Whether the host reached Provisioned and was shown.
    pub fn done(&self) -> bool {
        self.shown
    }

    /// One step of BMO's part: the next state once patchbay let the host go (its
    /// phase where the last state leads, its port ready, no pause). Returns a line to
    /// print, and true once the host is Provisioned with its port ready (the caller
    /// shows the port then).
    pub async fn step(&mut self, client: &Client) -> Result<(Option<String>, bool)> {
        if self.shown {
            return Ok((None, false));
        }
        let api: Api<BareMetalHost> = Api::namespaced(client.clone(), NS);
        let Some(host) = api.get_opt(HOST).await? else {
            return Ok((None, false));
        };
        let a = host.annotations();
        let phase = a.get("patchbay.dev/phase").map(String::as_str);
        let ready = a
            .get("patchbay.dev/ports")
            .and_then(|p| p.split(';').next()?.split_once('/'))
            .is_some_and(|(r, t)| r == t);
        let paused = a.contains_key("baremetalhost.metal3.io/paused");
        let want = match self.next {
            0 => "Available",
            n => WALK[n - 1].1,
        };
        if phase != Some(want) || !ready || paused {
            return Ok((None, false));
        }
        let Some((state, _)) = WALK.get(self.next) else {
            self.shown = true;
            return Ok((
                Some(format!(
                    "BareMetalHost {HOST} is provisioned; its port carries HostNetworkAttachment \
                     web-trunk (native 100, 150-151 tagged):"
                )),
                true,
            ));
        };
        api.patch_status(
            HOST,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"provisioning": {"state": state}}})),
        )
        .await?;
        self.next += 1;
        Ok((
            Some(format!(
                "BareMetalHost {HOST}: patchbay phase {want}, its port ready, no pause → BMO \
                 sets state {state}"
            )),
            false,
        ))
    }
}
