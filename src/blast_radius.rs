//! The blast-radius webhook's I/O: for an UPDATE or DELETE of a
//! SwitchPortConfiguration, Switch, ProviderSwitch, SwitchPort,
//! SmartNicConfiguration, SmartNicPort or (with tenancy on) VLANPool, it reads the
//! objects around the write from the API server and answers with warnings that say
//! how many ports on how many switches the write moves and whose hosts those are
//! (`kubectl apply` and `--dry-run=server` print them as `Warning: …`). It never
//! denies. Every decision is the pure core's: [`crate::decide::blast_radius`] says
//! where to look and words the answer, [`crate::decide::plan`] decides each port as
//! the operator does.
//!
//! What it reads, and how (no cache: a replica keeps no port list for this, so
//! every replica answers alike, leading or not, at no memory cost):
//! - a configuration's ports by the SwitchPort (SmartNicPort) CRD's selectable
//!   field (`spec.configuration.name`, Kubernetes ≥ 1.31); an API server that
//!   refuses the field selector is answered by a full list, filtered here;
//! - a Switch's ports by their `patchbay.dev/switch` label; a ProviderSwitch's by
//!   its Switches' names, and the SmartNicPorts naming it; a SmartNicPort is the
//!   review's own object;
//! - a VLANPool's: every SwitchPort and SmartNicPort (a pool's grant follows whom a
//!   port serves, its claim's namespace, which only the Servers say; pools are
//!   edited rarely);
//! - chains both ways: the SmartNicPort that claimed a SwitchPort, and the
//!   SwitchPort behind a SmartNicPort (`nextPortRef`), so the plan writes chains as
//!   the controller does;
//! - then each Switch, ProviderSwitch, configuration (a SmartNicConfiguration's
//!   `nextConfigurationRef` included) and Server those ports name, and what the
//!   review's old and new objects name (a port relinked to another configuration),
//!   one GET each (a list instead when there are many); with tenancy on, every
//!   VLANPool.
//!
//! Tenancy is the operator's own (`--infra-namespace`, `--parking-vlan`): a port a
//! change would take outside its tenant's grants is counted `refused by patchbay`.
//!
//! Lists ask for `resourceVersion=0` (any version the API server's watch cache
//! holds): a warning needs no quorum read. An update that leaves the spec and the
//! labels as they were (the operator's own finalizer and mark writes) is answered
//! at once, reading nothing. The whole answer is bounded by
//! [`DEADLINE`]; past it, the warning says the radius is unknown and to run
//! `patchbay plan`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ListParams};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::api::keys::CHAINED_FROM_ANNOTATION;
use crate::api::keys::{HOST_ANNOTATION, SWITCH_LABEL};
use crate::api::{
    ProviderSwitch, Server, SmartNicConfiguration, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration, VLANPool,
};
use crate::decide::blast_radius::{HostFacts, Reach, moves_nothing, reach, warnings};
use crate::decide::plan::{Fleet, Rules, plan};
use crate::decide::tenancy::Tenancy;
use crate::serve::Admit;

/// How long an answer may take before it gives up and says so. Below the
/// webhook's `timeoutSeconds` (10 in deploy/), so the API server always hears back.
pub const DEADLINE: Duration = Duration::from_secs(6);

/// More distinct objects of a kind than this are listed instead of fetched one by one.
const GET_AT_MOST: usize = 64;

/// GETs in flight at once.
const IN_FLIGHT: usize = 8;

/// The webhook.
pub struct BlastRadius {
    client: Client,
    tenancy: Option<Tenancy>,
}

impl BlastRadius {
    /// The webhook, reading through `client`, deciding under the operator's
    /// `tenancy` settings (`None`: tenancy off).
    pub fn new(client: Client, tenancy: Option<Tenancy>) -> Self {
        BlastRadius { client, tenancy }
    }
}

fn any_version() -> ListParams {
    ListParams::default().match_any()
}

fn named<K>(k: &K) -> (String, String)
where
    K: Resource,
{
    (
        k.meta().namespace.clone().unwrap_or_default(),
        k.meta().name.clone().unwrap_or_default(),
    )
}

/// The Api of a namespaced kind in `ns`.
fn within<K>(client: &Client) -> impl Fn(&str) -> Api<K> + '_
where
    K: Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>,
{
    move |ns| Api::namespaced(client.clone(), ns)
}

/// The objects of `keys` (namespace, name; empty namespace: cluster-scoped, read
/// through `api("")`), by GET when few, else by one list of the kind filtered here.
/// Missing ones are skipped.
async fn fetch<K>(
    client: &Client,
    api: impl Fn(&str) -> Api<K>,
    keys: BTreeSet<(String, String)>,
) -> kube::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    if keys.len() > GET_AT_MOST {
        let all: Api<K> = Api::all(client.clone());
        let items = all.list(&any_version()).await?.items;
        return Ok(items
            .into_iter()
            .filter(|o| keys.contains(&named(o)))
            .collect());
    }
    futures::stream::iter(keys)
        .map(|(ns, name)| {
            let api = api(&ns);
            async move { api.get_opt(&name).await }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_filter_map(|o| async move { Ok(o) })
        .try_collect()
        .await
}

/// The ports of kind `K` whose `spec.configuration` (`reference`) names
/// configuration `namespace/name`: by the CRD's selectable field, else (an API
/// server before 1.31 refuses the field selector) every port, filtered here.
async fn configured<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    reference: impl Fn(&K) -> Option<&crate::api::ConfigurationRef>,
) -> kube::Result<Vec<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let all: Api<K> = Api::all(client.clone());
    let selected = any_version().fields(&format!("spec.configuration.name={name}"));
    let listed = match all.list(&selected).await {
        Ok(l) => l.items,
        Err(kube::Error::Api(e)) if e.code == 400 => all.list(&any_version()).await?.items,
        Err(e) => return Err(e),
    };
    Ok(listed
        .into_iter()
        .filter(|p| {
            let Some(r) = reference(p) else {
                return false;
            };
            let ns = r
                .namespace
                .clone()
                .or_else(|| p.meta().namespace.clone())
                .unwrap_or_default();
            r.name == name && ns == namespace
        })
        .collect())
}

/// The SwitchPorts and SmartNicPorts `reach` points at; `reviewed` is the review's
/// stored object (a SmartNicPort's own).
async fn ports(
    client: &Client,
    reach: &Reach,
    reviewed: Option<&serde_json::Value>,
) -> anyhow::Result<(Vec<SwitchPort>, Vec<SmartNicPort>)> {
    Ok(match reach {
        Reach::Configuration { namespace, name } => (
            configured(client, namespace, name, |p: &SwitchPort| {
                p.spec.configuration.as_ref()
            })
            .await?,
            Vec::new(),
        ),
        Reach::SmartNicConfiguration { namespace, name } => (
            Vec::new(),
            configured(client, namespace, name, |p: &SmartNicPort| {
                p.spec.configuration.as_ref()
            })
            .await?,
        ),
        Reach::Everywhere => {
            let (all_ports, all_snics, lp) = (
                Api::<SwitchPort>::all(client.clone()),
                Api::<SmartNicPort>::all(client.clone()),
                any_version(),
            );
            let (ports, snics) = futures::try_join!(all_ports.list(&lp), all_snics.list(&lp))?;
            (ports.items, snics.items)
        }
        Reach::SmartNicPort => (
            Vec::new(),
            reviewed
                .map(|o| serde_json::from_value(o.clone()))
                .transpose()?
                .into_iter()
                .collect(),
        ),
        Reach::Provider { namespace, name } => {
            let snics: Api<SmartNicPort> = Api::namespaced(client.clone(), namespace);
            let on_it = snics
                .list(&any_version())
                .await?
                .items
                .into_iter()
                .filter(|p| p.spec.provider.name == *name)
                .collect();
            (switch_ports(client, reach).await?, on_it)
        }
        _ => (switch_ports(client, reach).await?, Vec::new()),
    })
}

/// The SwitchPorts of a Switch, of a ProviderSwitch's Switches, or one SwitchPort.
async fn switch_ports(client: &Client, reach: &Reach) -> kube::Result<Vec<SwitchPort>> {
    match reach {
        Reach::Switch { namespace, name } => {
            let api: Api<SwitchPort> = Api::namespaced(client.clone(), namespace);
            let selected = any_version().labels(&format!("{SWITCH_LABEL}={name}"));
            Ok(api.list(&selected).await?.items)
        }
        Reach::Provider { namespace, name } => {
            let switches: Api<Switch> = Api::namespaced(client.clone(), namespace);
            let names: Vec<String> = switches
                .list(&any_version())
                .await?
                .items
                .into_iter()
                .filter(|s| s.spec.provider.name == *name)
                .filter_map(|s| s.metadata.name)
                .collect();
            let api: Api<SwitchPort> = Api::namespaced(client.clone(), namespace);
            let mut out = Vec::new();
            for chunk in names.chunks(50) {
                let selected =
                    any_version().labels(&format!("{SWITCH_LABEL} in ({})", chunk.join(",")));
                out.extend(api.list(&selected).await?.items);
            }
            Ok(out)
        }
        Reach::Port { namespace, name } => {
            let api: Api<SwitchPort> = Api::namespaced(client.clone(), namespace);
            Ok(api.get_opt(name).await?.into_iter().collect())
        }
        _ => Ok(Vec::new()),
    }
}

/// The key of `r` (a reference whose namespace defaults to `ns`).
fn reference_key(ns: &str, name: &str, namespace: Option<&String>) -> (String, String) {
    (
        namespace.cloned().unwrap_or_else(|| ns.to_owned()),
        name.to_owned(),
    )
}

/// The fleet around `ports` and `smartnic_ports`: the SmartNicPorts that claimed
/// those SwitchPorts and the SwitchPorts behind those SmartNicPorts (chains), their
/// Switches (and `extra`'s), the ProviderSwitches and configurations those name
/// (a SmartNicConfiguration's `nextConfigurationRef` included), the Servers of their
/// host marks, and with `tenancy` the VLANPools. `reviewed` holds the review's old
/// and new objects: what they name is read too, they are not put in the fleet.
async fn around(
    client: &Client,
    (mut ports, mut smartnic_ports): (Vec<SwitchPort>, Vec<SmartNicPort>),
    extra_switches: BTreeSet<(String, String)>,
    reviewed: &Fleet,
    tenancy: bool,
) -> kube::Result<Fleet> {
    // Chains, both ways: the SmartNicPort a SwitchPort was claimed by, and the
    // SwitchPort behind a SmartNicPort.
    let have: BTreeSet<(String, String)> = smartnic_ports.iter().map(named).collect();
    let claimants: BTreeSet<(String, String)> = ports
        .iter()
        .chain(&reviewed.ports)
        .filter_map(|p| {
            p.metadata
                .annotations
                .as_ref()?
                .get(CHAINED_FROM_ANNOTATION)
        })
        .filter_map(|from| from.split_once('/'))
        .map(|(ns, name)| (ns.to_owned(), name.to_owned()))
        .filter(|k| !have.contains(k))
        .collect();
    smartnic_ports.extend(fetch(client, within::<SmartNicPort>(client), claimants).await?);
    let have: BTreeSet<(String, String)> = ports.iter().map(named).collect();
    let behind: BTreeSet<(String, String)> = smartnic_ports
        .iter()
        .chain(&reviewed.smartnic_ports)
        .filter_map(|p| {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let next = p.spec.next_port_ref.as_ref()?;
            Some(reference_key(&ns, &next.name, next.namespace.as_ref()))
        })
        .filter(|k| !have.contains(k))
        .collect();
    ports.extend(fetch(client, within::<SwitchPort>(client), behind).await?);
    // The SmartNicConfigurations first: they name SwitchPortConfigurations.
    let smartnic_configuration_keys: BTreeSet<(String, String)> = smartnic_ports
        .iter()
        .chain(&reviewed.smartnic_ports)
        .filter_map(|p| {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let r = p.spec.configuration.as_ref()?;
            Some(reference_key(&ns, &r.name, r.namespace.as_ref()))
        })
        .collect();
    let smartnic_configurations: Vec<SmartNicConfiguration> = fetch(
        client,
        within::<SmartNicConfiguration>(client),
        smartnic_configuration_keys,
    )
    .await?;
    let mut switch_keys = extra_switches;
    let mut configuration_keys: BTreeSet<(String, String)> = smartnic_configurations
        .iter()
        .chain(&reviewed.smartnic_configurations)
        .filter_map(|c| {
            let ns = c.metadata.namespace.clone().unwrap_or_default();
            let r = c.spec.next_configuration_ref.as_ref()?;
            Some(reference_key(&ns, &r.name, r.namespace.as_ref()))
        })
        .collect();
    let mut provider_keys = BTreeSet::new();
    let mut server_keys = BTreeSet::new();
    let mut host = |meta: &kube::core::ObjectMeta| {
        if let Some(server) = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(HOST_ANNOTATION))
            .and_then(|m| m.strip_prefix("Server/"))
        {
            server_keys.insert((String::new(), server.to_owned()));
        }
    };
    for p in ports.iter().chain(&reviewed.ports) {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        if let Some(sw) = p.metadata.labels.as_ref().and_then(|l| l.get(SWITCH_LABEL)) {
            switch_keys.insert((ns.clone(), sw.clone()));
        }
        if let Some(r) = &p.spec.configuration {
            configuration_keys.insert(reference_key(&ns, &r.name, r.namespace.as_ref()));
        }
        host(&p.metadata);
    }
    for p in smartnic_ports.iter().chain(&reviewed.smartnic_ports) {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        provider_keys.insert((ns, p.spec.provider.name.clone()));
        host(&p.metadata);
    }
    let switches: Vec<Switch> = fetch(client, within(client), switch_keys).await?;
    provider_keys.extend(switches.iter().chain(&reviewed.switches).map(|s| {
        (
            s.metadata.namespace.clone().unwrap_or_default(),
            s.spec.provider.name.clone(),
        )
    }));
    let pools = async {
        if tenancy {
            Ok(Api::<VLANPool>::all(client.clone())
                .list(&any_version())
                .await?
                .items)
        } else {
            Ok(Vec::new())
        }
    };
    let (providers, configurations, servers, pools) = futures::try_join!(
        fetch(client, within::<ProviderSwitch>(client), provider_keys),
        fetch(
            client,
            within::<SwitchPortConfiguration>(client),
            configuration_keys
        ),
        fetch(client, |_| Api::<Server>::all(client.clone()), server_keys),
        pools,
    )?;
    Ok(Fleet {
        providers,
        switches,
        ports,
        configurations,
        servers,
        smartnic_ports,
        smartnic_configurations,
        pools,
    })
}

/// `fleet` with `object` (of the reviewed kind) in place of its namesake, or without
/// it (`None`: deleted).
fn with_object(
    fleet: &Fleet,
    kind: &str,
    key: &(String, String),
    object: Option<&serde_json::Value>,
) -> Result<Fleet, serde_json::Error> {
    fn put<K: DeserializeOwned + Resource>(
        list: &mut Vec<K>,
        key: &(String, String),
        object: Option<&serde_json::Value>,
    ) -> Result<(), serde_json::Error> {
        list.retain(|o| named(o) != *key);
        if let Some(o) = object {
            list.push(serde_json::from_value(o.clone())?);
        }
        Ok(())
    }
    let mut f = fleet.clone();
    match kind {
        "SwitchPortConfiguration" => put(&mut f.configurations, key, object)?,
        "Switch" => put(&mut f.switches, key, object)?,
        "ProviderSwitch" => put(&mut f.providers, key, object)?,
        "SwitchPort" => put(&mut f.ports, key, object)?,
        "SmartNicConfiguration" => put(&mut f.smartnic_configurations, key, object)?,
        "SmartNicPort" => put(&mut f.smartnic_ports, key, object)?,
        "VLANPool" => put(&mut f.pools, key, object)?,
        _ => {}
    }
    Ok(f)
}

impl BlastRadius {
    /// The warnings for `request`: empty when it moves no port.
    pub async fn warnings(&self, request: &AdmissionRequest<DynamicObject>) -> Vec<String> {
        if !matches!(request.operation, Operation::Update | Operation::Delete) {
            return Vec::new();
        }
        let namespace = request.namespace.clone().unwrap_or_default();
        let Some(reach) = reach(
            &request.kind.kind,
            &namespace,
            &request.name,
            self.tenancy.is_some(),
        ) else {
            return Vec::new();
        };
        if request.operation == Operation::Update
            && let (Some(old), Some(new)) = (&request.old_object, &request.object)
            && let (Ok(old), Ok(new)) = (serde_json::to_value(old), serde_json::to_value(new))
            && moves_nothing(&old, &new)
        {
            return Vec::new();
        }
        let started = Instant::now();
        match tokio::time::timeout(DEADLINE, self.radius(request, &reach)).await {
            Ok(Ok(w)) => {
                tracing::debug!(kind = %request.kind.kind, name = %request.name,
                    took_ms = started.elapsed().as_millis() as u64, warnings = w.len(), "blast radius");
                w
            }
            Ok(Err(e)) => vec![format!(
                "patchbay: could not work out which ports this changes ({e}); run `patchbay plan`"
            )],
            Err(_) => vec![format!(
                "patchbay: could not work out which ports this changes within {} s; run `patchbay plan`",
                DEADLINE.as_secs()
            )],
        }
    }

    async fn radius(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        reach: &Reach,
    ) -> anyhow::Result<Vec<String>> {
        let kind = request.kind.kind.as_str();
        let key = (
            request.namespace.clone().unwrap_or_default(),
            request.name.clone(),
        );
        let value = |o: &Option<DynamicObject>| o.as_ref().map(serde_json::to_value).transpose();
        let (old, new) = (value(&request.old_object)?, value(&request.object)?);
        let ports = ports(&self.client, reach, old.as_ref()).await?;
        let mut switches = BTreeSet::new();
        if kind == "Switch" {
            switches.insert(key.clone());
        }
        // What the old and the new object name is read too (a SwitchPort relinked
        // to another configuration, a SmartNicConfiguration's next configuration).
        let reviewed = with_object(
            &with_object(&Fleet::default(), kind, &key, old.as_ref())?,
            kind,
            &(String::new(), String::new()),
            new.as_ref(),
        )?;
        let fleet = around(
            &self.client,
            ports,
            switches,
            &reviewed,
            self.tenancy.is_some(),
        )
        .await?;
        // Before: as stored (the review's old object); after: as written.
        let before = with_object(&fleet, kind, &key, old.as_ref())?;
        let after = with_object(&fleet, kind, &key, new.as_ref())?;
        let changes = plan(
            &before,
            &after,
            Rules {
                capabilities: &crate::backends::capabilities_of,
                tenancy: self.tenancy.as_ref(),
            },
        );
        let hosts: BTreeMap<String, HostFacts> = fleet
            .servers
            .iter()
            .map(|s| {
                let status = s.status.as_ref();
                (
                    format!("Server/{}", s.metadata.name.clone().unwrap_or_default()),
                    HostFacts {
                        phase: status.and_then(|st| st.phase).map(|p| p.to_string()),
                    },
                )
            })
            .collect();
        Ok(warnings(&changes, &hosts))
    }
}

impl Admit for BlastRadius {
    fn admit<'a>(
        &'a self,
        request: &'a AdmissionRequest<DynamicObject>,
    ) -> BoxFuture<'a, AdmissionResponse> {
        Box::pin(async move {
            let mut response = AdmissionResponse::from(request);
            let w = self.warnings(request).await;
            if !w.is_empty() {
                response.warnings = Some(w);
            }
            response
        })
    }
}
