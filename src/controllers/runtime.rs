//! The wiring: one kube-rs `Controller` per kind, the watches that wake each
//! (through [`super::triggers`]), the streams the switch workers' notices arrive on,
//! the error policies, and a graceful shutdown of all of them together. Kubernetes
//! I/O (watches).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use super::context::{Context, Notices, api_for};
use super::events::EventPublisher;
use super::{ControllerError, provider_switch, smartnic_port, switch, switch_port, triggers};
use crate::api::{
    ProviderSwitch, SmartNicConfiguration, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration,
};
use crate::backends::Backends;
use crate::settings::Settings;

/// A stream of what arrives on `rx`.
fn notices<T: Send + 'static>(
    mut rx: mpsc::UnboundedReceiver<T>,
) -> impl futures::Stream<Item = T> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn log_errors<T, E: std::fmt::Display>(
    kind: &'static str,
) -> impl Fn(Result<T, E>) -> futures::future::Ready<()> {
    move |r| {
        if let Err(e) = r {
            tracing::debug!(error = %e, kind, "reconcile failed");
        }
        futures::future::ready(())
    }
}

fn port_error_policy(_: Arc<SwitchPort>, e: &ControllerError, _: Arc<Context>) -> Action {
    tracing::debug!(error = %e, category = e.category(), "SwitchPort reconcile error");
    if matches!(e, ControllerError::Kube(kube::Error::Api(s)) if s.code == 409) {
        // Someone else wrote first (the Switch controller adopting the port, say):
        // read again at once.
        return Action::requeue(Duration::from_millis(50));
    }
    Action::requeue(Duration::from_secs(1))
}

fn error_policy<K>(_: Arc<K>, e: &ControllerError, _: Arc<Context>) -> Action {
    tracing::debug!(error = %e, category = e.category(), "reconcile error");
    Action::requeue(Duration::from_secs(1))
}

/// Runs the controllers until `shutdown` completes.
pub async fn run(
    client: Client,
    settings: Settings,
    backends: Backends,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.clone();
    let ns = ns.as_deref();
    let (port_tx, port_rx) = mpsc::unbounded_channel();
    let (snic_tx, snic_rx) = mpsc::unbounded_channel();
    let (switch_tx, switch_rx) = mpsc::unbounded_channel();
    let wc = watcher::Config::default();
    let ports: kube::Api<SwitchPort> = api_for(&client, ns);
    let switches: kube::Api<Switch> = api_for(&client, ns);
    let providers: kube::Api<ProviderSwitch> = api_for(&client, ns);
    let port_ctl = Controller::new(ports.clone(), wc.clone());
    let port_store = port_ctl.store();
    let switch_ctl = Controller::new(switches.clone(), wc.clone());
    let switch_store = switch_ctl.store();
    let provider_ctl = Controller::new(providers.clone(), wc.clone());
    let provider_store = provider_ctl.store();
    let snic_ctl = Controller::new(api_for::<SmartNicPort>(&client, ns), wc.clone());
    let snic_store = snic_ctl.store();
    let ctx = Arc::new(Context::new(
        client.clone(),
        settings,
        backends,
        EventPublisher::new(
            client.clone(),
            Reporter {
                controller: "patchbay".into(),
                instance: std::env::var("HOSTNAME").ok(),
            },
        ),
        Notices {
            ports: port_tx,
            smartnics: snic_tx,
            switches: switch_tx,
        },
        port_store.clone(),
    ));

    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stopped = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };

    // SwitchPorts: woken by every input of theirs — configuration, Switch, the
    // Switch's ProviderSwitch, the credentials Secret (metadata only) — so a change
    // starts a new attempt at once whatever the backoff, and by their worker's
    // notices (drift, the switch answering or not).
    let (p1, p2, p3, p4) = (
        port_store.clone(),
        port_store.clone(),
        port_store.clone(),
        port_store.clone(),
    );
    let (s1, s2) = (switch_store.clone(), switch_store.clone());
    let secrets = watcher(
        api_for::<PartialObjectMeta<Secret>>(&client, ns),
        wc.clone(),
    )
    .touched_objects();
    let port_ctl = port_ctl
        .watches(
            api_for::<SwitchPortConfiguration>(&client, ns),
            wc.clone(),
            move |c| {
                triggers::ports_using_configuration(
                    &p1.state(),
                    &c.namespace().unwrap_or_default(),
                    &c.name_any(),
                )
            },
        )
        .watches(switches.clone(), wc.clone(), move |sw| {
            triggers::ports_of_switches(&p2.state(), sw.namespace().as_deref(), &[sw.name_any()])
        })
        .watches(providers.clone(), wc.clone(), move |pv| {
            let ns = pv.namespace();
            let names =
                triggers::switches_of_providers(&s1.state(), ns.as_deref(), &[pv.name_any()]);
            triggers::ports_of_switches(&p3.state(), ns.as_deref(), &names)
        })
        .watches_stream(secrets, move |secret| {
            triggers::ports_using_secret(
                &p4.state(),
                &s2.state(),
                &provider_store.state(),
                secret.namespace().as_deref(),
                &secret.name_any(),
            )
        })
        .reconcile_on(notices(port_rx))
        .with_config(Config::default().concurrency(64))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(switch_port::reconcile, port_error_policy, ctx.clone())
        .for_each(log_errors("SwitchPort"));

    // Switches: woken by their ports (owns), their ProviderSwitch and their worker's
    // reachability notices.
    let s3 = switch_store.clone();
    let switch_ctl = switch_ctl
        .owns(ports, wc.clone())
        .watches(providers.clone(), wc.clone(), move |p| {
            let ns = p.namespace();
            triggers::switches_of_providers(&s3.state(), ns.as_deref(), &[p.name_any()])
                .into_iter()
                .map(|n| ObjectRef::new(&n).within(ns.as_deref().unwrap_or_default()))
                .collect::<Vec<_>>()
        })
        .reconcile_on(notices(switch_rx))
        // Every port event wakes its Switch (owns); gather them.
        .with_config(
            Config::default()
                .concurrency(8)
                .debounce(Duration::from_millis(500)),
        )
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(switch::reconcile, error_policy, ctx.clone())
        .for_each(log_errors("Switch"));

    // ProviderSwitches: held while a Switch or SmartNicPort uses them.
    let provider_ctl = provider_ctl
        .watches(switches, wc.clone(), |s| {
            Some(
                ObjectRef::<ProviderSwitch>::new(&s.spec.provider.name)
                    .within(&s.namespace().unwrap_or_default()),
            )
        })
        .watches(api_for::<SmartNicPort>(&client, ns), wc.clone(), |p| {
            Some(
                ObjectRef::<ProviderSwitch>::new(&p.spec.provider.name)
                    .within(&p.namespace().unwrap_or_default()),
            )
        })
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(provider_switch::reconcile, error_policy, ctx.clone())
        .for_each(log_errors("ProviderSwitch"));

    // SmartNicPorts: woken by their configuration, the SwitchPort they chain to (or
    // claimed), their provider, and the notices of their provider's worker.
    let (n1, n2, n3) = (snic_store.clone(), snic_store.clone(), snic_store);
    let snic_ctl = snic_ctl
        .watches(
            api_for::<SmartNicConfiguration>(&client, ns),
            wc.clone(),
            move |c| {
                triggers::smartnics_using_configuration(
                    &n1.state(),
                    &c.namespace().unwrap_or_default(),
                    &c.name_any(),
                )
            },
        )
        .watches(api_for::<SwitchPort>(&client, ns), wc.clone(), move |sp| {
            triggers::smartnics_chained_to(&n2.state(), &sp)
        })
        .watches(providers, wc.clone(), move |pv| {
            triggers::smartnics_of_provider(&n3.state(), pv.namespace().as_deref(), &pv.name_any())
        })
        .reconcile_on(notices(snic_rx))
        .with_config(Config::default().concurrency(64))
        .graceful_shutdown_on(stopped(&stop_tx))
        .run(smartnic_port::reconcile, error_policy, ctx.clone())
        .for_each(log_errors("SmartNicPort"));

    let stopper = async move {
        shutdown.await;
        let _ = stop_tx.send(());
    };
    tokio::join!(port_ctl, switch_ctl, provider_ctl, snic_ctl, stopper);
}
