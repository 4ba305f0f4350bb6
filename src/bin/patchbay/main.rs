//! The `patchbay` command: print the CRDs, validate manifests, run the demo.
//! `anyhow` lives here only.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use patchbay::api;
use patchbay::decide::validate::manifests::{ValidationReport, validate_manifests};

mod api_client;
#[cfg(feature = "devtools")]
mod demo;
mod device;
mod plan;
#[cfg(feature = "devtools")]
mod walk;

/// patchbay: configures switch and SmartNIC ports from Kubernetes custom resources.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print every CRD as YAML (multi-document), or write one file per kind.
    Crds {
        /// Write `<kind>.yaml` files into this directory instead of printing.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Validate manifests (ProviderSwitch, Switch, SwitchPort, SwitchPortConfiguration,
    /// SmartNicPort, SmartNicConfiguration, Server, ServerClaim, VLANPool, and Metal3's
    /// BareMetalSwitch, HostNetworkAttachment and BareMetalHost networkInterfaces)
    /// without a cluster. Links are checked when both ends are in the
    /// given files: a SwitchPort's or a Server NIC's configuration against its Switch's
    /// port constraints, and a Switch's spec.provider (it must configure ports: not os
    /// frr or linux; a BareMetalSwitch stands for the ProviderSwitch patchbay derives
    /// from it). Exits 1 when anything is invalid.
    Validate {
        /// YAML files (multi-document allowed); `-` reads standard input.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Show what applying manifests would change on the fleet's ports, before it is
    /// done: each port that changes (its Switch, device port, host; what it carries
    /// before and after, or why the operator would refuse it) and what each switch's
    /// batch would send (SSH CLI lines, a NETCONF edit, Ansible variables). Without
    /// --kubeconfig every port starts clean; with it, from what the cluster's objects
    /// last set, or with --read-devices from what the devices hold. Nothing is written.
    /// Exits 0 when nothing changes, 2 when ports change (or would be refused), 1 on
    /// error.
    Plan {
        /// YAML files (multi-document allowed); `-` reads standard input.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Compare with the cluster this kubeconfig reaches (read only).
        #[arg(long, value_name = "PATH")]
        kubeconfig: Option<PathBuf>,
        /// The namespace of objects that name none.
        #[arg(long, short = 'n', default_value = "default")]
        namespace: String,
        /// `table` or `json`.
        #[arg(long, short = 'o', value_enum, default_value = "table")]
        output: plan::Output,
        /// Read each changing port from its switch (one read-only session per
        /// switch, only where its ProviderSwitch keeps `options.readSessions` for
        /// tools) and plan from what it holds. Needs --kubeconfig (the Secrets are
        /// read from the cluster).
        #[arg(long, requires = "kubeconfig")]
        read_devices: bool,
        /// The operator's config file (as `patchbay run --config`): its tenancy
        /// settings apply to the plan.
        #[arg(long, value_name = "FILE", env = "PATCHBAY_CONFIG")]
        config: Option<PathBuf>,
        /// As the operator's `--infra-namespace`: with it the plan checks VLANPool
        /// grants as the operator does (give the operator's settings, or the plan
        /// shows grants as unchecked) [default: none, tenancy off].
        #[arg(long, env = "PATCHBAY_INFRA_NAMESPACE")]
        infra_namespace: Option<String>,
        /// As the operator's `--parking-vlan`; required with --infra-namespace.
        #[arg(long, env = "PATCHBAY_PARKING_VLAN")]
        parking_vlan: Option<u16>,
        /// As the operator's `--trusted-host-namespaces`.
        #[arg(long, env = "PATCHBAY_TRUSTED_HOST_NAMESPACES", value_delimiter = ',')]
        trusted_host_namespaces: Option<Vec<String>>,
    },
    /// The demo: devplane, the CRDs, examples/, the operator on fixture switches, and
    /// a live table of the ports until Ctrl-C.
    #[cfg(feature = "devtools")]
    Demo {
        /// Exit 0 once every example port is Active (exit 1 after --timeout-seconds).
        #[arg(long)]
        exit_when_settled: bool,
        /// With --exit-when-settled: give up after this many seconds.
        #[arg(long, default_value_t = 60)]
        timeout_seconds: u64,
        /// Instead: walk one port through every state of the state machine by hand,
        /// on an in-memory switch, without a cluster.
        #[arg(long, conflicts_with = "exit_when_settled")]
        walk: bool,
    },
    /// Run the operator against the cluster in KUBECONFIG (or the in-cluster
    /// configuration). Every setting comes from a flag, else its environment
    /// variable, else the config file, else its default.
    Run(Box<RunArgs>),
    /// Direct device access for network engineers, from the YAML a user applies:
    /// read a port, apply a SwitchPortConfiguration (or print the exact commands with
    /// --dry-run), or reset a port. No cluster needed. Exits 2 on invalid input
    /// (nothing dialled), 1 on a device failure.
    Device(DeviceArgs),
    /// Run devplane, a small Kubernetes API server for tests and demos (plain HTTP on
    /// loopback, in memory, no authentication: never for production).
    #[cfg(feature = "devtools")]
    Devplane {
        /// Address to listen on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:0", env = "PATCHBAY_DEVPLANE_LISTEN")]
        listen: std::net::SocketAddr,
        /// Write a kubeconfig for the server here (kubectl and kube-rs accept it).
        #[arg(long, value_name = "PATH", env = "PATCHBAY_DEVPLANE_KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// Events kept for watches; older resourceVersions get 410 Gone.
        #[arg(long, default_value_t = 100_000)]
        history: usize,
    },
}

#[derive(clap::Args)]
struct DeviceArgs {
    /// ProviderSwitch manifest (YAML) describing the device.
    #[arg(long, value_name = "FILE")]
    provider: PathBuf,
    /// Secret manifest (YAML, `data` or `stringData`) with the credentials.
    #[arg(long, value_name = "FILE")]
    secret: Option<PathBuf>,
    #[command(subcommand)]
    action: DeviceAction,
}

// The subcommand names are the CLI the issue specifies (show-port, apply-port, ...).
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand)]
enum DeviceAction {
    /// Read a port and print what patchbay sees.
    ShowPort {
        /// Device port name, e.g. `FastEthernet0/1` or `"ethernet 1/g1"`.
        port: String,
    },
    /// Apply a SwitchPortConfiguration to a port and read it back.
    ApplyPort {
        /// Device port name.
        port: String,
        /// SwitchPortConfiguration manifest (YAML).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Read the port and print the exact commands that would be sent; change
        /// nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Return a port to the clean definition (no VLANs, description or ACL; port up).
    ResetPort {
        /// Device port name.
        port: String,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    /// Kubeconfig to use instead of KUBECONFIG / in-cluster configuration.
    #[arg(long, value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// YAML config file with any of the settings below, by their camelCase names
    /// (namespace, batchWindowMs, driftIntervalSeconds, maxSessions,
    /// backoffBaseSeconds, backoffCapSeconds, fixtureLatencyMs).
    #[arg(long, value_name = "FILE", env = "PATCHBAY_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: patchbay::settings::SettingsArgs,
    /// Serve /metrics, /healthz and /readyz on this address (e.g. 127.0.0.1:9090;
    /// 0.0.0.0:9090 in a pod) [default: off].
    #[arg(long, value_name = "ADDRESS", env = "PATCHBAY_METRICS_ADDRESS")]
    metrics_address: Option<std::net::SocketAddr>,
    /// Serve the validating admission webhooks with TLS on this address (e.g.
    /// 0.0.0.0:9443): POST /blast-radius (warnings that say how many ports an edit
    /// moves) and, with tenancy (--infra-namespace), POST /validate; the probes and
    /// metrics too. Needs --webhook-cert-dir [default: off].
    #[arg(long, value_name = "ADDRESS", env = "PATCHBAY_WEBHOOK_ADDRESS")]
    webhook_address: Option<std::net::SocketAddr>,
    /// The directory holding the webhook's `tls.crt` and `tls.key` (a mounted
    /// Secret); read again when they change.
    #[arg(long, value_name = "DIR", env = "PATCHBAY_WEBHOOK_CERT_DIR")]
    webhook_cert_dir: Option<PathBuf>,
    /// Log lines as `text` or `json` (one JSON object per line, with the span's
    /// fields: namespace, name, switch, device port).
    #[arg(long, value_enum, default_value = "text", env = "PATCHBAY_LOG_FORMAT")]
    log_format: LogFormat,
    /// On SIGTERM, how long in-flight batches may take to finish before the process
    /// exits anyway (exit code 1 then).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 30,
        env = "PATCHBAY_SHUTDOWN_TIMEOUT_SECONDS"
    )]
    shutdown_timeout_seconds: u64,
    /// Elect a leader among replicas with a coordination.k8s.io Lease; only the
    /// leader acts (`false`: this process acts alone, e.g. one replica or a laptop).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set, env = "PATCHBAY_LEADER_ELECT")]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "patchbay",
        env = "PATCHBAY_LEASE_NAME"
    )]
    lease_name: String,
    /// The Lease's namespace [default: $POD_NAMESPACE, else `default`].
    #[arg(long, value_name = "NAMESPACE", env = "PATCHBAY_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Seconds a Lease not renewed keeps the other replicas out.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 15.0,
        env = "PATCHBAY_LEASE_DURATION_SECONDS"
    )]
    lease_duration_seconds: f64,
    /// Seconds the leader keeps acting without renewing; then it stops touching
    /// devices and exits (exit code 1) for a fresh start. Every device batch is
    /// bounded by lease duration − renew deadline.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 10.0,
        env = "PATCHBAY_RENEW_DEADLINE_SECONDS"
    )]
    renew_deadline_seconds: f64,
    /// Seconds between renewals (and between attempts of the other replicas).
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 2.0,
        env = "PATCHBAY_RETRY_PERIOD_SECONDS"
    )]
    retry_period_seconds: f64,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl RunArgs {
    fn settings(&self) -> Result<patchbay::settings::Settings> {
        Ok(patchbay::settings::Settings::resolve(
            &self.settings,
            self.config.as_deref(),
        )?)
    }
}

async fn kube_client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    api_client::client(config)
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// This replica's name in the Lease: the pod's (HOSTNAME) and the process id.
fn identity() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "patchbay".into());
    format!("{host}_{}", std::process::id())
}

/// `patchbay run`: with leader election, wait for the Lease; then the operator until
/// SIGTERM (or Ctrl-C) — a graceful stop: no new work, in-flight batches finish
/// within the shutdown timeout, the Lease is released, exit 0 — or until the Lease
/// is lost (devices are off limits at once; exit 1).
async fn operate(args: &RunArgs, mut settings: patchbay::settings::Settings) -> Result<ExitCode> {
    use patchbay::decide::lease::Timings;
    use patchbay::lease::{Elector, Leadership};
    let client = kube_client(args.kubeconfig.as_deref()).await?;
    let secs = |v: f64, flag: &str| {
        if v.is_finite() && v > 0.0 && v <= 3600.0 {
            Ok(std::time::Duration::from_secs_f64(v))
        } else {
            Err(anyhow::anyhow!(
                "--{flag}: {v} is not a duration in (0, 3600] seconds"
            ))
        }
    };
    let timings = Timings {
        lease_duration: secs(args.lease_duration_seconds, "lease-duration-seconds")?,
        renew_deadline: secs(args.renew_deadline_seconds, "renew-deadline-seconds")?,
        retry_period: secs(args.retry_period_seconds, "retry-period-seconds")?,
    };
    let (report_tx, report) = tokio::sync::watch::channel(Leadership::default());
    // The metrics and the device gate of this operator: the elector closes the gate,
    // the workers check it, the HTTP server renders the metrics.
    let probes = patchbay::probes::Probes::default();
    let elector = if args.leader_elect {
        timings
            .check()
            .map_err(|e| anyhow::anyhow!("leader election: {e}"))?;
        settings.batch_timeout = Some(timings.batch_bound());
        let namespace = args
            .lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into());
        let me = identity();
        tracing::info!(identity = %me, lease = %format!("{namespace}/{}", args.lease_name), "leader election");
        let elector = std::sync::Arc::new(Elector::new(
            client.clone(),
            &namespace,
            &args.lease_name,
            &me,
            timings,
            probes.devices.clone(),
        ));
        let running = elector.clone();
        tokio::spawn(async move { running.run(report_tx).await });
        Some(elector)
    } else {
        report_tx.send_replace(Leadership {
            leading: true,
            holder: "(no election)".into(),
        });
        None
    };
    tracing::info!(?settings, "patchbay operator starting");
    let (stop_serving, serving_stopped) = tokio::sync::watch::channel(false);
    let leadership = report.clone();
    let metrics = probes.metrics.clone();
    // Ready: the leader is known, and this replica's caches are synced if it leads.
    // The plain listener never answers /validate: only the TLS one does.
    let routes = patchbay::serve::Routes {
        ready: std::sync::Arc::new(move || {
            let l = leadership.borrow();
            !l.holder.is_empty() && (!l.leading || metrics.ready())
        }),
        metrics: probes.metrics.clone(),
        admission: None,
        radius: None,
    };
    let stopped = |rx: &tokio::sync::watch::Receiver<bool>| {
        let mut rx = rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    if let Some(address) = args.webhook_address {
        let Some(dir) = &args.webhook_cert_dir else {
            anyhow::bail!("--webhook-address: needs --webhook-cert-dir (tls.crt and tls.key)");
        };
        let tls = patchbay::serve::tls_acceptor(dir).context("--webhook-cert-dir")?;
        let mut with_webhook = routes.clone();
        with_webhook.radius = Some(std::sync::Arc::new(
            patchbay::blast_radius::BlastRadius::new(client.clone(), settings.tenancy.clone()),
        ));
        // The tenancy webhook only with tenancy: without it there is nothing to refuse.
        if let Some(tenancy) = settings.tenancy.clone() {
            let (webhook, caches) =
                patchbay::webhook::Webhook::start(client.clone(), tenancy, settings.rollout);
            let stop = stopped(&serving_stopped);
            tokio::spawn(async move {
                tokio::select! { _ = caches => {}, _ = stop => {} }
            });
            with_webhook.admission = Some(webhook);
        }
        let (listener, bound) = patchbay::serve::bind(address)
            .await
            .with_context(|| format!("binding --webhook-address {address}"))?;
        tracing::info!(address = %bound, tenancy = with_webhook.admission.is_some(),
            "serving the admission webhooks (TLS): /blast-radius, /validate with tenancy, /metrics, /healthz, /readyz");
        tokio::spawn(patchbay::serve::serve(
            listener,
            Some(tls),
            with_webhook,
            stopped(&serving_stopped),
        ));
    }
    if let Some(address) = args.metrics_address {
        let (listener, bound) = patchbay::serve::bind(address)
            .await
            .with_context(|| format!("binding --metrics-address {address}"))?;
        tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
        tokio::spawn(patchbay::serve::serve(
            listener,
            None,
            routes.clone(),
            stopped(&serving_stopped),
        ));
    }
    let mut signal = Box::pin(shutdown_signal());
    let mut waiting = report.clone();
    tokio::select! {
        _ = waiting.wait_for(|l| l.leading) => {}
        _ = &mut signal => {
            let _ = stop_serving.send(true);
            return Ok(ExitCode::SUCCESS);
        }
    }
    probes.metrics.leader.set(1);
    tracing::info!("leading: starting the controllers");
    let backends = patchbay::backends::Backends {
        fixtures: settings
            .fixture_state_dir
            .clone()
            .map(patchbay::backends::FixtureRegistry::kept_in)
            .unwrap_or_default(),
        fixture_latency: settings.fixture_latency,
        fixture_log_limit: Some(patchbay::backends::FIXTURE_LOG_LIMIT),
        ansible_playbook: settings.ansible_playbook.clone(),
        ..Default::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut operator = tokio::spawn(patchbay::controllers::run(
        client,
        settings,
        backends,
        probes.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut lost = report.clone();
    let lost_lease = tokio::select! {
        _ = &mut signal => false,
        _ = lost.wait_for(|l| !l.leading) => true,
        _ = &mut operator => {
            anyhow::bail!("the operator stopped on its own");
        }
    };
    probes.metrics.leader.set(0);
    let timeout = std::time::Duration::from_secs(args.shutdown_timeout_seconds);
    if lost_lease {
        tracing::error!("lost the leader lease: stopping (devices are already off limits)");
    } else {
        tracing::info!(
            timeout_seconds = timeout.as_secs(),
            "stopping: no new work; in-flight batches finish"
        );
    }
    let _ = stop.send(());
    let finished = tokio::time::timeout(timeout, operator).await.is_ok();
    if let Some(elector) = &elector {
        elector.release().await;
    }
    let _ = stop_serving.send(true);
    if lost_lease {
        return Ok(ExitCode::FAILURE);
    }
    if finished {
        tracing::info!("stopped");
        Ok(ExitCode::SUCCESS)
    } else {
        tracing::warn!(
            timeout_seconds = timeout.as_secs(),
            "in-flight work did not finish within the shutdown timeout; exiting anyway"
        );
        Ok(ExitCode::FAILURE)
    }
}

/// jemalloc instead of glibc's malloc (at 10,000 ports a third of the operator's
/// CPU was glibc's malloc and free): see docs/benchmarks.md, "Where the operator's
/// time and memory went".
/// Built with `--features system-alloc`, the binary keeps glibc's malloc instead, so
/// that heaptrack (which intercepts malloc) sees every allocation: see
/// `BENCH_HEAPTRACK` in docs/benchmarks.md.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read when it starts: one arena (the operator runs a few
/// threads; each arena holds its own part-used pages: one instead of two was 0.7 MiB
/// less at 10,000 idle ports, at no CPU cost measured), freed pages returned to the
/// system within a second by a background thread rather than on a later allocation.
#[cfg(not(feature = "system-alloc"))]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8] =
    b"narenas:1,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds { out: None } => {
            for (_, crd) in api::crds() {
                print!("---\n{}", api::crd_yaml(&crd));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds { out: Some(dir) } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (file, crd) in api::crds() {
                let path = dir.join(file);
                std::fs::write(&path, api::crd_yaml(&crd))
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("wrote {}", path.display());
            }
            // No .yaml extension: `kubectl apply -f crds/` skips it, kustomize finds it.
            let path = dir.join("Kustomization");
            std::fs::write(&path, api::crds_kustomization())
                .with_context(|| format!("writing {}", path.display()))?;
            println!("wrote {}", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Validate { files } => {
            let mut docs = Vec::new();
            for file in &files {
                let text = if file.as_os_str() == "-" {
                    std::io::read_to_string(std::io::stdin()).context("reading standard input")?
                } else {
                    std::fs::read_to_string(file)
                        .with_context(|| format!("reading {}", file.display()))?
                };
                docs.push((file.display().to_string(), text));
            }
            let report: ValidationReport = validate_manifests(&docs);
            print!("{report}");
            Ok(if report.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Plan {
            files,
            kubeconfig,
            namespace,
            output,
            read_devices,
            config,
            infra_namespace,
            parking_vlan,
            trusted_host_namespaces,
        } => {
            // The operator's own resolution (flag, environment, file), so the plan
            // refuses with the operator's settings or not at all.
            let (tenancy, rollout) = match patchbay::settings::Settings::resolve(
                &patchbay::settings::SettingsArgs {
                    infra_namespace,
                    parking_vlan,
                    trusted_host_namespaces,
                    ..Default::default()
                },
                config.as_deref(),
            ) {
                Ok(s) => (s.tenancy, s.rollout),
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(ExitCode::from(1));
                }
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(rt.block_on(plan::run(plan::Request {
                files,
                kubeconfig,
                namespace,
                output,
                read_devices,
                tenancy,
                rollout,
            })))
        }
        Command::Device(args) => {
            use device::{DeviceCommand, run};
            let (port, command) = match args.action {
                DeviceAction::ShowPort { port } => (port, DeviceCommand::Show),
                DeviceAction::ApplyPort {
                    port,
                    config,
                    dry_run,
                } => (port, DeviceCommand::Apply { config, dry_run }),
                DeviceAction::ResetPort { port } => (port, DeviceCommand::Reset),
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            match rt.block_on(run(&args.provider, args.secret.as_deref(), &port, command)) {
                Ok(out) => {
                    print!("{out}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::from(e.exit_code()))
                }
            }
        }
        #[cfg(feature = "devtools")]
        Command::Devplane {
            listen,
            kubeconfig,
            history,
        } => {
            if !listen.ip().is_loopback() {
                anyhow::bail!(
                    "--listen {listen}: devplane has no authentication and only listens on loopback"
                );
            }
            let server = patchbay_devplane::DevPlane::start(patchbay_devplane::Config {
                listen,
                history_limit: history,
                ..Default::default()
            })
            .context("starting devplane")?;
            println!("devplane listening on {}", server.url());
            if let Some(path) = &kubeconfig {
                server
                    .write_kubeconfig(path)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("kubeconfig written to {}", path.display());
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
                anyhow::Ok(())
            })?;
            server.shutdown();
            Ok(ExitCode::SUCCESS)
        }
        Command::Run(args) => {
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info".into());
            match args.log_format {
                LogFormat::Text => tracing_subscriber::fmt().with_env_filter(filter).init(),
                LogFormat::Json => tracing_subscriber::fmt()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_env_filter(filter)
                    .init(),
            }
            let settings = args.settings()?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(operate(&args, settings))
        }
        #[cfg(feature = "devtools")]
        Command::Demo { walk: true, .. } => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()?;
            rt.block_on(walk::run())?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "devtools")]
        Command::Demo {
            exit_when_settled,
            timeout_seconds,
            ..
        } => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(demo::run(
                exit_when_settled,
                std::time::Duration::from_secs(timeout_seconds),
            ))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
