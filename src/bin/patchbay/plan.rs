//! `patchbay plan`: what applying manifests would do to the fleet's ports, before it
//! is done. Reads the files (and, with `--kubeconfig`, the live cluster), asks the
//! pure core which ports change ([`patchbay::decide::plan`], the operator's own
//! decision for each port) and each switch's backend what its batch would send
//! ([`patchbay_providers::offline`]: SSH CLI lines, a NETCONF edit's content,
//! Ansible's variables), and prints a table or JSON. Nothing is written. No device
//! is dialled, except with `--read-devices` ([`patchbay::device_reads`]: one
//! read-only session per switch where its ProviderSwitch keeps
//! `options.readSessions`), and then each batch is planned from what the switch
//! holds. Exit code: 0 nothing changes, 2 ports change (or would be refused), 1 the
//! plan could not be made.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use kube::api::{Api, ListParams};
use patchbay::api::Backend;
use patchbay::api::{
    ProviderSwitch, Server, SmartNicConfiguration, SmartNicPort, Switch, SwitchPort,
    SwitchPortConfiguration, VLANPool,
};
use patchbay::decide::plan::waves::{PlannedRollout, rollouts};
use patchbay::decide::plan::{
    Carry, Fleet, Place, PortChange, PortKind, Rules, place_of, plan, unchanged_members,
};
use patchbay::device_reads::{Read, read_devices};
use patchbay_providers::device::PortOperation;
use patchbay_providers::model::{AdminState, DesiredPort, ObservedPort, VlanMode, diff};
use patchbay_providers::offline::{
    Assumed, Operations, ansible_variables, assumed, cli_script, netconf_edit, ovsdb_transaction,
};
use patchbay_providers::values::PortName;
use serde_json::{Value, json};

/// How the plan is printed.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Output {
    /// A table per port, then each switch's operations.
    Table,
    /// One JSON document.
    Json,
}

/// What `patchbay plan` was asked.
pub struct Request {
    /// The manifests.
    pub files: Vec<PathBuf>,
    /// The live cluster to compare with.
    pub kubeconfig: Option<PathBuf>,
    /// Where a namespaced object that names none goes.
    pub namespace: String,
    /// Table or JSON.
    pub output: Output,
    /// Read the changing ports from their switches.
    pub read_devices: bool,
    /// The operator's tenancy settings (`None`: grants not checked).
    pub tenancy: Option<patchbay::decide::tenancy::Tenancy>,
    /// The operator's rollout defaults and a tenant's limits (`--rollout-*`).
    pub rollout: patchbay::decide::rollout::Defaults,
}

/// The patchbay objects of the manifests; other kinds are skipped.
fn manifests(files: &[PathBuf]) -> Result<(Fleet, Vec<String>)> {
    let mut fleet = Fleet::default();
    let mut skipped = Vec::new();
    for file in files {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading standard input")?
        } else {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        };
        let docs = patchbay_providers::yaml::documents(&text)
            .with_context(|| format!("{}: not YAML", file.display()))?;
        for (i, doc) in docs.into_iter().enumerate() {
            if doc.is_null() {
                continue;
            }
            let at = format!("{} document {i}", file.display());
            let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
            fn typed<T: serde::de::DeserializeOwned>(doc: Value, at: &str) -> Result<T> {
                serde_json::from_value(doc)
                    .with_context(|| format!("{at}: run `patchbay validate` on it"))
            }
            match kind.as_str() {
                "ProviderSwitch" => fleet.providers.push(typed(doc, &at)?),
                "Switch" => fleet.switches.push(typed(doc, &at)?),
                "SwitchPort" => fleet.ports.push(typed(doc, &at)?),
                "SwitchPortConfiguration" => fleet.configurations.push(typed(doc, &at)?),
                "Server" => fleet.servers.push(typed(doc, &at)?),
                "SmartNicPort" => fleet.smartnic_ports.push(typed(doc, &at)?),
                "SmartNicConfiguration" => fleet.smartnic_configurations.push(typed(doc, &at)?),
                "VLANPool" => fleet.pools.push(typed(doc, &at)?),
                _ => skipped.push(format!("{at}: {kind} (not planned)")),
            }
        }
    }
    Ok((fleet, skipped))
}

/// A client for the cluster `kubeconfig` reaches.
async fn client(kubeconfig: &PathBuf) -> Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// The fleet as the cluster holds it.
async fn live(client: &kube::Client) -> Result<Fleet> {
    async fn all<K>(client: &kube::Client) -> Result<Vec<K>>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(client.clone());
        let kind = K::kind(&());
        Ok(api
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {kind}s"))?
            .items)
    }
    Ok(Fleet {
        providers: all::<ProviderSwitch>(client).await?,
        switches: all::<Switch>(client).await?,
        ports: all::<SwitchPort>(client).await?,
        configurations: all::<SwitchPortConfiguration>(client).await?,
        servers: all::<Server>(client).await?,
        smartnic_ports: all::<SmartNicPort>(client).await?,
        smartnic_configurations: all::<SmartNicConfiguration>(client).await?,
        pools: all::<VLANPool>(client).await?,
    })
}

/// What a change's port holds on the device, as a plan shows it.
enum Held<'a> {
    /// Not read (no `--read-devices`, or the switch was not read: why).
    Assumed(Option<&'a str>),
    /// Read; whether it differs from what patchbay last established.
    Read(&'a ObservedPort, bool),
    /// The port's read failed.
    Failed(&'a str),
}

fn held<'a>(c: &PortChange, reads: &'a BTreeMap<Place, Read>) -> Held<'a> {
    match reads.get(&place_of(c)) {
        None => Held::Assumed(None),
        Some(Read::Not(why)) => Held::Assumed(Some(why)),
        Some(Read::Ports(ports)) => match c.device_port.as_ref().and_then(|p| ports.get(p)) {
            None => Held::Failed("not read"),
            Some(Err(e)) => Held::Failed(e),
            Some(Ok(o)) => {
                let established = match &c.before {
                    Carry::Set(d) => d.clone(),
                    _ => DesiredPort::clean(o.port.clone()),
                };
                Held::Read(o, !diff(&established, o).is_empty())
            }
        },
    }
}

/// A reading in a few words (see [`words`]); what the device did not report is left
/// out.
fn observed_words(o: &ObservedPort) -> String {
    let mut out = match &o.vlans {
        None => "VLANs not read".to_owned(),
        Some(VlanMode::Unconfigured) => "no VLANs".to_owned(),
        Some(VlanMode::Access { vlan }) => format!("access {vlan}"),
        Some(VlanMode::Trunk { native, allowed }) => {
            let native = native.map(|n| format!(" native {n}")).unwrap_or_default();
            format!("trunk{native} allowed {allowed}")
        }
    };
    if o.admin == Some(AdminState::Down) {
        out.push_str(", disabled");
    }
    if let Some(Some(m)) = o.mtu {
        out.push_str(&format!(", mtu {}", m.get()));
    }
    if let Some(acl) = &o.acl
        && !acl.is_empty()
    {
        out.push_str(&format!(", {} ACL rules", acl.len()));
    }
    if let Some(Some(l)) = o.lag {
        out.push_str(&format!(", group {}", l.group.get()));
    }
    out
}

fn held_words(h: &Held<'_>) -> String {
    match h {
        Held::Assumed(None) => "-".into(),
        Held::Assumed(Some(_)) => "not read".into(),
        Held::Read(o, false) => format!("{} (as established)", observed_words(o)),
        Held::Read(o, true) => format!("{} (DIFFERS)", observed_words(o)),
        Held::Failed(e) => format!("read failed: {e}"),
    }
}

/// A port state in a few words: `access 100`, `trunk native 10 allowed 20-21`,
/// `disabled`, `mtu 9000` (as a device that carries it reports it).
fn words(d: &DesiredPort) -> String {
    observed_words(&ObservedPort::from_desired(d))
}

/// A Switch as the table names it; a SmartNicPort's is its ProviderSwitch.
fn switch_words(ns: &str, switch: &str, kind: PortKind) -> String {
    match kind {
        PortKind::SwitchPort => format!("{ns}/{switch}"),
        PortKind::SmartNicPort => format!("{ns}/{switch} (SmartNIC)"),
    }
}

fn carry_words(c: &Carry, configuration: Option<&String>) -> String {
    let named = configuration.map(|c| format!("{c}: ")).unwrap_or_default();
    match c {
        Carry::Clean => "clean".into(),
        Carry::Set(d) => format!("{named}{}", words(d)),
        Carry::Refused(why) => format!("{named}refused ({why})"),
    }
}

/// What a plan says about itself, besides the ports: a line each, where it has one.
struct Notes {
    /// Whether the VLANPools' grants were checked.
    grants: Option<String>,
    /// Servers in the files, whose phases the plan does not follow.
    hosts: Option<String>,
    /// The rollouts the edit starts: which ports move in which wave.
    rollouts: Vec<PlannedRollout>,
}

/// One switch's batch: its ports in order, and what its backend would send.
struct Batch<'a> {
    switch: String,
    backend: String,
    changes: Vec<&'a PortChange>,
    operations: Operations,
}

fn batches<'a>(
    changes: &'a [PortChange],
    reads: &BTreeMap<Place, Read>,
    members: &BTreeMap<Place, Vec<DesiredPort>>,
) -> Vec<Batch<'a>> {
    let mut by_switch: BTreeMap<Place, Vec<&PortChange>> = BTreeMap::new();
    for c in changes {
        by_switch.entry(place_of(c)).or_default().push(c);
    }
    by_switch
        .into_iter()
        .map(|(place, changes)| {
            // The group members that stay as the device holds them: those the
            // change leaves alone, and those it would refuse (nothing is sent).
            let mut others = members.get(&place).cloned().unwrap_or_default();
            others.extend(changes.iter().filter_map(|c| match (&c.before, &c.after) {
                (Carry::Set(d), Carry::Refused(_)) if d.lag.is_some() => Some(d.clone()),
                _ => None,
            }));
            let (ns, switch, kind) = place;
            let provider = changes.iter().find_map(|c| c.provider.as_ref());
            let assumed: Vec<Assumed> = changes
                .iter()
                .filter_map(|c| {
                    let port = PortName::parse(c.device_port.as_deref()?).ok()?;
                    // What the device holds, where it was read; else what patchbay
                    // last established.
                    let now = match (held(c, reads), &c.before) {
                        (Held::Read(o, _), _) => Some(o.clone()),
                        (_, Carry::Set(d)) => assumed(Some(d)),
                        _ => None,
                    };
                    let op = match &c.after {
                        Carry::Set(d) => PortOperation::Set(d.clone()),
                        Carry::Clean => PortOperation::Reset(port),
                        // Refused: nothing is sent for it.
                        Carry::Refused(_) => return None,
                    };
                    Some((now, op))
                })
                .collect();
            let (backend, operations) = match provider {
                None => (
                    "?".to_owned(),
                    Operations::NotRendered("its ProviderSwitch is not known"),
                ),
                Some(p) => operations(p, &assumed, &others),
            };
            Batch {
                switch: switch_words(&ns, &switch, kind),
                backend,
                changes,
                operations,
            }
        })
        .collect()
}

/// What `provider`'s backend sends for `batch`, as far as it is known offline.
fn operations(
    provider: &ProviderSwitch,
    batch: &[Assumed],
    others: &[DesiredPort],
) -> (String, Operations) {
    let os = patchbay::backends::os_word(provider);
    let backend = serde_json::to_value(provider.spec.backend)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let label = format!("{backend} {os}");
    if batch.is_empty() {
        return (label, Operations::Lines(Vec::new()));
    }
    let ops = match provider.spec.backend {
        Backend::Ssh => match patchbay_providers::cli::dialect::for_os(&os) {
            Some(d) => {
                let save = provider
                    .spec
                    .options
                    .as_ref()
                    .and_then(|o| o.save_config)
                    .unwrap_or(true);
                Operations::Lines(cli_script(&d, save, batch, others))
            }
            None => Operations::NotRendered("no dialect for its os"),
        },
        Backend::Ansible => Operations::Variables(ansible_variables(batch)),
        Backend::Netconf => {
            let model = provider.spec.options.as_ref().and_then(|o| o.model.clone());
            match patchbay_providers::netconf::model::for_os(&os, model.as_deref()) {
                Some(m) => Operations::Edit(netconf_edit(&m, batch, others)),
                None => Operations::NotRendered("no NETCONF device model for its os"),
            }
        }
        Backend::Ovsdb => {
            let bridge = provider
                .spec
                .options
                .as_ref()
                .and_then(|o| o.bridge.clone());
            ovsdb_transaction(bridge.as_deref().unwrap_or_default(), batch, others)
        }
        Backend::Fixture => Operations::NotRendered("an in-memory switch"),
    };
    (label, ops)
}

fn json_of(
    changes: &[PortChange],
    batches: &[Batch<'_>],
    live: bool,
    reads: &BTreeMap<Place, Read>,
    notes: &Notes,
) -> Value {
    let device = |c: &PortChange| match held(c, reads) {
        Held::Assumed(None) => Value::Null,
        Held::Assumed(Some(why)) => json!({"read": false, "why": why}),
        Held::Read(o, differs) => {
            json!({"read": true, "state": observed_words(o), "differs": differs})
        }
        Held::Failed(e) => json!({"read": false, "why": e}),
    };
    let carry = |c: &Carry| match c {
        Carry::Clean => json!({"carries": "clean"}),
        Carry::Set(d) => json!({"carries": "set", "state": words(d)}),
        Carry::Refused(why) => json!({"carries": "refused", "reason": why}),
    };
    json!({
        "assumes": if !reads.is_empty() {
            "what each read switch holds; elsewhere the state patchbay last established"
        } else if live {
            "the state patchbay last established from the cluster's objects"
        } else {
            "no cluster: every port starts clean"
        },
        "grants": notes.grants,
        "hosts": notes.hosts,
        "rollouts": notes.rollouts.iter().map(|r| json!({
            "kind": r.kind,
            "configuration": r.configuration,
            "switches": r.switches,
            "waves": r.waves,
            "refused": r.refused.iter().map(|(f, w)| json!({"field": f, "reason": w})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "ports": changes.iter().map(|c| json!({
            "kind": match c.kind {
                PortKind::SwitchPort => "SwitchPort",
                PortKind::SmartNicPort => "SmartNicPort",
            },
            "namespace": c.namespace, "port": c.port, "switch": c.switch,
            "devicePort": c.device_port, "host": c.host, "claim": c.claim,
            "configuration": {"before": c.configuration.0, "after": c.configuration.1},
            "before": carry(&c.before), "after": carry(&c.after),
            "device": device(c),
        })).collect::<Vec<_>>(),
        "switches": batches.iter().map(|b| {
            let ops = match &b.operations {
                Operations::Lines(l) => json!({"lines": l}),
                Operations::Variables(v) => json!({"variables": v}),
                Operations::Edit(e) => json!({"editConfig": e}),
                Operations::Transact(t) => json!({"transact": t}),
                Operations::NotRendered(why) => json!({"notRendered": why}),
            };
            json!({"switch": b.switch, "backend": b.backend,
                   "ports": b.changes.len(), "operations": ops})
        }).collect::<Vec<_>>(),
    })
}

/// A rollout's waves, or why its policy is refused.
fn print_rollout(r: &PlannedRollout) {
    let ports: usize = r.waves.iter().map(Vec::len).sum();
    if !r.refused.is_empty() {
        println!(
            "Rollout of {} {}: refused, nothing moves:",
            r.kind, r.configuration
        );
        for (field, why) in &r.refused {
            println!("  {field}: {why}");
        }
        return;
    }
    let on = if r.kind == "SmartNicConfiguration" {
        "SmartNIC(s)"
    } else {
        "switch(es)"
    };
    println!(
        "Rollout of {} {}: {ports} port(s) on {} {on} in {} wave(s), \
         each gated before the next (spec.rollout over the operator's defaults):",
        r.kind,
        r.configuration,
        r.switches,
        r.waves.len()
    );
    for (i, wave) in r.waves.iter().enumerate() {
        let keys: Vec<&str> = wave.iter().map(String::as_str).collect();
        println!(
            "  wave {}{}: {}",
            i + 1,
            if i == 0 { " (canary)" } else { "" },
            patchbay::decide::rollout::some_of(&keys)
        );
    }
}

fn print_table(
    changes: &[PortChange],
    batches: &[Batch<'_>],
    live: bool,
    reads: &BTreeMap<Place, Read>,
    notes: &Notes,
) {
    let read = !reads.is_empty();
    let rows: Vec<Vec<String>> = changes
        .iter()
        .map(|c| {
            let mut row = vec![
                switch_words(&c.namespace, &c.switch, c.kind),
                c.port.clone(),
                c.device_port.clone().unwrap_or_else(|| "-".into()),
                c.host.clone().unwrap_or_else(|| "-".into()),
                c.claim.clone().unwrap_or_else(|| "-".into()),
                carry_words(&c.before, c.configuration.0.as_ref()),
            ];
            if read {
                row.push(held_words(&held(c, reads)));
            }
            row.push(carry_words(&c.after, c.configuration.1.as_ref()));
            row
        })
        .collect();
    let mut head = vec!["SWITCH", "PORT", "DEVICE PORT", "HOST", "CLAIM", "BEFORE"];
    if read {
        head.push("ON THE DEVICE");
    }
    head.push("AFTER");
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:<w$}   ", w = width[i]));
            }
        }
        println!("{}", out.trim_end());
    };
    if read {
        println!(
            "Read from each switch where its ProviderSwitch allows (options.readSessions); \
             elsewhere assumes what patchbay last established."
        );
    } else if live {
        println!(
            "Assumes each port carries what patchbay last established from the cluster's objects."
        );
    } else {
        println!("No cluster given: every port starts clean.");
    }
    for n in [&notes.grants, &notes.hosts].into_iter().flatten() {
        println!("{n}.");
    }
    println!();
    line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for r in &rows {
        line(r);
    }
    for r in &notes.rollouts {
        println!();
        print_rollout(r);
    }
    for b in batches {
        println!();
        let sent = b
            .changes
            .iter()
            .filter(|c| !matches!(c.after, Carry::Refused(_)))
            .count();
        let source = match reads.get(&place_of(b.changes[0])) {
            None => String::new(),
            Some(Read::Ports(_)) => ", planned from what it holds (read)".into(),
            Some(Read::Not(why)) => format!(", not read ({why})"),
        };
        println!(
            "Switch {} ({}){source}: {sent} port(s) in one batch (a lone first change may go \
             ahead in a batch of its own){}",
            b.switch,
            b.backend,
            if sent < b.changes.len() {
                format!(
                    ", {} refused: nothing sent for them",
                    b.changes.len() - sent
                )
            } else {
                String::new()
            }
        );
        match &b.operations {
            Operations::Lines(l) if l.is_empty() => println!("  (nothing to send)"),
            Operations::Lines(l) => l.iter().for_each(|l| println!("  {l}")),
            Operations::Variables(v) => {
                println!("  ansible-playbook apply.yml with:");
                let text = serde_json::to_string_pretty(v).unwrap_or_default();
                text.lines().for_each(|l| println!("    {l}"));
            }
            Operations::Edit(e) if e.is_empty() => println!("  (nothing to send)"),
            Operations::Edit(e) => {
                println!("  one edit-config of the candidate with:");
                e.iter().for_each(|x| println!("    {x}"));
            }
            Operations::Transact(t) if t.is_empty() => println!("  (nothing to send)"),
            Operations::Transact(t) => {
                println!(
                    "  one OVSDB transact on Open_vSwitch (rows by name here; the device's \
                     by _uuid; OpenFlow not shown):"
                );
                t.iter().for_each(|op| println!("    {op}"));
            }
            Operations::NotRendered(why) => println!("  (operations not shown: {why})"),
        }
    }
    let refused = changes
        .iter()
        .filter(|c| matches!(c.after, Carry::Refused(_)))
        .count();
    println!();
    println!(
        "Plan: {} port(s) on {} switch(es) change, {refused} of them refused.",
        changes.len(),
        batches.len()
    );
    if read {
        let differ = changes
            .iter()
            .filter(|c| matches!(held(c, reads), Held::Read(_, true)))
            .count();
        let not_read = reads.values().filter(|r| matches!(r, Read::Not(_))).count();
        println!(
            "Read {} of {} switch(es); {differ} port(s) differ on the device from what \
             patchbay last established.",
            reads.len() - not_read,
            reads.len()
        );
    }
}

/// Makes and prints the plan; the exit code.
pub async fn run(req: Request) -> std::process::ExitCode {
    match make(&req).await {
        Ok(changed) => std::process::ExitCode::from(if changed { 2 } else { 0 }),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn make(req: &Request) -> Result<bool> {
    if req.files.is_empty() {
        bail!("no manifests given");
    }
    let (manifests, skipped) = manifests(&req.files)?;
    let client = match &req.kubeconfig {
        Some(path) => Some(client(path).await?),
        None => None,
    };
    let before = match &client {
        Some(c) => live(c).await?,
        None => Fleet::default(),
    };
    let after = before.with(&manifests, &req.namespace);
    let rules = Rules {
        capabilities: &patchbay::backends::capabilities_of,
        tenancy: req.tenancy.as_ref(),
    };
    let changes = plan(&before, &after, rules);
    // Pools in play and tenancy off here: the plan cannot say what they refuse.
    let unchecked = req.tenancy.is_none() && !after.pools.is_empty();
    let reads = match (&client, req.read_devices) {
        (Some(c), true) => read_devices(c, &changes).await,
        _ => BTreeMap::new(),
    };
    // The group members that stay, where a change joins or leaves a group: an
    // aggregate's entries depend on them.
    let members = unchanged_members(&after, rules, &changes);
    let batches = batches(&changes, &reads, &members);
    let live = req.kubeconfig.is_some();
    let grants = match &req.tenancy {
        Some(t) => Some(format!(
            "VLANPool grants checked as the operator checks them (infra namespace {}, \
             parking VLAN {})",
            t.infra_namespace, t.parking_vlan
        )),
        None if unchecked => Some(format!(
            "VLANPool grants NOT checked: {} VLANPool(s) in play and no tenancy settings; \
             give the operator's --infra-namespace and --parking-vlan (or --config)",
            after.pools.len()
        )),
        None => None,
    };
    // Servers in the files are read for NIC MACs and whom ports serve; where their
    // ports go next is the host controller's to decide.
    let hosts = (!manifests.servers.is_empty()).then(|| {
        format!(
            "Host phases NOT followed: {} Server(s) in the files are read for NIC MACs and \
             tenants; the ports a host drives move through the host controller (its \
             status.ports), not shown here",
            manifests.servers.len()
        )
    });
    let infra = req.tenancy.as_ref().map(|t| t.infra_namespace.as_str());
    let rollouts = rollouts(&before, &after, &changes, &req.rollout, infra);
    let notes = Notes {
        grants,
        hosts,
        rollouts,
    };
    match req.output {
        Output::Json => {
            let mut doc = json_of(&changes, &batches, live, &reads, &notes);
            doc["skipped"] = json!(skipped);
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        Output::Table => {
            if !skipped.is_empty() {
                let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
                for s in &skipped {
                    let kind = s.rsplit(": ").next().unwrap_or_default();
                    *kinds
                        .entry(kind.trim_end_matches(" (not planned)"))
                        .or_default() += 1;
                }
                let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
                eprintln!("not planned: {} (`-o json` lists them)", kinds.join(", "));
            }
            print_table(&changes, &batches, live, &reads, &notes);
        }
    }
    Ok(!changes.is_empty())
}
