//! The `HttpProbe` gate's probes (`spec.rollout.probe`): each host of the wave under
//! way whose port's change landed at least `initialDelaySeconds` ago gets an HTTP GET
//! every `periodSeconds` until the wave is judged, at its own address. I/O: TCP to
//! each host, and a GET of a BareMetalHost for its address; what a probe means is
//! [`crate::decide::rollout`]'s ([`Probe`], [`Probed`]).
//!
//! The address is the host's, never the policy's: a Server's `spec.hostAddress`,
//! else the inspected address of its boot MAC on its BareMetalHost
//! (`spec.bareMetalHostRef`); a BareMetalHost's inspected address of its
//! `bootMACAddress`. A tenant's policy names a port and a path on its own hosts, and
//! reaches nothing else. A host whose address is not known cannot be probed: the
//! gate says it cannot be evaluated and the wave fails at its progress deadline.
//!
//! What each host answered is kept here, per port and pin (in memory: an operator
//! restarted mid-gate probes again from nothing, which only delays the verdict), and
//! forgotten when the pin is no longer the rollout's wave under way.

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::super::context::Context;
use crate::api::metal3::BareMetalHost;
use crate::decide::rollout::{Probe, Probed};

/// Probes at once (a wave of 2,500 hosts is probed 64 at a time).
const IN_FLIGHT: usize = 64;

/// The most of a response read: its status line.
const STATUS_LINE_MAX: usize = 1024;

/// What each probed host showed, by (port `namespace/name`, pin).
#[derive(Default)]
pub struct ProbeBook(parking_lot::Mutex<HashMap<(String, String), Entry>>);

#[derive(Default, Clone)]
struct Entry {
    /// The host's address, once known.
    address: Option<String>,
    probed: Probed,
}

/// A host of the wave to probe: its port's key, its host (`Server/<name>` or
/// `BareMetalHost/<ns>/<name>`), and when its port's change landed.
pub struct Target<'a> {
    /// The port, `namespace/name`.
    pub port: &'a str,
    /// Its host.
    pub host: &'a str,
    /// When its change landed (Unix seconds), if it has.
    pub landed: Option<i64>,
}

impl ProbeBook {
    /// Probes every target of the wave pinned `pin` that is due at `now` (Unix
    /// seconds), and returns what each target showed so far (in `targets`' order).
    /// Whatever the book holds of these ports under another pin is forgotten.
    pub async fn probe(
        &self,
        ctx: &Context,
        probe: &Probe,
        pin: &str,
        targets: &[Target<'_>],
        now: i64,
    ) -> Vec<Probed> {
        let due: Vec<(usize, Option<String>)> = {
            let mut book = self.0.lock();
            let ports: std::collections::HashSet<&str> = targets.iter().map(|t| t.port).collect();
            book.retain(|(port, p), _| !ports.contains(port.as_str()) || p == pin);
            targets
                .iter()
                .enumerate()
                .filter_map(|(i, t)| {
                    let e = book.entry(key(t.port, pin)).or_default();
                    probe
                        .due(&e.probed, t.landed, now)
                        .then(|| (i, e.address.clone()))
                })
                .collect()
        };
        let results: Vec<(usize, Option<String>, Option<bool>)> = futures::stream::iter(due)
            .map(|(i, known)| async move {
                let address = match known {
                    Some(a) => Some(a),
                    None => address_of(ctx, targets[i].host).await,
                };
                let answered = match &address {
                    Some(a) => Some(get(probe, a).await),
                    None => None,
                };
                (i, address, answered)
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let mut book = self.0.lock();
        for (i, address, answered) in results {
            let e = book.entry(key(targets[i].port, pin)).or_default();
            e.address = address;
            match answered {
                Some(answered) => e.probed.record(now, answered),
                // Not the host's failure: the gate cannot be evaluated for it.
                None => {
                    tracing::debug!(host = targets[i].host, "no address known to probe");
                    e.probed.unaddressed(now);
                }
            }
        }
        targets
            .iter()
            .map(|t| {
                book.get(&key(t.port, pin))
                    .map(|e| e.probed)
                    .unwrap_or_default()
            })
            .collect()
    }

    /// Forgets every probe of the ports `ports` (their wave is over).
    pub fn forget(&self, ports: &[&str]) {
        let ports: std::collections::HashSet<&str> = ports.iter().copied().collect();
        self.0
            .lock()
            .retain(|(port, _), _| !ports.contains(port.as_str()));
    }
}

/// A port's entry in the book under `pin`.
fn key(port: &str, pin: &str) -> (String, String) {
    (port.to_owned(), pin.to_owned())
}

/// The address of `host` (see the module doc), if known.
async fn address_of(ctx: &Context, host: &str) -> Option<String> {
    if let Some(name) = host.strip_prefix("Server/") {
        let server = ctx.stores.servers.get(&ObjectRef::new(name))?;
        if let Some(a) = &server.spec.host_address {
            return Some(a.clone());
        }
        let r = server.spec.bare_metal_host_ref.as_ref()?;
        let bmh = get_host(ctx, &r.namespace, &r.name).await?;
        return inspected(&bmh, &server.spec.boot_mac);
    }
    let (ns, name) = host.strip_prefix("BareMetalHost/")?.split_once('/')?;
    let bmh = get_host(ctx, ns, name).await?;
    let mac = bmh.spec.boot_mac_address.clone()?;
    inspected(&bmh, &mac)
}

async fn get_host(ctx: &Context, ns: &str, name: &str) -> Option<BareMetalHost> {
    let api: Api<BareMetalHost> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(name).await {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(host = name, error = %e, "BareMetalHost not read for its address");
            None
        }
    }
}

/// The inspected address of NIC `mac` of `bmh`.
fn inspected(bmh: &BareMetalHost, mac: &str) -> Option<String> {
    let status = serde_json::to_value(&bmh.status).ok()?;
    let found = crate::decide::validate::claim::inspected_address(Some(&status), mac);
    if found.is_none() {
        tracing::debug!(host = %bmh.name_any(), "no inspected address for the boot MAC");
    }
    found
}

/// One probe of `address`: connected, the request sent and the status line read
/// within the probe's timeout, and an answer ([`Probe::answered`]).
async fn get(probe: &Probe, address: &str) -> bool {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect((address, probe.port)).await?;
        stream.write_all(probe.request(address).as_bytes()).await?;
        let mut got = Vec::with_capacity(256);
        let mut buf = [0u8; 256];
        while !got.contains(&b'\n') && got.len() < STATUS_LINE_MAX {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        let line = got.split(|b| *b == b'\n').next().unwrap_or_default();
        std::io::Result::Ok(Probe::answered(&String::from_utf8_lossy(line)))
    };
    let timeout = Duration::from_secs(probe.timeout.max(1) as u64);
    matches!(tokio::time::timeout(timeout, exchange).await, Ok(Ok(true)))
}
