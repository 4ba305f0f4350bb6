//! Per-controller wiring: for each controller, the watches that wake it (through
//! `crate::triggers`) and the context it runs with. Builds streams; the I/O is
//! the watches'.

use super::*;

/// SwitchPorts, on the [`port_runner`]: woken by every input of theirs — configuration, Switch, the
/// Switch's ProviderSwitch, the credentials Secret (metadata only), the Servers
/// cabled to them, the VLANPools — so a change starts a new attempt at once whatever
/// the backoff, and by their worker's notices (drift, the switch answering or not).
pub(super) fn switch_ports<S>(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    secrets: S,
    notices_rx: mpsc::UnboundedReceiver<ObjectRef<SwitchPort>>,
) -> impl std::future::Future<Output = ()> + Send + use<S>
where
    S: futures::Stream<Item = Result<PartialObjectMeta<Secret>, watcher::Error>> + Send + 'static,
{
    let ports = &w.ports.store;
    let (p1, p5) = (ports.clone(), ports.clone());
    let (i2, i3, i4) = (
        ctx.port_index.clone(),
        ctx.port_index.clone(),
        ctx.port_index.clone(),
    );
    let (s1, s2) = (w.switches.store.clone(), w.switches.store.clone());
    let ps = w.providers.store.clone();
    let own = own_triggers(w.ports.subscribe_ports(), ctx, |p| p.status.as_ref());
    type Wakes = futures::stream::BoxStream<'static, Vec<ObjectRef<SwitchPort>>>;
    let wakes: [Wakes; 8] = [
        own.map(|p| vec![ObjectRef::from_obj(&*p)]).boxed(),
        spec_changes(w.servers.subscribe(), w.servers.store.clone())
            .map(|s| triggers::ports_cabled_to::<SwitchPort>(&s, CabledPortKind::SwitchPort))
            .boxed(),
        w.pools
            .subscribe()
            .map(move |_| {
                p5.state()
                    .iter()
                    .map(|p| p.object_ref())
                    .collect::<Vec<_>>()
            })
            .boxed(),
        carried_changes(w.configs.subscribe(), w.configs.store.clone())
            .map(move |c| {
                triggers::ports_using_configuration(
                    &p1.state(),
                    &c.namespace().unwrap_or_default(),
                    &c.name_any(),
                )
            })
            .boxed(),
        w.switches
            .subscribe()
            .map(move |sw| {
                triggers::ports_of_switches(&i2.read(), sw.namespace().as_deref(), &[sw.name_any()])
            })
            .boxed(),
        w.providers
            .subscribe()
            .map(move |pv| {
                let ns = pv.namespace();
                let names =
                    triggers::switches_of_providers(&s1.state(), ns.as_deref(), &[pv.name_any()]);
                triggers::ports_of_switches(&i3.read(), ns.as_deref(), &names)
            })
            .boxed(),
        secrets
            .filter_map(|secret| {
                if let Err(e) = &secret {
                    tracing::debug!(error = %e, "Secret watch");
                }
                futures::future::ready(secret.ok())
            })
            .map(move |secret| {
                triggers::ports_using_secret(
                    &i4.read(),
                    &s2.state(),
                    &ps.state(),
                    secret.namespace().as_deref(),
                    &secret.name_any(),
                )
            })
            .boxed(),
        notices(notices_rx).map(|r| vec![r]).boxed(),
    ];
    let wakes = futures::stream::select_all(wakes).flat_map(futures::stream::iter);
    // A reconcile hands its device change to the switch's worker and returns
    // (hand-offs), so the slots no longer bound the batch sizes; they bound the
    // reconciles computing at once.
    h.run_ports(wakes, w.ports.cache(), switch_port::reconcile, ctx.clone())
}

/// Rollouts: each SwitchPortConfiguration's, each SmartNicConfiguration's and each
/// Switch's port entries', woken by its own changes and, while a wave of it is
/// under way, by the changes of the ports it moves. Each kind has its own context (probes, recent pins): they are
/// kept by port key, and a SwitchPort and a SmartNicPort may share one.
pub(super) fn rollouts(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    hosts: &kube::runtime::reflector::Store<crate::api::metal3::BareMetalHost>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let configs = w.configs.store.clone();
    let controller = Controller::for_shared_stream(w.configs.subscribe(), configs.clone())
        .watches_shared_stream(w.ports.subscribe_ports(), move |p| {
            rollout::rollout_of_port(&configs, p.namespace(), p.spec.configuration.as_ref())
        })
        .with_config(Config::default().concurrency(4));
    let snic_configs = w.smartnic_configs.store.clone();
    let snic_controller =
        Controller::for_shared_stream(w.smartnic_configs.subscribe(), snic_configs.clone())
            .watches_shared_stream(w.smartnics.subscribe(), move |p| {
                rollout::rollout_of_port(
                    &snic_configs,
                    p.namespace(),
                    p.spec.configuration.as_ref(),
                )
            })
            .with_config(Config::default().concurrency(2));
    let switches = w.switches.store.clone();
    let index = ctx.port_index.clone();
    let switch_controller = Controller::for_shared_stream(w.switches.subscribe(), switches.clone())
        .watches_shared_stream(w.ports.subscribe_ports(), move |p| {
            rollout::switch_rollout_of_port(
                &switches,
                p.namespace(),
                super::super::switch_port::switch_name(&p, &index),
            )
        })
        .with_config(Config::default().concurrency(2));
    let rollout_ctx = || {
        Arc::new(rollout::RolloutContext {
            shared: ctx.clone(),
            probes: Default::default(),
            pins: Default::default(),
            hosts: hosts.clone(),
        })
    };
    let switch_ports = h.run("Rollout", controller, rollout::reconcile, rollout_ctx());
    let smartnic_ports = h.run(
        "SmartNicRollout",
        snic_controller,
        rollout::reconcile,
        rollout_ctx(),
    );
    let switch_entries = h.run(
        "SwitchRollout",
        switch_controller,
        rollout::reconcile,
        rollout_ctx(),
    );
    async move {
        futures::join!(switch_ports, smartnic_ports, switch_entries);
    }
}

/// Switches: woken by their ports (owns), their ProviderSwitch and their worker's
/// reachability notices.
pub(super) fn switches(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    notices_rx: mpsc::UnboundedReceiver<ObjectRef<Switch>>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let s3 = w.switches.store.clone();
    let (s4, s5) = (w.switches.store.clone(), w.switches.store.clone());
    let controller =
        Controller::for_shared_stream(w.switches.subscribe(), w.switches.store.clone())
            // A port's first events (no status yet: just created, by this controller
            // or ahead of it by a user) are what the Switch keeps its ports by; its
            // deletion wakes the Switch through the deletion hook. A port's status
            // changes say nothing the Switch shows, and at 10,000 ports they woke every
            // Switch on every transition (measured: most of the operator's CPU).
            .owns_shared_stream(
                w.ports
                    .subscribe()
                    .filter(|p| futures::future::ready(!p.has_status()))
                    .map(|p| Arc::new(p.to_port())),
            )
            .watches_shared_stream(w.providers.subscribe(), move |p| {
                let ns = p.namespace();
                triggers::switches_of_providers(&s3.state(), ns.as_deref(), &[p.name_any()])
                    .into_iter()
                    .map(|n| ObjectRef::new(&n).within(ns.as_deref().unwrap_or_default()))
                    .collect::<Vec<_>>()
            })
            // A host's binding and phase move its BGP neighbours; a claim's change
            // what they may announce.
            .watches_shared_stream(w.servers.subscribe(), move |s| {
                triggers::bgp_switches_of_server(&s4.state(), &s)
            })
            .watches_shared_stream(w.claims.subscribe(), move |c| {
                triggers::bgp_switches_of_claim(&s5.state(), &c)
            })
            .reconcile_on(notices(notices_rx))
            // No debounce: kube's keeps postponing an object's reconcile for as long
            // as wakes for it come faster than the debounce, and a ToR whose hosts
            // are provisioned together (each Server's every write wakes its BGP
            // Switch), or claims with BGP changing often, kept a Switch's speaker
            // pass and neighbour read waiting for as long as that lasted (found by
            // the failing-speaker test, with wakes every 200 ms against 500 ms). A
            // burst still costs at most two reconciles: the scheduler holds one
            // pending request per Switch while one runs.
            .with_config(Config::default().concurrency(8));
    let switch_ctx = Arc::new(switch::SwitchContext {
        shared: ctx.clone(),
        own: Default::default(),
    });
    h.run("Switch", controller, switch::reconcile, switch_ctx)
}

/// ProviderSwitches: held while a Switch or SmartNicPort uses them.
pub(super) fn provider_switches(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    deleted_users: mpsc::UnboundedReceiver<ObjectRef<ProviderSwitch>>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let controller =
        Controller::for_shared_stream(w.providers.subscribe(), w.providers.store.clone())
            .watches_shared_stream(w.switches.subscribe(), |s| {
                Some(
                    ObjectRef::<ProviderSwitch>::new(&s.spec.provider.name)
                        .within(&s.namespace().unwrap_or_default()),
                )
            })
            .watches_shared_stream(w.smartnics.subscribe(), |p| {
                Some(
                    ObjectRef::<ProviderSwitch>::new(&p.spec.provider.name)
                        .within(&p.namespace().unwrap_or_default()),
                )
            })
            .reconcile_on(notices(deleted_users));
    h.run(
        "ProviderSwitch",
        controller,
        provider_switch::reconcile,
        ctx.clone(),
    )
}

/// SmartNicPorts: woken by their configuration, the SwitchPort they chain to (or
/// claimed), their provider, the Servers cabled to them, the VLANPools, and the
/// notices of their provider's worker.
pub(super) fn smartnic_ports(
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    notices_rx: mpsc::UnboundedReceiver<ObjectRef<SmartNicPort>>,
) -> impl std::future::Future<Output = ()> + Send + use<> {
    let snics = &w.smartnics.store;
    let (n1, n2, n3, n4) = (snics.clone(), snics.clone(), snics.clone(), snics.clone());
    let own = own_triggers(w.smartnics.subscribe(), ctx, |p| p.status.as_ref());
    let controller = Controller::for_shared_stream(own, snics.clone())
        .watches_shared_stream(
            spec_changes(w.servers.subscribe(), w.servers.store.clone()),
            |s| triggers::ports_cabled_to::<SmartNicPort>(&s, CabledPortKind::SmartNicPort),
        )
        .watches_shared_stream(w.pools.subscribe(), move |_| {
            n4.state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(
            carried_changes(
                w.smartnic_configs.subscribe(),
                w.smartnic_configs.store.clone(),
            ),
            move |c| {
                triggers::smartnics_using_configuration(
                    &n1.state(),
                    &c.namespace().unwrap_or_default(),
                    &c.name_any(),
                )
            },
        )
        .watches_shared_stream(w.ports.subscribe_ports(), move |sp| {
            triggers::smartnics_chained_to(&n2.state(), &sp)
        })
        .watches_shared_stream(w.providers.subscribe(), move |pv| {
            triggers::smartnics_of_provider(&n3.state(), pv.namespace().as_deref(), &pv.name_any())
        })
        .reconcile_on(notices(notices_rx))
        .with_config(Config::default().concurrency(64));
    h.run(
        "SmartNicPort",
        controller,
        smartnic_port::reconcile,
        ctx.clone(),
    )
}

/// Allocation and the hosts: ServerClaims woken by the Servers (and BareMetalHosts)
/// that may complete or concern them; Servers by their own changes, the ports they
/// drive or are cabled to, their claim, the configurations they provision with, the
/// pools and their BareMetalHost; BareMetalHosts carrying their own ports likewise;
/// the Metal3 cache that follows its CRD. One Server watch feeds the cache the
/// allocator plans from and then both controllers, so a claim is never woken by a
/// Server change its plan cannot see. A shared stream carries no deletions: a
/// deleted Server wakes the claims it concerns through `gone`, once the cache no
/// longer has it. Also the orphan sweep, on start-up, periodically and when a Server
/// names an unknown claim. Returns the BareMetalHost cache too (the rollouts read
/// hosts from it).
pub(super) fn hosts_and_claims(
    settings: &Settings,
    w: &Watches,
    h: &Harness,
    ctx: &Arc<Context>,
    wc: &watcher::Config,
    gone: mpsc::UnboundedReceiver<ObjectRef<ServerClaim>>,
    metal3_api: Option<&Metal3Watches>,
) -> (
    impl std::future::Future<Output = ()> + Send + use<>,
    kube::runtime::reflector::Store<crate::api::metal3::BareMetalHost>,
) {
    let client = &ctx.client;
    // Metal3's hosts: a cache whose watch follows the BareMetalHost CRD (installed
    // before or after patchbay, or removed), with a listed gate of its own — the
    // other caches' gate does not wait for Metal3.
    let (hosts, host_writer, host_run) = metal3::hosts_cache(client, wc, h.stopped());
    let (hosts_for_claims, hosts_for_servers, hosts_for_hosts) = (
        subscribe(&host_writer),
        subscribe(&host_writer),
        subscribe(&host_writer),
    );
    let host_store = host_writer.as_reader();
    let host_watch = host_run(host_writer);
    let (servers, claims) = (w.servers.store.clone(), w.claims.store.clone());
    let alloc = Arc::new(
        Allocator::new(
            client.clone(),
            settings.namespace.clone(),
            servers.clone(),
            claims.clone(),
            hosts,
            EventPublisher::new(client.clone(), reporter()),
        )
        .with_tenancy(settings.tenancy.clone())
        .with_bgp(ctx.stores.clone()),
    );
    let (c1, c2, c3) = (claims.clone(), claims.clone(), claims.clone());
    let (v4, v1, v2, v3, v6, v7, v5, v8) = (
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
        servers.clone(),
    );
    let claim_ctl = Controller::for_shared_stream(w.claims.subscribe(), claims.clone())
        .watches_shared_stream(w.servers.subscribe(), move |s| {
            triggers::claims_for_server(&c1.state(), &s)
        })
        .watches_shared_stream(w.pools.subscribe(), move |_| {
            c3.state()
                .iter()
                .map(|c| ObjectRef::from_obj(&**c))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(hosts_for_claims, move |host| {
            triggers::servers_of_host(&v4.state(), &host)
                .iter()
                .filter_map(|r| v4.get(r))
                .flat_map(|s| triggers::claims_for_server(&c2.state(), &s))
                .collect::<Vec<_>>()
        })
        .reconcile_on(notices(gone))
        .with_config(Config::default().concurrency(8));
    // Metal3 coming or going changes what every linked Server follows, and a cache
    // that fills or empties wakes nobody by itself.
    let (metal3_tx, metal3_rx) = mpsc::unbounded_channel();
    let metal3_changes = {
        let (mut hosts, servers, mut stop) =
            (alloc.hosts.clone(), servers.clone(), h.stop.subscribe());
        async move {
            loop {
                tokio::select! {
                    changed = hosts.next_settled_change() => if !changed { return },
                    _ = stop.recv() => return,
                }
                wake(
                    &metal3_tx,
                    triggers::servers_linked_to_hosts(&servers.state()),
                );
            }
        }
    };
    let server_ctl = Controller::for_shared_stream(w.servers.subscribe(), servers.clone())
        .watches_shared_stream(w.ports.subscribe_ports(), move |p| {
            triggers::servers_of_port(&v1.state(), CabledPortKind::SwitchPort, &p.metadata)
        })
        .watches_shared_stream(w.smartnics.subscribe(), move |p| {
            triggers::servers_of_port(&v2.state(), CabledPortKind::SmartNicPort, &p.metadata)
        })
        .watches_shared_stream(w.claims.subscribe(), move |c| {
            triggers::servers_of_claim(&v3.state(), &c)
        })
        .watches_shared_stream(w.configs.subscribe(), move |c| {
            triggers::servers_provisioned_with(&v6.state(), &c)
        })
        .watches_shared_stream(w.pools.subscribe(), move |_| {
            v7.state()
                .iter()
                .map(|s| ObjectRef::from_obj(&**s))
                .collect::<Vec<_>>()
        })
        .watches_shared_stream(hosts_for_servers, move |host| {
            triggers::servers_of_host(&v5.state(), &host)
        })
        .watches_shared_stream(w.switches.subscribe(), move |sw| {
            triggers::servers_of_switch(&v8.state(), &sw)
        })
        .reconcile_on(notices(metal3_rx))
        .with_config(Config::default().concurrency(8));
    // Opted in (--bgp-node-selector): a selected Node that appears, changes or goes
    // wakes the Server it is.
    let server_ctl = match &settings.bgp_nodes {
        Some(b) => {
            let cfg = if b.selector.is_empty() {
                wc.clone()
            } else {
                wc.clone().labels(&b.selector)
            };
            server_ctl.watches(kube::Api::<Node>::all(client.clone()), cfg, |node: Node| {
                crate::decide::bgp_nodes::server_of_node(
                    node.labels(),
                    node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
                )
                .map(ObjectRef::<Server>::new)
            })
        }
        None => server_ctl,
    };
    // BareMetalHosts that carry their own ports: woken by their own changes, the
    // ports they drive or are cabled to and the configurations they provision with.
    let store = alloc.hosts.store().clone();
    let (h1, h2, h3, h4) = (store.clone(), store.clone(), store.clone(), store.clone());
    let h6 = store.clone();
    let host_ctl = Controller::for_shared_stream(hosts_for_hosts, store)
        .watches_shared_stream(w.ports.subscribe_ports(), move |p| {
            triggers::hosts_of_port(&h1.state(), CabledPortKind::SwitchPort, &p.metadata)
        })
        .watches_shared_stream(w.smartnics.subscribe(), move |p| {
            triggers::hosts_of_port(&h2.state(), CabledPortKind::SmartNicPort, &p.metadata)
        })
        .watches_shared_stream(w.configs.subscribe(), move |c| {
            triggers::hosts_provisioned_with(&h3.state(), &c)
        })
        .watches_shared_stream(w.switches.subscribe(), move |sw| {
            triggers::hosts_of_switch(&h4.state(), &sw)
        })
        // A Server linking to a host takes its ports over.
        .watches_shared_stream(
            spec_changes(w.servers.subscribe(), w.servers.store.clone()),
            move |s| triggers::hosts_of_server(&h6.state(), &s),
        );
    // With Metal3's switch API: a BareMetalSwitch that appears, changes or goes
    // wakes the hosts whose interfaces are looked up among its ports.
    let host_ctl = match metal3_api {
        Some(m) => {
            let h5 = alloc.hosts.store().clone();
            host_ctl
                .watches_shared_stream(m.switches.subscribe(), move |_| {
                    triggers::hosts_with_interfaces(&h5.state())
                })
                // A host's HardwareData has the host's name.
                .watches_shared_stream(m.hardware.subscribe(), |hd| {
                    Some(
                        ObjectRef::<crate::api::metal3::BareMetalHost>::new(&hd.name_any())
                            .within(hd.metadata.namespace.as_deref().unwrap_or_default()),
                    )
                })
        }
        None => host_ctl,
    }
    .with_config(Config::default().concurrency(8));
    let server_ctx = Arc::new(server::ServerCtx {
        alloc: alloc.clone(),
        world: HostWorld {
            client: client.clone(),
            switch_ports: w.ports.cache(),
            port_index: w.port_index.clone(),
            smartnic_ports: w.smartnics.store.clone(),
            configurations: w.configs.store.clone(),
            events: EventPublisher::new(client.clone(), reporter()),
            stores: ctx.stores.clone(),
            tenancy: ctx.settings.tenancy.clone(),
            bgp_nodes: ctx.settings.bgp_nodes.clone(),
            bare_metal_hosts: alloc.hosts.store().clone(),
            metal3: metal3_api.map(|m| crate::controllers::host::Metal3World {
                switches: m.switches.store.clone(),
                switches_listed: m.switches.listed.clone(),
                hardware: m.hardware.store.clone(),
                provisioning: settings.metal3_provisioning.clone(),
            }),
        },
    });
    let claim_ctl = h.run(
        "ServerClaim",
        claim_ctl,
        server_claim::reconcile,
        alloc.clone(),
    );
    let host_ctl = h.run(
        "BareMetalHost",
        host_ctl,
        bare_metal_host::reconcile,
        server_ctx.clone(),
    );
    let server_ctl = h.run("Server", server_ctl, server::reconcile, server_ctx);
    let sweeper = orphan_sweeps(alloc, h);
    let run = run_parts(parts![
        host_watch,
        metal3_changes,
        claim_ctl,
        host_ctl,
        server_ctl,
        sweeper
    ]);
    (run, host_store)
}

/// Metal3's switch API, with `--metal3-switches` (otherwise nothing is watched: the
/// CRDs may not be installed). Each BareMetalSwitch keeps the ProviderSwitch
/// derived from it, whose changes (its check's status) wake it, as do the changes
/// of the Switches that name it as their provider. Each HostNetworkAttachment keeps
/// the SwitchPortConfiguration derived from it.
pub(super) fn metal3_switches(
    settings: &Settings,
    w: &Watches,
    metal3_api: Option<&Metal3Watches>,
    h: &Harness,
    ctx: &Arc<Context>,
) -> Part {
    let Some(m) = metal3_api.filter(|_| settings.metal3_switches) else {
        return Box::pin(async {});
    };
    let switches = Controller::for_shared_stream(m.switches.subscribe(), m.switches.store.clone())
        .owns_shared_stream(w.providers.subscribe())
        // A Switch's findings on the device (its Ready condition) are the
        // BareMetalSwitch's of the same name as its provider, if there is one.
        .watches_shared_stream(w.switches.subscribe(), |s| {
            let ns = s.namespace().unwrap_or_default();
            Some(ObjectRef::new(&s.spec.provider.name).within(&ns))
        })
        // One at a time: two BareMetalSwitches on one device never pass the
        // one-writer check together (see metal3_switch::reconcile).
        .with_config(Config::default().concurrency(1));
    let attachments =
        Controller::for_shared_stream(m.attachments.subscribe(), m.attachments.store.clone())
            .owns_shared_stream(w.configs.subscribe())
            .with_config(Config::default().concurrency(4));
    let switches = h.run(
        "BareMetalSwitch",
        switches,
        metal3_switch::reconcile,
        ctx.clone(),
    );
    let attachments = h.run(
        "HostNetworkAttachment",
        attachments,
        metal3_attachment::reconcile,
        ctx.clone(),
    );
    Box::pin(run_parts(parts![switches, attachments]))
}
