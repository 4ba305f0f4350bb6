//! The main demo: starts five simulated switches (fake-switches: Cisco IOS, Dell
//! PowerConnect, Brocade FastIron over their SSH CLI, a Juniper QFX over NETCONF and
//! a Cisco driven through Ansible; see [`patchbay_testbed`]), a private Open
//! vSwitch standing in for a SmartNIC (`fake-switch/ovs.py`, bridge `br-snic` with an
//! internal port `snic0p0`) and devplane, installs the CRDs, applies `examples/` (with
//! the simulators' ports and passwords filled into the ProviderSwitches and Secrets),
//! runs the operator in-process (SSH to the switches, OVSDB + OpenFlow to Open
//! vSwitch), and prints a table of the ports every time it changes, then each port as
//! the device itself reports it, the Servers with the claim that holds them and the
//! claim's `hosts.ini`. Then it walks server-7 through every phase: it gives the
//! installer's signal (server-7 goes Provisioned, its port onto the claim's
//! network), deletes the claim (Deprovisioning, the port back on the provisioning
//! network, Available), showing the port as the switch reports it at each step.
//! Beside them, a Linux switch with four hosts speaking real LLDP in network
//! namespaces ([`LldpFabric`], `examples/12-cabling.yaml`): one Server verified and
//! moved, one whose declared port sees another machine (parked, held), one found by
//! its MAC; and a host peering over BGP with FRR as its ToR (`demo/bgp.rs`: the
//! session as FRR reports it, only the claim's prefix accepted); and a Metal3 host
//! (`demo/metal3.rs`: a BareMetalSwitch on a simulated Cisco, a
//! HostNetworkAttachment, a BareMetalHost walked through BMO's states, its port
//! following);
//! until Ctrl-C (or, with `--exit-when-settled`, until the walk is done). Talks only to its own devplane, the simulators on
//! 127.0.0.1 and its own Open vSwitch.

mod bgp;
mod metal3;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};

use patchbay::api::{
    PortStatus, ProviderSwitch, Server, ServerClaim, ServerPhase, SmartNicConfiguration,
    SmartNicPort, Switch, SwitchPort, SwitchPortConfiguration, crds,
};
use patchbay::backends::{Backends, FixtureRegistry};
use patchbay::controllers::secrets::fetch_secret;
use patchbay::settings::Settings;
use patchbay_testbed::lldp::LldpFabric;
use patchbay_testbed::{FakeSwitches, OvsSim, SimSpec};

/// The example manifests, in the order a user applies them.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "00-namespace.yaml",
        include_str!("../../../examples/00-namespace.yaml"),
    ),
    (
        "01-credentials-secret.yaml",
        include_str!("../../../examples/01-credentials-secret.yaml"),
    ),
    (
        "02-provider-switch.yaml",
        include_str!("../../../examples/02-provider-switch.yaml"),
    ),
    (
        "03-switch.yaml",
        include_str!("../../../examples/03-switch.yaml"),
    ),
    (
        "configuration-provisioning.yaml",
        include_str!("../../../examples/configuration-provisioning.yaml"),
    ),
    (
        "configuration-tenant-web.yaml",
        include_str!("../../../examples/configuration-tenant-web.yaml"),
    ),
    (
        "configuration-tenant-web-acl.yaml",
        include_str!("../../../examples/configuration-tenant-web-acl.yaml"),
    ),
    (
        "04-server.yaml",
        include_str!("../../../examples/04-server.yaml"),
    ),
    (
        "05-switchport-links.yaml",
        include_str!("../../../examples/05-switchport-links.yaml"),
    ),
    (
        "06-smartnic.yaml",
        include_str!("../../../examples/06-smartnic.yaml"),
    ),
    (
        "07-server-claim.yaml",
        include_str!("../../../examples/07-server-claim.yaml"),
    ),
    (
        "09-netconf-switch.yaml",
        include_str!("../../../examples/09-netconf-switch.yaml"),
    ),
    (
        "10-ansible-switch.yaml",
        include_str!("../../../examples/10-ansible-switch.yaml"),
    ),
    (
        "12-cabling.yaml",
        include_str!("../../../examples/12-cabling.yaml"),
    ),
];

/// The LLDP fabric of `12-cabling.yaml`: the switch, and each host's name, MAC and
/// the port its cable is really in.
const FABRIC: (&str, [(&str, &str, &str); 4]) = (
    "leaf-7",
    [
        ("rack-1-a", "52:54:00:0a:00:01", "swp1"),
        ("unknown-host", "52:54:00:ee:00:01", "swp2"),
        ("rack-1-b", "52:54:00:0b:00:01", "swp3"),
        ("rack-1-c", "52:54:00:0c:00:01", "swp4"),
    ],
);

/// The Servers of the fabric and the `CablingVerified` reason each ends with.
const CABLED: [(&str, &str); 3] = [
    ("rack-1-a", "Verified"),
    ("rack-1-b", "CablingMismatch"),
    ("rack-1-c", "Verified"),
];

/// The SmartNIC of the examples: its ProviderSwitch, bridge and port.
const SMARTNIC: (&str, &str, &str) = ("snic-1", "br-snic", "snic0p0");

async fn create<K>(api: Api<K>, doc: serde_json::Value, file: &str) -> Result<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(doc).with_context(|| format!("{file}: does not parse"))?;
    let created = api
        .create(&PostParams::default(), &obj)
        .await
        .with_context(|| format!("{file}: create refused"))?;
    Ok(created.name_any())
}

/// The simulated switch behind each example ProviderSwitch: (ProviderSwitch,
/// simulator hostname, model). A ProviderSwitch need not be named after its Switch:
/// tor-2's is `tor-2-ssh`.
const SIMULATED: &[(&str, &str, &str)] = &[
    ("tor-1", "tor-1", "cisco_generic"),
    ("tor-2-ssh", "tor-2", "dell_generic"),
    ("tor-3", "tor-3", "brocade_generic"),
    ("leaf-1", "leaf-1", "juniper_qfx_copper_generic"),
    ("tor-4", "tor-4", "cisco_generic"),
    // The BareMetalSwitch of examples/14-metal3-switch.yaml (no ProviderSwitch is
    // written for it: patchbay derives one).
    ("tor-5", metal3::SWITCH, "cisco_generic"),
];

/// The simulated switches driven through Ansible: they get the IOS syntax shims
/// cisco.ios needs.
const OVER_ANSIBLE: &[&str] = &["tor-4"];

/// Points the example ProviderSwitches and Secrets at the simulators and the LLDP
/// fabric.
fn for_simulators(
    doc: &mut serde_json::Value,
    sims: &FakeSwitches,
    ovs: &OvsSim,
    fabric: &LldpFabric,
) {
    let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let sim_of_provider = SIMULATED
        .iter()
        .find(|(provider, _, _)| *provider == name)
        .and_then(|(_, host, _)| sims.switches.iter().find(|s| s.name == *host));
    match kind.as_str() {
        "ProviderSwitch" if name == format!("{}-lldp", FABRIC.0) => {
            doc["spec"]["address"] = "127.0.0.1".into();
            doc["spec"]["port"] = u64::from(fabric.ssh_port).into();
            doc["spec"]["hostKey"]["fingerprint"] = fabric.host_key_fingerprint.clone().into();
            doc["spec"]["options"]["lldpSocket"] = fabric.switch_socket.clone().into();
        }
        "Secret" if name == format!("{}-lldp-login", FABRIC.0) => {
            doc["stringData"]["username"] = fabric.username.clone().into();
            doc["stringData"]["privateKey"] = fabric.client_key.clone().into();
        }
        "ProviderSwitch" if name == SMARTNIC.0 => {
            doc["spec"]["address"] = ovs.info.ovsdb_address.clone().into();
            doc["spec"]["port"] = u64::from(ovs.info.ovsdb_port).into();
            doc["spec"]["options"]["openflow"] =
                ovs.openflow(SMARTNIC.1).unwrap_or_default().into();
        }
        "ProviderSwitch" => {
            if let Some(sim) = sim_of_provider {
                doc["spec"]["address"] = sim.address.clone().into();
                doc["spec"]["port"] = u64::from(sim.port).into();
                doc["spec"]["hostKey"]["fingerprint"] = sim.host_key_fingerprint.clone().into();
            }
        }
        "Secret" => {
            if let Some(sim) = sims
                .switches
                .iter()
                .find(|s| format!("{}-login", s.name) == name)
            {
                let data = &mut doc["stringData"];
                data["username"] = sim.username.clone().into();
                data["password"] = sim.password.clone().into();
                data["enablePassword"] = sim.enable_password.clone().into();
            }
        }
        _ => {}
    }
}

async fn apply_examples(
    client: &Client,
    sims: &FakeSwitches,
    ovs: &OvsSim,
    fabric: &LldpFabric,
) -> Result<()> {
    for (file, text) in EXAMPLES {
        for mut doc in patchbay_providers::yaml::documents(text)? {
            for_simulators(&mut doc, sims, ovs, fabric);
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            let c = client.clone();
            let name = match kind.as_str() {
                "Namespace" => create(Api::<Namespace>::all(c), doc, file).await?,
                "Secret" => create(Api::<Secret>::namespaced(c, &ns), doc, file).await?,
                "ProviderSwitch" => {
                    create(Api::<ProviderSwitch>::namespaced(c, &ns), doc, file).await?
                }
                "Switch" => create(Api::<Switch>::namespaced(c, &ns), doc, file).await?,
                "SwitchPortConfiguration" => {
                    create(
                        Api::<SwitchPortConfiguration>::namespaced(c, &ns),
                        doc,
                        file,
                    )
                    .await?
                }
                "SwitchPort" => create(Api::<SwitchPort>::namespaced(c, &ns), doc, file).await?,
                "SmartNicConfiguration" => {
                    create(Api::<SmartNicConfiguration>::namespaced(c, &ns), doc, file).await?
                }
                "SmartNicPort" => {
                    create(Api::<SmartNicPort>::namespaced(c, &ns), doc, file).await?
                }
                "Server" => create(Api::<Server>::all(c), doc, file).await?,
                "ServerClaim" => create(Api::<ServerClaim>::namespaced(c, &ns), doc, file).await?,
                other => bail!("{file}: unexpected kind {other:?}"),
            };
            println!("  applied {kind} {name}");
        }
    }
    Ok(())
}

/// One row of the port table: kind, object, status and linked configuration.
#[derive(Clone)]
struct Row {
    kind: &'static str,
    namespace: String,
    name: String,
    status: Option<PortStatus>,
    configuration: Option<String>,
}

fn table(ports: &[Row]) -> String {
    let mut rows = vec![[
        "KIND".to_owned(),
        "NAMESPACE".to_owned(),
        "NAME".to_owned(),
        "DEVICE".to_owned(),
        "PORT".to_owned(),
        "STATE".to_owned(),
        "CONFIGURATION".to_owned(),
        "READY".to_owned(),
    ]];
    for p in ports {
        let s = p.status.clone().unwrap_or_default();
        let ready = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| format!("{} {}", c.status, c.reason))
            .unwrap_or_default();
        rows.push([
            p.kind.to_owned(),
            p.namespace.clone(),
            p.name.clone(),
            s.switch.or(s.provider).unwrap_or_default(),
            s.device_port.unwrap_or_default(),
            s.state
                .map(|x| x.to_string())
                .unwrap_or_else(|| "(none)".into()),
            p.configuration.clone().unwrap_or_default(),
            ready,
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The Servers as the live table shows them: phase, ports ready, claim, and what
/// holds the phase back.
fn server_table(servers: &[Server]) -> String {
    let mut out = format!(
        "{:<10}  {:<14}  {:<5}  {:<24}  {:<16}  {:<4}  {}\n",
        "SERVER", "PHASE", "PORTS", "CLAIM", "CABLING", "BGP", "HELD"
    );
    for s in servers {
        let st = s.status.clone().unwrap_or_default();
        let held = st
            .conditions
            .iter()
            .find(|c| c.type_ == "Held" && c.status == "True")
            .map(|c| c.reason.clone())
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<10}  {:<14}  {:<5}  {:<24}  {:<16}  {:<4}  {}\n",
            s.name_any(),
            st.phase.map(|p| p.to_string()).unwrap_or_default(),
            st.ports_ready.clone().unwrap_or_default(),
            st.claim
                .clone()
                .map(|c| format!("{}/{}", c.namespace, c.name))
                .unwrap_or_default(),
            cabling_of(s).map(|(r, _)| r).unwrap_or_default(),
            st.bgp.clone().unwrap_or_default(),
            held
        ));
    }
    out.trim_end().to_owned()
}

/// The Server the demo takes through every phase, and the claim that holds it.
const WALKED: (&str, &str, &str) = ("server-7", "network-infra", "web-cluster");

fn condition_true(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    t: &str,
) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == t && c.status == "True")
}

/// Runs the demo. See the module documentation.
pub async fn run(exit_when_settled: bool, timeout: Duration) -> Result<()> {
    let specs: Vec<SimSpec> = SIMULATED
        .iter()
        .map(|(_, name, model)| {
            let spec = SimSpec::new(name, model);
            if OVER_ANSIBLE.contains(name) {
                spec.with_ios_shims()
            } else {
                spec
            }
        })
        .collect();
    let sims = FakeSwitches::start(&specs).context("starting the simulated switches")?;
    println!(
        "patchbay demo: simulated switches (fake-switches, pid {}):",
        sims.pid()
    );
    for s in &sims.switches {
        println!(
            "  {:<6} {:<26} ssh {}:{}",
            s.name, s.model, s.address, s.port
        );
    }
    let (_, bridge, snic_port) = SMARTNIC;
    let ovs = OvsSim::start(&[bridge])
        .context("starting Open vSwitch (make ovs installs it; needs root for its netns)")?;
    ovs.vsctl(&[
        "add-port",
        bridge,
        snic_port,
        "--",
        "set",
        "Interface",
        snic_port,
        "type=internal",
    ])?;
    println!(
        "  snic-1 Open vSwitch 3 (SmartNIC) ovsdb tcp:{} bridge {bridge} port {snic_port} (ovsdb-server pid {}, ovs-vswitchd pid {})",
        ovs.ovsdb_tcp(),
        ovs.info.ovsdb_server_pid,
        ovs.info.ovs_vswitchd_pid
    );
    let mut fabric = LldpFabric::start(FABRIC.0)
        .context("starting the LLDP fabric (make lldp installs lldpd; needs root for netns)")?;
    // Every host speaks LLDP before patchbay looks (add_host returns once the switch
    // sees it): with nothing seen on a port, the default (Permissive) policy would
    // move it.
    for (host, mac, port) in FABRIC.1 {
        fabric.add_host(host, mac, port)?;
    }
    println!(
        "  {:<6} Linux switch, lldpd in netns {} with hosts on swp1-swp4, ssh 127.0.0.1:{}",
        FABRIC.0, fabric.switch_netns, fabric.ssh_port
    );
    let mut bgp_host = bgp::BgpHost::start()?;
    println!("{}", bgp_host.describe());
    let server = patchbay_devplane::DevPlane::start(patchbay_devplane::Config::default())
        .context("starting devplane")?;
    let dir = std::env::temp_dir().join(format!("patchbay-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig: PathBuf = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;
    println!("patchbay demo: devplane at {}", server.url());
    println!("kubeconfig: {}", kubeconfig.display());
    println!(
        "  try: KUBECONFIG={} kubectl get switchports -A -w\n",
        kubeconfig.display()
    );

    let kc = Kubeconfig::read_from(&kubeconfig)?;
    let client = Client::try_from(
        kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?,
    )?;
    let crd_api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (_, crd) in crds() {
        crd_api.create(&PostParams::default(), &crd).await?;
    }
    println!("installed {} CRDs from crds/", crds().len());
    metal3::Metal3Host::install(&client).await?;
    apply_examples(&client, &sims, &ovs, &fabric).await?;
    let metal3_sim = sims
        .switches
        .iter()
        .find(|s| s.name == metal3::SWITCH)
        .context("the Metal3 switch's simulator")?;
    metal3::Metal3Host::apply(&client, metal3_sim).await?;
    let mut metal3_host = metal3::Metal3Host::default();
    bgp_host.apply(&client).await?;

    let settings = Settings {
        batch_window: Duration::from_millis(100),
        drift_interval: Duration::from_secs(30),
        ansible_playbook: patchbay_testbed::ansible_playbook()
            .unwrap_or_else(|_| "ansible-playbook".into()),
        metal3_switches: true,
        metal3_provisioning: Some(metal3::provisioning()),
        ..Settings::default()
    };
    println!("\nstarting the operator (SSH to the simulated switches)\n");
    let backends = Backends {
        fixture_latency: settings.fixture_latency,
        ansible_playbook: settings.ansible_playbook.clone(),
        ..Default::default()
    };
    let fixtures = backends.fixtures.clone();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(patchbay::controllers::run(
        client.clone(),
        settings,
        backends,
        patchbay::probes::Probes::default(),
        async move {
            let _ = stop_rx.await;
        },
    ));

    let ports: Api<SwitchPort> = Api::all(client.clone());
    let snics: Api<SmartNicPort> = Api::all(client.clone());
    // Every SwitchPort and SmartNicPort of the examples, plus the switch port the
    // SmartNicPort is chained to (created by the Switch controller, not listed).
    let expected: usize = EXAMPLES
        .iter()
        .flat_map(|(_, t)| patchbay_providers::yaml::documents(t).unwrap_or_default())
        .map(|d| match d["kind"].as_str() {
            Some("SwitchPort") => 1,
            Some("SmartNicPort") => 2,
            _ => 0,
        })
        .sum();
    let started = Instant::now();
    let mut last = String::new();
    let mut ctrl_c = Box::pin(tokio::signal::ctrl_c());
    // 0: settling; 1: server-7 told installed; 2: its claim deleted; 3: done.
    let mut stage = 0;
    let result = loop {
        let mut list = ports.list(&ListParams::default()).await?.items;
        list.sort_by_key(|p| (p.namespace(), p.name_any()));
        let mut snic_list = snics.list(&ListParams::default()).await?.items;
        snic_list.sort_by_key(|p| (p.namespace(), p.name_any()));
        let rows: Vec<Row> = list
            .iter()
            .map(|p| Row {
                kind: "SwitchPort",
                namespace: p.namespace().unwrap_or_default(),
                name: p.name_any(),
                status: p.status.clone(),
                configuration: p.spec.configuration.as_ref().map(|c| c.name.clone()),
            })
            .chain(snic_list.iter().map(|p| Row {
                kind: "SmartNicPort",
                namespace: p.namespace().unwrap_or_default(),
                name: p.name_any(),
                status: p.status.clone(),
                configuration: p.spec.configuration.as_ref().map(|c| c.name.clone()),
            }))
            .collect();
        let mut servers = Api::<Server>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        servers.sort_by_key(|s| s.name_any());
        bgp_host.step(&client, &servers).await?;
        let rendered = format!("{}\n\n{}", table(&rows), server_table(&servers));
        if rendered != last {
            println!("[{:>6.2}s]\n{rendered}\n", started.elapsed().as_secs_f64());
            last = rendered;
        }
        let states: BTreeMap<String, Option<patchbay::api::PortState>> = rows
            .iter()
            .map(|r| {
                (
                    format!("{}/{}", r.kind, r.name),
                    r.status.as_ref().and_then(|s| s.state),
                )
            })
            .collect();
        let claims = Api::<ServerClaim>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let (walked, walked_ns, walked_claim) = WALKED;
        let server = servers.iter().find(|s| s.name_any() == walked);
        let phase = server.and_then(|s| s.status.as_ref()).and_then(|s| s.phase);
        let ports_ready = server
            .and_then(|s| s.status.as_ref())
            .is_some_and(|s| condition_true(&s.conditions, "PortsReady"));
        let claim = claims
            .iter()
            .find(|c| c.name_any() == walked_claim && c.namespace().as_deref() == Some(walked_ns));
        let claim_has = |t: &str| {
            claim
                .and_then(|c| c.status.as_ref())
                .is_some_and(|s| condition_true(&s.conditions, t))
        };
        // The cabling example's ports are judged by their cabling, not by being Active.
        let fabric_port = format!("SwitchPort/{}-", FABRIC.0);
        // The BGP host's port moves with its own claim, apart from the walk.
        let bgp_port = "SwitchPort/leaf-8-";
        let ports_active = states.len() >= expected
            && states
                .iter()
                .filter(|(k, _)| !k.starts_with(&fabric_port) && !k.starts_with(bgp_port))
                .all(|(_, s)| *s == Some(patchbay::api::PortState::Active));
        let cabling_done = CABLED.iter().all(|(name, want)| {
            servers
                .iter()
                .find(|s| s.name_any() == *name)
                .and_then(cabling_of)
                .is_some_and(|(reason, _)| reason == *want)
        });
        let show = |what: &str| {
            rows.iter()
                .filter(|r| r.name.starts_with(what))
                .cloned()
                .collect::<Vec<Row>>()
        };
        // The Metal3 host, walked by the demo playing BMO.
        let (line, provisioned) = metal3_host.step(&client).await?;
        if let Some(line) = line {
            println!("{line}");
        }
        if provisioned {
            print!(
                "{}",
                device_view(&client, &fixtures, &show(metal3::HOST)).await
            );
        }
        match stage {
            // Every example port Active, the claim allocated, server-7 installing.
            0 if ports_active
                && cabling_done
                && claim_has("Allocated")
                && phase == Some(ServerPhase::Provisioning)
                && ports_ready =>
            {
                println!(
                    "the example ports are Active after {:.2}s (leaf-7's as their cabling \
                     allows); what leaf-7's ports see on the wire, and each Server's cabling:",
                    started.elapsed().as_secs_f64()
                );
                print!("{}", cabling_view(&client, &servers).await?);
                println!("\nthe devices say:");
                print!("{}", device_view(&client, &fixtures, &rows).await);
                println!("\nthe Servers and the claims that hold them:");
                print!("{}", allocation_view(&client, &claims).await?);
                let held: Vec<String> = claim
                    .and_then(|c| c.status.as_ref())
                    .map(|s| s.roles.iter().flat_map(|r| r.servers.clone()).collect())
                    .unwrap_or_default();
                println!(
                    "\n{} Provisioning on the provisioning network; the installer reports them \
                     installed: annotating patchbay.dev/provisioned=true\n",
                    held.join(" and ")
                );
                for s in &held {
                    set_provisioned(&client, s).await?;
                }
                stage = 1;
            }
            // server-7 Provisioned, its port on the claim's network.
            1 if phase == Some(ServerPhase::Provisioned) && ports_ready && claim_has("Ready") => {
                println!(
                    "{walked} is Provisioned and claim {walked_claim} is Ready; its port carries \
                     the claim's network:"
                );
                print!("{}", device_view(&client, &fixtures, &show(walked)).await);
                println!("\nreleasing: deleting ServerClaim {walked_ns}/{walked_claim}\n");
                Api::<ServerClaim>::namespaced(client.clone(), walked_ns)
                    .delete(walked_claim, &Default::default())
                    .await?;
                stage = 2;
            }
            // Released: Deprovisioning, then Available with its port back.
            2 if phase == Some(ServerPhase::Available) && ports_ready && claim.is_none() => {
                println!(
                    "{walked} is Available again and the claim is gone; its port is back on \
                     the provisioning network:"
                );
                print!("{}", device_view(&client, &fixtures, &show(walked)).await);
                println!(
                    "\n{walked} went Available → Provisioning → Provisioned → Deprovisioning → \
                     Available after {:.2}s",
                    started.elapsed().as_secs_f64()
                );
                stage = 3;
            }
            _ => {}
        }
        let settled = stage == 3 && bgp_host.done() && metal3_host.done();
        if exit_when_settled && settled {
            break Ok(());
        }
        if exit_when_settled && started.elapsed() > timeout {
            break Err(anyhow::anyhow!(
                "the example ports, server-7, the BGP host and the Metal3 host did not settle \
                 within {}s",
                timeout.as_secs()
            ));
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = &mut ctrl_c => {
                println!("stopping");
                break Ok(());
            }
        }
    };
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), operator).await;
    server.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    drop(sims);
    drop(ovs);
    fabric.stop();
    drop(bgp_host);
    result
}

/// `CablingVerified`'s reason and message on `s`.
fn cabling_of(s: &Server) -> Option<(String, String)> {
    s.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "CablingVerified")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

/// What leaf-7's ports see (its status), and each cabled Server's verdict.
async fn cabling_view(client: &Client, servers: &[Server]) -> Result<String> {
    let switch = Api::<Switch>::namespaced(client.clone(), "network-infra")
        .get(FABRIC.0)
        .await?;
    let status = switch.status.unwrap_or_default();
    let mut out = format!(
        "  Switch {} (chassis {}):\n",
        FABRIC.0,
        status.chassis_id.as_deref().unwrap_or("?")
    );
    for p in &status.neighbors {
        let sees = p
            .lldp
            .iter()
            .map(|n| {
                format!(
                    "{} ({})",
                    n.chassis_id,
                    n.system_name.as_deref().unwrap_or("no name")
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "    {:<5} {:<12} sees {sees}\n",
            p.port,
            p.switch_port.as_deref().unwrap_or("-")
        ));
    }
    for (name, _) in CABLED {
        if let Some((reason, message)) = servers
            .iter()
            .find(|s| s.name_any() == name)
            .and_then(cabling_of)
        {
            out.push_str(&format!("  {name}: {reason}: {message}\n"));
        }
    }
    Ok(out)
}

/// The installer's signal on a Server.
async fn set_provisioned(client: &Client, server: &str) -> Result<()> {
    Api::<Server>::all(client.clone())
        .patch(
            server,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"metadata": {"annotations":
                {"patchbay.dev/provisioned": "true"}}})),
        )
        .await?;
    Ok(())
}

/// The Servers (site, phase, role, claim) and each claim's inventory.
async fn allocation_view(client: &Client, claims: &[ServerClaim]) -> Result<String> {
    let mut servers = Api::<Server>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    servers.sort_by_key(|s| s.name_any());
    let mut out = format!(
        "  {:<10} {:<10} {:<14} {:<14} {}\n",
        "SERVER", "SITE", "PHASE", "ROLE", "CLAIM"
    );
    for s in &servers {
        let st = s.status.clone().unwrap_or_default();
        out.push_str(&format!(
            "  {:<10} {:<10} {:<14} {:<14} {}\n",
            s.name_any(),
            s.spec.site,
            st.phase.map(|p| p.to_string()).unwrap_or_default(),
            st.role.unwrap_or_default(),
            st.claim
                .map(|c| format!("{}/{}", c.namespace, c.name))
                .unwrap_or_default()
        ));
    }
    for c in claims {
        let ns = c.namespace().unwrap_or_default();
        let cm = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
            .get_opt(&format!("{}-inventory", c.name_any()))
            .await?;
        let ini = cm
            .and_then(|m| m.data)
            .and_then(|d| d.get("hosts.ini").cloned())
            .unwrap_or_default();
        out.push_str(&format!(
            "\nConfigMap {ns}/{}-inventory, hosts.ini:\n{ini}",
            c.name_any()
        ));
    }
    Ok(out)
}

/// Each port as its device reports it: the port's ProviderSwitch (`status.provider`)
/// and its Secret, a backend built the way the operator builds it
/// ([`Backends::build`]; Ansible from the test bed's venv; fixture devices the
/// operator's own, in `fixtures`), one read.
async fn device_view(client: &Client, fixtures: &FixtureRegistry, ports: &[Row]) -> String {
    let mut out = String::new();
    for p in ports {
        let status = p.status.clone().unwrap_or_default();
        let (Some(provider_name), Some(device_port)) = (status.provider, status.device_port) else {
            continue;
        };
        let device = status.switch.unwrap_or_else(|| provider_name.clone());
        let line = async {
            let provider = Api::<ProviderSwitch>::namespaced(client.clone(), &p.namespace)
                .get(&provider_name)
                .await
                .ok()?;
            let secret = fetch_secret(client, &provider).await.ok()?;
            let port = patchbay_providers::values::PortName::parse(&device_port).ok()?;
            let backends = Backends {
                ansible_playbook: patchbay_testbed::ansible_playbook()
                    .unwrap_or_else(|_| "ansible-playbook".into()),
                fixtures: fixtures.clone(),
                ..Backends::default()
            };
            let backend = backends
                .build(&provider, secret.as_ref(), std::slice::from_ref(&port))
                .ok()?;
            let observed = backend.get_port(&port).await.ok()?;
            let view = crate::device::PortView::from(&observed);
            Some(format!(
                "  {device:<6} {device_port:<16} {}",
                serde_json::to_string(&view).unwrap_or_default()
            ))
        }
        .await
        .unwrap_or_else(|| format!("  {device:<6} {device_port:<16} (could not read)"));
        out.push_str(&line);
        out.push('\n');
    }
    out
}
