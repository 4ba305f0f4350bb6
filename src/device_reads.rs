//! Reading ports from their switches for a plan (`patchbay plan --read-devices`):
//! each switch with changing ports is read once, one session of `get_ports` for
//! those ports, and only where its ProviderSwitch keeps sessions for tools
//! (`options.readSessions`): the operator's worker opens at most
//! `maxSessions − readSessions`, so one read beside it stays within `maxSessions`.
//! Nothing is written to a device. The Secrets are read with the caller's client;
//! no value of theirs reaches an error. Device and network I/O.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use patchbay_providers::model::ObservedPort;
use patchbay_providers::values::PortName;

use crate::decide::plan::{Place, PortChange, place_of};

/// What a switch's read gave: each port's reading by device port name, or why the
/// switch was not read.
pub enum Read {
    /// Each port's reading, or its error.
    Ports(BTreeMap<String, Result<ObservedPort, String>>),
    /// Not read, and why.
    Not(String),
}

/// Switches read at once.
pub const READS_IN_FLIGHT: usize = 8;

/// Reads every switch with changing ports, one session each, where its
/// ProviderSwitch keeps sessions for tools (`options.readSessions`): the readings by
/// (namespace, Switch).
pub async fn read_devices(client: &kube::Client, changes: &[PortChange]) -> BTreeMap<Place, Read> {
    let mut groups: BTreeMap<Place, Vec<&PortChange>> = BTreeMap::new();
    for c in changes {
        groups.entry(place_of(c)).or_default().push(c);
    }
    futures::stream::iter(groups)
        .map(|(key, changes)| async move {
            let read = read_switch(client, &key.0, &changes).await;
            (key, read)
        })
        .buffer_unordered(READS_IN_FLIGHT)
        .collect()
        .await
}

async fn read_switch(client: &kube::Client, ns: &str, changes: &[&PortChange]) -> Read {
    let Some(provider) = changes.iter().find_map(|c| c.provider.as_ref()) else {
        return Read::Not("its ProviderSwitch is not known".into());
    };
    let options = provider.spec.options.clone().unwrap_or_default();
    if options.tool_sessions() == 0 {
        return Read::Not(
            "its ProviderSwitch keeps no session for tools (options.readSessions is 0): \
             every one of its maxSessions is the operator's"
                .into(),
        );
    }
    let secret = match &provider.spec.credentials_secret_ref {
        None => None,
        Some(r) => {
            let ns = r.namespace.clone().unwrap_or_else(|| ns.to_owned());
            match Api::<Secret>::namespaced(client.clone(), &ns)
                .get(&r.name)
                .await
            {
                Ok(s) => Some(s),
                Err(e) => {
                    return Read::Not(format!(
                        "its credentials Secret {ns}/{} could not be read: {e}",
                        r.name
                    ));
                }
            }
        }
    };
    let ports: Vec<PortName> = changes
        .iter()
        .filter_map(|c| PortName::parse(c.device_port.as_deref()?).ok())
        .collect();
    let backends = crate::backends::Backends::default();
    let device = match backends.build(provider, secret.as_ref(), &ports) {
        Ok(d) => d,
        Err(e) => return Read::Not(format!("no backend: {e}")),
    };
    let read = device.get_ports(&ports).await;
    device.close_idle().await;
    match read {
        Ok(reads) => Read::Ports(
            reads
                .into_iter()
                .map(|(p, r)| (p.as_str().to_owned(), r.map_err(|e| e.to_string())))
                .collect(),
        ),
        Err(e) => Read::Not(format!("the read failed: {e}")),
    }
}
