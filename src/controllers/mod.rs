//! The controllers, one room each, and what they share.
//!
//! | module | what it holds | I/O |
//! |---|---|---|
//! | [`runtime`] | the wiring: a kube-rs `Controller` per kind (SwitchPorts: [`port_runner`]), watches, notice streams, shutdown ([`run`]) | watches |
//! | [`port_runner`] | patchbay's own runner of SwitchPort reconciles (kube's rules, tables given back after a burst); decisions: [`crate::decide::reconcile_queue`] | tasks |
//! | [`switch_port`] | the SwitchPort controller: what a port refers to, its steps over its Switch's worker | Kubernetes, device (via the worker) |
//! | [`switch`] | the Switch controller: checks, reachability, one SwitchPort per `spec.ports` entry, ordered deletion | Kubernetes |
//! | [`neighbors`] | a Switch's neighbour reads (`spec.neighbors`, LLDP through an `os: linux` source) into its status; decisions: [`crate::decide::neighbors`] | device (the source's own session) |
//! | [`provider_switch`] | the ProviderSwitch controller: validity, held while used | Kubernetes |
//! | [`server_claim`] | the ServerClaim controller (the allocator): binds Servers to claims through [`crate::decide::allocation::plan`], the claim's status, inventory and credentials copy, release on deletion, the orphan sweep | Kubernetes |
//! | [`server`] | the Server controller, the one writer of Server status (mirrors `spec.claimRef`) | Kubernetes |
//! | [`metal3`] | Metal3's BareMetalHosts: a cache whose watch follows the CRD, with a listed gate of its own | watches |
//! | [`host`] | drives one host's ports through its phases (a Server, or a BareMetalHost carrying `spec.ports`), the Metal3 pause gate; decisions: [`crate::decide::phases`] | Kubernetes |
//! | [`server`], [`bare_metal_host`] | the host controllers over [`host`] | Kubernetes |
//! | [`bgp`] | a Switch's BGP speaker kept to its hosts' neighbours; each Server's peers published (annotations, password Secrets); decisions: [`crate::decide::bgp`] | Kubernetes, device (the speaker's own session) |
//! | [`bgp_nodes`] | opted in: a Server's peers on its Kubernetes Nodes and MetalLB `BGPPeer`s; decisions: [`crate::decide::bgp_nodes`] | Kubernetes |
//! | [`rollout`] | a SwitchPortConfiguration's edit rolled out in waves: ControllerRevisions, each moved port's pin, gates, rollback; decisions: [`crate::decide::rollout`] | Kubernetes |
//! | [`vlan_pool`] | VLANPool conditions and each namespace's grants ConfigMap | Kubernetes |
//! | [`smartnic_port`] | the SmartNicPort controller: a bridge port chained to its SwitchPort | Kubernetes, device (via the worker) |
//! | [`port_loop`] | the state-machine loop every port runs (and `demo --walk`), over two traits | none of its own |
//! | [`port_record`] | a port object in the API server, as the loop records on it | Kubernetes |
//! | [`events`] | Events, repeated Warnings as one series | Kubernetes |
//! | [`context`] | shared state: client, settings, workers, ledger, the Secret reader | spawns workers |
//!
//! The decisions these rooms act on live in [`crate::decide`] (status, failures,
//! triggers, the state machine, host phases). How a SwitchPort's status is computed:
//! [`crate::decide::status::port_status`]. What happens on a
//! Switch deletion: [`switch`] (`cleanup_switch`). How the Cisco commands are
//! produced: `providers/dialects/cisco_ios.yaml` through
//! `patchbay_providers::cli::dialect` (the `Dialect::configuration_lines` builder).

pub mod bare_metal_host;
pub mod bgp;
pub mod bgp_fleet;
pub mod bgp_nodes;
pub mod context;
pub mod events;
pub mod host;
pub mod metal3;
pub mod metal3_attachment;
pub mod metal3_switch;
pub mod neighbors;
pub mod port_loop;
pub mod port_record;
pub mod port_runner;
pub mod provider_switch;
pub mod rollout;
pub mod runtime;
pub mod secrets;
pub mod server;
pub mod server_claim;
pub mod smartnic_port;
pub mod switch;
pub mod switch_port;
pub mod vlan_pool;

pub use runtime::run;

use kube::runtime::controller::Action;

use crate::api::configuration_hash;
use crate::decide::failure::Failure;
use crate::decide::retry::Retry;
use crate::decide::state_machine::Requeue;

/// Errors of the controllers' Kubernetes I/O (device failures are port conditions,
/// see [`crate::decide::failure::Failure`]).
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The API server refused or failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The finalizer helper failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<ControllerError>>),
    /// A Switch cannot go while its ports exist.
    #[error("{0} SwitchPort(s) still exist; waiting for them to be cleaned and deleted")]
    PortsRemaining(usize),
    /// A ProviderSwitch cannot go while a Switch or SmartNicPort uses it.
    #[error("{0} Switch(es) or SmartNicPort(s) still use this ProviderSwitch")]
    SwitchesRemaining(usize),
    /// A deletion waits for something to finish first (what, in words).
    #[error("{0}")]
    Waiting(String),
}

/// The status code the API server answered `e` with, if it answered.
pub fn api_status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// A failed request to the API server as a port's failure, classed by the status
/// code it answered with.
pub fn kube_failure(e: kube::Error) -> Failure {
    let status = api_status(&e);
    Failure::kubernetes(e, status)
}

impl ControllerError {
    /// The categories a failed reconcile is counted under (a waiting one counts as
    /// `ok`).
    pub const CATEGORIES: &'static [&'static str] = &[
        "KubernetesError",
        "FinalizerError",
        "PortsRemaining",
        "SwitchesInUse",
    ];

    /// The reconcile's class in the one retry policy ([`Retry`]): a step that
    /// waits is not a failure; a Kubernetes answer by its status code; anything
    /// else from the client (transport, timeouts) may pass.
    pub fn retry(&self) -> Retry {
        use kube::runtime::finalizer::Error as F;
        fn kube(e: &kube::Error) -> Retry {
            api_status(e).map_or(Retry::Transient, Retry::of_status)
        }
        match self {
            ControllerError::Kube(e) => kube(e),
            ControllerError::Finalizer(f) => match f.as_ref() {
                F::ApplyFailed(e) | F::CleanupFailed(e) => e.retry(),
                F::AddFinalizer(e) | F::RemoveFinalizer(e) => kube(e),
                _ => Retry::Rejected,
            },
            ControllerError::PortsRemaining(_)
            | ControllerError::SwitchesRemaining(_)
            | ControllerError::Waiting(_) => Retry::Waiting,
        }
    }

    /// A bounded category for metrics and events.
    pub fn category(&self) -> &'static str {
        match self {
            ControllerError::Kube(_) => "KubernetesError",
            ControllerError::Finalizer(_) => "FinalizerError",
            ControllerError::PortsRemaining(_) => "PortsRemaining",
            ControllerError::SwitchesRemaining(_) => "SwitchesInUse",
            ControllerError::Waiting(_) => "Waiting",
        }
    }
}

/// A short digest of everything a port's decision depends on: its failures belong
/// to it, so a change to any input starts a new attempt at once.
fn inputs_digest(inputs: &serde_json::Value) -> String {
    configuration_hash(inputs).chars().take(16).collect()
}

fn is_true(map: &std::collections::BTreeMap<String, String>, key: &str) -> bool {
    map.get(key).is_some_and(|v| v == "true")
}

/// Writes `new` as the status of object `name` (a merge patch from `old`, see
/// [`crate::decide::status::status_merge_patch`]); nothing when they are equal, so a reconcile with
/// nothing changed writes nothing.
async fn write_status<K, S>(
    api: &kube::Api<K>,
    name: &str,
    old: &S,
    new: &S,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    write_status_at(api, name, None, old, new).await.map(drop)
}

/// [`write_status`] guarded by `resource_version`: when the object changed since it
/// was read, nothing is written and the API server answers 409 (a status that is a
/// state machine's memory must never be written from a stale read). Returns the
/// resourceVersion the write produced (none when nothing was written).
async fn write_status_at<K, S>(
    api: &kube::Api<K>,
    name: &str,
    resource_version: Option<String>,
    old: &S,
    new: &S,
) -> Result<Option<String>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    S: serde::Serialize + PartialEq,
{
    if old != new {
        let mut patch = crate::decide::status::status_merge_patch(old, new);
        if let Some(rv) = resource_version {
            patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
        }
        let written = api
            .patch_status(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(patch),
            )
            .await?;
        return Ok(written.meta().resource_version.clone());
    }
    Ok(None)
}

/// When the state machine's requeue asks the port to run again without a wake.
fn requeue_after(requeue: Requeue) -> Option<std::time::Duration> {
    match requeue {
        Requeue::Never | Requeue::DriftCheck | Requeue::Now => None,
        Requeue::After(t) => Some(t),
    }
}

/// The controller action for the state machine's requeue.
fn requeue_action(requeue: Requeue) -> Action {
    requeue_after(requeue).map_or_else(Action::await_change, Action::requeue)
}
