//! `deploy/`: the manifests a platform team installs. They apply with the real
//! kubectl (`kubectl apply -k deploy/`) and hold what they promise; and the
//! operator's ClusterRole is exactly what the operator calls — derived by running
//! `patchbay run` through every controller against devplane, which records each
//! (verb, group, resource) a client asks for. devplane stores RBAC objects but does
//! not enforce them, so this is how least privilege is checked here.

mod support;

use std::collections::BTreeSet;

use base64::Engine;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Cluster, on_devplane};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn kubectl_json(cluster: &Cluster, args: &[&str]) -> Value {
    let out = cluster.kubectl_ok(&[args, &["-o", "json"]].concat());
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The documents `kubectl kustomize <dir>` renders, and the operator Deployment's
/// arguments among them.
fn overlay(cluster: &Cluster, dir: &str) -> (Vec<Value>, Vec<String>) {
    let rendered = cluster.kubectl_ok(&["kustomize", dir]);
    let docs: Vec<Value> = patchbay_providers::yaml::documents(&rendered).unwrap();
    let args = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .and_then(|d| d.pointer("/spec/template/spec/containers/0/args"))
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("the operator's args in {dir}"))
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    (docs, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_k_deploy_installs_the_operator_its_rbac_and_the_crds() {
    if !on_devplane() {
        return; // it would install the operator on that cluster
    }
    let cluster = Cluster::start("deploy-apply").await;
    let out = cluster.kubectl_ok(&["apply", "-k", "deploy/"]);
    for expected in [
        "namespace/patchbay-system",
        "customresourcedefinition.apiextensions.k8s.io/switchports.patchbay.dev",
        "serviceaccount/patchbay",
        "deployment.apps/patchbay",
        "clusterrole.rbac.authorization.k8s.io/patchbay-operator",
        "clusterrole.rbac.authorization.k8s.io/patchbay-infra",
        "clusterrole.rbac.authorization.k8s.io/patchbay-tenant",
        "clusterrolebinding.rbac.authorization.k8s.io/patchbay-operator",
        "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/patchbay",
        "flowschema.flowcontrol.apiserver.k8s.io/patchbay",
        "flowschema.flowcontrol.apiserver.k8s.io/patchbay-leader-election",
    ] {
        assert!(
            out.contains(&format!("{expected} created")),
            "{expected}:\n{out}"
        );
    }
    let again = cluster.kubectl_ok(&["apply", "-k", "deploy/"]);
    assert!(
        !again.contains("created") && !again.contains("configured"),
        "{again}"
    );
    let crds = kubectl_json(&cluster, &["get", "crds"]);
    let names: BTreeSet<&str> = crds["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    for (file, crd) in patchbay::api::crds() {
        let name = crd.metadata.name.unwrap();
        assert!(names.contains(name.as_str()), "{file}: {name} installed");
    }
    let d = kubectl_json(
        &cluster,
        &["get", "deployment", "patchbay", "-n", "patchbay-system"],
    );
    assert_eq!(d.pointer("/spec/replicas"), Some(&Value::from(2)));
    let pod = d.pointer("/spec/template/spec").unwrap();
    assert_eq!(
        pod.pointer("/serviceAccountName"),
        Some(&Value::from("patchbay"))
    );
    // Priority and Fairness: both FlowSchemas select the account the operator runs
    // as, the Lease one only its Lease calls, each to a level that exists or is one
    // of the cluster's suggested ones.
    for (schema, level) in [
        ("patchbay", "patchbay"),
        ("patchbay-leader-election", "leader-election"),
    ] {
        let f = kubectl_json(&cluster, &["get", "flowschema", schema]);
        assert_eq!(
            f.pointer("/spec/rules/0/subjects/0/serviceAccount"),
            Some(&serde_json::json!({"name": "patchbay", "namespace": "patchbay-system"})),
            "{schema}"
        );
        assert_eq!(
            f.pointer("/spec/priorityLevelConfiguration/name"),
            Some(&Value::from(level))
        );
    }
    let lease_rule = kubectl_json(&cluster, &["get", "flowschema", "patchbay-leader-election"]);
    assert_eq!(
        lease_rule.pointer("/spec/rules/0/resourceRules/0/resources"),
        Some(&serde_json::json!(["leases"]))
    );
    let level = kubectl_json(&cluster, &["get", "prioritylevelconfiguration", "patchbay"]);
    assert_eq!(level.pointer("/spec/type"), Some(&Value::from("Limited")));
    assert_eq!(
        pod.pointer("/securityContext/runAsNonRoot"),
        Some(&Value::Bool(true))
    );
    let c = pod.pointer("/containers/0").unwrap();
    assert_eq!(
        c.pointer("/securityContext/readOnlyRootFilesystem"),
        Some(&Value::Bool(true))
    );
    assert_eq!(
        c.pointer("/securityContext/allowPrivilegeEscalation"),
        Some(&Value::Bool(false))
    );
    assert_eq!(
        c.pointer("/livenessProbe/httpGet/path"),
        Some(&Value::from("/healthz"))
    );
    assert_eq!(
        c.pointer("/readinessProbe/httpGet/path"),
        Some(&Value::from("/readyz"))
    );
    assert!(c.pointer("/resources/limits/memory").is_some());
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--metrics-address=0.0.0.0:9090"), "{args:?}");
    // The flags the manifest passes are the binary's.
    let help = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for arg in &args[1..] {
        let flag = arg.split('=').next().unwrap();
        assert!(help.contains(flag), "{flag} is a flag of patchbay run");
    }
    // deploy/tenancy/: the same operator with tenancy and the webhook; its flags
    // are the binary's, and the API server calls it through the Service.
    let (docs, tenancy_args) = overlay(&cluster, "deploy/tenancy");
    let of = |kind: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("{kind} in deploy/tenancy"))
    };
    for flag in [
        "--infra-namespace",
        "--parking-vlan",
        "--webhook-address",
        "--webhook-cert-dir",
    ] {
        assert!(
            tenancy_args.iter().any(|a| a.starts_with(flag)) && help.contains(flag),
            "{flag}: {tenancy_args:?}"
        );
    }
    // deploy/bgp-nodes/: the same operator opted in to Nodes and MetalLB, with
    // the ClusterRole for it bound to its ServiceAccount.
    let (bgp_docs, bgp_args) = overlay(&cluster, "deploy/bgp-nodes");
    for flag in ["--bgp-node-selector", "--metallb-namespace"] {
        assert!(
            bgp_args.iter().any(|a| a.starts_with(flag)) && help.contains(flag),
            "{flag}: {bgp_args:?}"
        );
    }
    let bgp_binding = bgp_docs
        .iter()
        .find(|d| {
            d["kind"] == "ClusterRoleBinding" && d["metadata"]["name"] == "patchbay-bgp-nodes"
        })
        .expect("the opt-in's binding");
    assert_eq!(
        bgp_binding.pointer("/subjects/0/namespace"),
        Some(&Value::from("patchbay-system"))
    );
    // deploy/metal3-switches/: the operator opted in to BareMetalSwitches, with
    // exactly the rules that adds bound to its ServiceAccount.
    let (m3_docs, m3_args) = overlay(&cluster, "deploy/metal3-switches");
    assert!(
        m3_args.iter().any(|a| a == "--metal3-switches") && help.contains("--metal3-switches"),
        "{m3_args:?}"
    );
    assert!(m3_docs.iter().any(|d| d["kind"] == "ClusterRoleBinding"
        && d["metadata"]["name"] == "patchbay-metal3-switches"
        && d.pointer("/subjects/0/namespace") == Some(&Value::from("patchbay-system"))));
    let rule = |g: &str, r: &str, v: &str| (g.to_owned(), r.to_owned(), v.to_owned());
    assert_eq!(
        role_rules("patchbay-metal3-switches"),
        BTreeSet::from([
            rule("metal3.io", "baremetalswitches", "list"),
            rule("metal3.io", "baremetalswitches", "watch"),
            rule("metal3.io", "baremetalswitches/status", "patch"),
            rule("patchbay.dev", "providerswitches", "create"),
            rule("metal3.io", "hostnetworkattachments", "list"),
            rule("metal3.io", "hostnetworkattachments", "watch"),
            rule("metal3.io", "hardwaredata", "list"),
            rule("metal3.io", "hardwaredata", "watch"),
            rule("patchbay.dev", "switchportconfigurations", "create"),
            rule("patchbay.dev", "switchportconfigurations", "patch"),
        ])
    );
    // Two webhooks through one Service: tenancy refuses (Fail: a down webhook
    // admits nothing unchecked), the blast radius only warns (Ignore).
    let hook = |name: &str| {
        docs.iter()
            .find(|d| {
                d["kind"] == "ValidatingWebhookConfiguration" && d["metadata"]["name"] == name
            })
            .unwrap_or_else(|| panic!("{name} in deploy/tenancy"))
    };
    for (name, policy, path, operations) in [
        (
            "patchbay-tenancy",
            "Fail",
            "/validate",
            vec!["CREATE", "UPDATE"],
        ),
        (
            "patchbay-blast-radius",
            "Ignore",
            "/blast-radius",
            vec!["UPDATE", "DELETE"],
        ),
    ] {
        let hook = hook(name);
        assert_eq!(
            hook.pointer("/webhooks/0/failurePolicy"),
            Some(&Value::from(policy)),
            "{name}"
        );
        assert_eq!(
            hook.pointer("/webhooks/0/clientConfig/service/name"),
            of("Service").pointer("/metadata/name"),
            "{name}"
        );
        assert_eq!(
            hook.pointer("/webhooks/0/clientConfig/service/path"),
            Some(&Value::from(path)),
            "{name}"
        );
        assert_eq!(
            hook.pointer("/webhooks/0/rules/0/operations"),
            Some(&Value::from(operations)),
            "{name}"
        );
    }
    // deploy/blast-radius/: the webhook without tenancy (its flags are the binary's).
    let (br_docs, br_args) = overlay(&cluster, "deploy/blast-radius");
    assert!(
        br_args
            .iter()
            .any(|a| a == "--webhook-address=0.0.0.0:9443")
            && !br_args.iter().any(|a| a.starts_with("--infra-namespace")),
        "{br_args:?}"
    );
    assert!(
        br_docs
            .iter()
            .any(|d| d["kind"] == "ValidatingWebhookConfiguration"
                && d["metadata"]["name"] == "patchbay-blast-radius")
    );
    let binding = kubectl_json(
        &cluster,
        &["get", "clusterrolebinding", "patchbay-operator"],
    );
    assert_eq!(
        binding.pointer("/subjects/0/namespace"),
        Some(&Value::from("patchbay-system"))
    );
    cluster.finish().await;
}

/// The rules of ClusterRole `name` in `deploy/`'s RBAC files, as (group, resource,
/// verb) triples.
fn role_rules(name: &str) -> BTreeSet<(String, String, String)> {
    let mut rules = BTreeSet::new();
    for file in [
        "base/rbac-operator.yaml",
        "base/rbac-personas.yaml",
        "bgp-nodes/rbac-bgp-nodes.yaml",
        "metal3-switches/rbac-metal3-switches.yaml",
    ] {
        let text = std::fs::read_to_string(format!("{ROOT}/deploy/{file}")).unwrap();
        for doc in patchbay_providers::yaml::documents(&text).unwrap() {
            if doc["kind"] != "ClusterRole"
                || doc.pointer("/metadata/name") != Some(&Value::from(name))
            {
                continue;
            }
            for rule in doc["rules"].as_array().unwrap() {
                let list = |k: &str| -> Vec<String> {
                    rule[k]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap().to_owned())
                        .collect()
                };
                for g in list("apiGroups") {
                    for r in list("resources") {
                        for v in list("verbs") {
                            rules.insert((g.clone(), r.clone(), v));
                        }
                    }
                }
            }
        }
    }
    rules
}

/// Polls `kubectl get … -o jsonpath=…` until it prints `want` (60 s).
fn wait_jsonpath(
    cluster: &Cluster,
    args: &[&str],
    path: &str,
    want: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = cluster.kubectl(&[args, &["-o", &format!("jsonpath={path}")]].concat());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && want(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "{args:?} {path}: last {text:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_s_cluster_role_is_exactly_what_the_operator_calls() {
    if !on_devplane() {
        return; // the request log is devplane's
    }
    let cluster = Cluster::start("deploy-rbac").await;
    cluster
        .install_crd(support::bare_metal_host_crd(false))
        .await;
    cluster.install_crd(support::metallb_bgp_peer_crd()).await;
    for (_, crd) in patchbay::api::crds() {
        cluster.install_crd(crd).await;
    }
    let ns = cluster.namespace.clone();
    let devplane = cluster.devplane().unwrap();
    // Every controller gets work: a fixture switch with two ports, a configuration,
    // a Server cabled to one port and linked to a BareMetalHost, a claim asking for
    // the BMC copy, a SmartNicPort whose provider never answers.
    let manifests = format!(
        r#"
apiVersion: v1
kind: Secret
metadata: {{name: login, namespace: {ns}}}
stringData: {{username: u, password: p}}
---
apiVersion: patchbay.dev/v1alpha1
kind: ProviderSwitch
metadata: {{name: sw, namespace: {ns}}}
spec: {{backend: fixture, os: fixture, address: 127.0.0.1, credentialsSecretRef: {{name: login}}}}
---
# Created ahead of its Switch (the Switch reconcile adopts it). After the Switch it
# would race the operator's own create of p2, and kubectl's create would fail.
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPort
metadata: {{name: p2, namespace: {ns}}}
spec: {{configuration: {{name: missing}}}}
---
apiVersion: patchbay.dev/v1alpha1
kind: Switch
metadata: {{name: sw, namespace: {ns}}}
spec:
  provider: {{name: sw}}
  ports: {{p1: {{name: Gi0/1, bgpAddress: 10.99.0.0/31}}, p2: {{name: Gi0/2}}}}
  # BGP to the bound host: its password Secret is created (the speaker is absent).
  bgp: {{speaker: {{name: frr}}, asn: 65000, routerId: 10.255.0.1}}
---
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPortConfiguration
metadata: {{name: pxe, namespace: {ns}}}
spec: {{untaggedVLAN: 10}}
---
apiVersion: patchbay.dev/v1alpha1
kind: SwitchPortConfiguration
metadata: {{name: web, namespace: {ns}}}
spec: {{untaggedVLAN: 100}}
---
apiVersion: patchbay.dev/v1alpha1
kind: ProviderSwitch
metadata: {{name: snic, namespace: {ns}}}
spec: {{backend: ovsdb, os: ovs, address: 127.0.0.1, port: 1, options: {{bridge: br0}}}}
---
apiVersion: patchbay.dev/v1alpha1
kind: SmartNicConfiguration
metadata: {{name: snc, namespace: {ns}}}
spec: {{untaggedVLAN: 20}}
---
apiVersion: patchbay.dev/v1alpha1
kind: SmartNicPort
metadata: {{name: snp, namespace: {ns}}}
spec: {{provider: {{name: snic}}, portName: snp0, configuration: {{name: snc}}}}
---
apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata: {{name: bmh, namespace: {ns}}}
spec: {{bootMACAddress: "aa:bb:cc:00:09:01"}}
---
apiVersion: patchbay.dev/v1alpha1
kind: Server
metadata: {{name: {ns}-srv}}
spec:
  bmc: {{address: 10.0.0.9, credentialsSecretRef: {{name: login, namespace: {ns}}}}}
  bootMac: "aa:bb:cc:00:09:01"
  site: {ns}
  hostAddress: 192.0.2.9
  bareMetalHostRef: {{name: bmh, namespace: {ns}}}
  nics:
    - name: eth0
      port: {{name: p1, namespace: {ns}}}
      provisioningConfiguration: {{name: pxe}}
---
# Bound to a claim that does not exist: the orphan sweep checks it and releases it.
apiVersion: patchbay.dev/v1alpha1
kind: Server
metadata: {{name: {ns}-orphan}}
spec:
  bmc: {{address: 10.0.0.8, credentialsSecretRef: {{name: login, namespace: {ns}}}}}
  bootMac: "aa:bb:cc:00:09:02"
  site: elsewhere
  claimRef: {{name: ghost, namespace: {ns}, uid: gone, role: worker, since: "2026-01-01T00:00:00Z"}}
---
apiVersion: patchbay.dev/v1alpha1
kind: ServerClaim
metadata: {{name: claim, namespace: {ns}}}
spec:
  site: {ns}
  roles: [{{name: worker, count: 1, bgp: {{asn: 65101, prefixes: [192.0.2.0/28]}}}}]
  networkConfiguration: [{{configurationRef: {{kind: SwitchPortConfiguration, name: web}}}}]
  inventory: {{includeBmcCredentials: true}}
---
# The bound Server joined as a Node the BGP opt-in selects: annotated, and a
# MetalLB BGPPeer for it.
apiVersion: v1
kind: Node
metadata: {{name: {ns}-node, labels: {{patchbay.dev/bgp: "on"}}}}
spec: {{providerID: "patchbay://{ns}-srv"}}
---
# Tenancy: a pool for a tenant namespace (its Ready condition, the namespace's
# patchbay-grants).
apiVersion: v1
kind: Namespace
metadata: {{name: {ns}-t}}
---
apiVersion: patchbay.dev/v1alpha1
kind: VLANPool
metadata: {{name: {ns}-t}}
spec: {{vlans: "200-209", namespaces: [{ns}-t]}}
"#
    );
    // Tenancy on, with the webhook: its caches list and watch what the controllers'
    // do, every replica.
    let certs = cluster.dir.join("webhook");
    patchbay_testbed::webhook_certificate(&certs, "patchbay").unwrap();
    // A free loopback port for the webhooks (the test calls the blast radius below).
    let webhook_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let file = cluster.dir.join("all.yaml");
    std::fs::write(&file, manifests).unwrap();
    // From here on the test speaks only through kubectl: every other client is the
    // operator.
    devplane.clear_requests();
    let log = std::fs::File::create(cluster.dir.join("operator.log")).unwrap();
    let mut operator = Command::new(env!("CARGO_BIN_EXE_patchbay"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["--namespace", &ns, "--lease-namespace", &ns])
        .args(["--infra-namespace", &ns, "--parking-vlan", "4000"])
        .args([
            "--webhook-address",
            &format!("127.0.0.1:{webhook_port}"),
            "--webhook-cert-dir",
        ])
        .arg(&certs)
        .args(["--bgp-node-selector", "patchbay.dev/bgp=on"])
        .args(["--metallb-namespace", &ns])
        .args([
            "--backoff-base-seconds",
            "0.2",
            "--backoff-cap-seconds",
            "0.5",
        ])
        .args([
            "--retry-period-seconds",
            "0.3",
            "--drift-interval-seconds",
            "1",
        ])
        .stdout(Stdio::from(log))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    cluster.kubectl_ok(&["apply", "-f", file.to_str().unwrap()]);
    wait_jsonpath(
        &cluster,
        &["get", "serverclaim", "claim", "-n", &ns],
        "{.status.allocation}",
        |s| s == "1/1",
    );
    wait_jsonpath(
        &cluster,
        &["get", "secret", "claim-bmc", "-n", &ns],
        "{.metadata.name}",
        |s| s == "claim-bmc",
    );
    wait_jsonpath(
        &cluster,
        &["get", "secret", &format!("claim-bgp-{ns}-srv-0"), "-n", &ns],
        "{.type}",
        |s| s == "kubernetes.io/basic-auth",
    );
    wait_jsonpath(
        &cluster,
        &[
            "get",
            "bgppeers.metallb.io",
            &format!("patchbay-{ns}-srv-0"),
            "-n",
            &ns,
        ],
        "{.spec.sourceAddress}",
        |s| s == "10.99.0.1",
    );
    wait_jsonpath(
        &cluster,
        &["get", "node", &format!("{ns}-node")],
        "{.metadata.annotations}",
        |s| s.contains("patchbay.dev/bgp-peers-0-node-asn"),
    );
    wait_jsonpath(
        &cluster,
        &["get", "configmap", "claim-inventory", "-n", &ns],
        "{.metadata.name}",
        |s| !s.is_empty(),
    );
    let tenant = format!("{ns}-t");
    wait_jsonpath(
        &cluster,
        &["get", "configmap", "patchbay-grants", "-n", &tenant],
        "{.data.vlans}",
        |s| s == "200-209",
    );
    wait_jsonpath(
        &cluster,
        &["get", "vlanpool", &tenant],
        "{.status.conditions[0].status}",
        |s| s == "True",
    );
    wait_jsonpath(
        &cluster,
        &["get", "switchport", "p1", "-n", &ns],
        "{.status.state}",
        |s| s == "Active",
    );
    // The blast-radius webhook asked about a Switch's edit (a dry run): it reads
    // the Switch, its ports, their ProviderSwitch, configurations and Servers.
    let ca = std::fs::read(certs.join("tls.crt")).unwrap();
    let hook = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: {ns}-blast-radius}}
webhooks:
  - name: blast-radius.patchbay.dev
    clientConfig: {{url: "https://127.0.0.1:{webhook_port}/blast-radius", caBundle: {}}}
    rules: [{{apiGroups: [patchbay.dev], apiVersions: [v1alpha1], operations: [UPDATE, DELETE],
              resources: [switchportconfigurations, switches, providerswitches, switchports,
                          vlanpools]}}]
    failurePolicy: Fail
    sideEffects: None
    admissionReviewVersions: [v1]
"#,
        base64::engine::general_purpose::STANDARD.encode(&ca)
    );
    let hook_file = cluster.dir.join("blast-radius.yaml");
    std::fs::write(&hook_file, hook).unwrap();
    cluster.kubectl_ok(&["apply", "-f", hook_file.to_str().unwrap()]);
    let out = cluster.kubectl(&[
        "label",
        "switch",
        "sw",
        "-n",
        &ns,
        "--dry-run=server",
        "edited=yes",
    ]);
    assert!(out.status.success(), "{out:?}");
    let out = cluster.kubectl(&[
        "patch",
        "switch",
        "sw",
        "-n",
        &ns,
        "--dry-run=server",
        "--type=json",
        "-p",
        r#"[{"op": "remove", "path": "/spec/ports/p1"}]"#,
    ]);
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(
        warned.contains("Warning: patchbay: this changes 1 port on 1 switch (1 cleaned)"),
        "{warned}"
    );
    // A pool's edit (tenancy is on): every port read, and the pools; the tenant's
    // pool serves no port here, so nothing moves and nothing is said — a read the
    // operator's RBAC did not allow would say "could not work out which ports".
    let out = cluster.kubectl(&[
        "patch",
        "vlanpool",
        &tenant,
        "--dry-run=server",
        "--type=merge",
        "-p",
        r#"{"spec": {"vlans": "210-219"}}"#,
    ]);
    assert!(out.status.success(), "{out:?}");
    let warned = String::from_utf8_lossy(&out.stderr);
    assert!(!warned.contains("Warning"), "{warned}");
    cluster.kubectl_ok(&[
        "delete",
        "validatingwebhookconfiguration",
        &format!("{ns}-blast-radius"),
    ]);
    // A configuration edited twelve times keeps its last ten revisions: the
    // oldest ControllerRevisions are deleted.
    for vlan in 1..=12 {
        let file = cluster.dir.join("history.yaml");
        std::fs::write(
            &file,
            format!(
                "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\n\
                 metadata: {{name: history, namespace: {ns}}}\nspec: {{untaggedVLAN: {vlan}}}\n"
            ),
        )
        .unwrap();
        cluster.kubectl_ok(&["apply", "-f", file.to_str().unwrap()]);
        wait_jsonpath(
            &cluster,
            &["get", "switchportconfiguration", "history", "-n", &ns],
            "{.status.rollout.currentRevisionNumber}",
            |s| s == vlan.to_string(),
        );
    }
    wait_jsonpath(
        &cluster,
        &[
            "get",
            "controllerrevisions",
            "-n",
            &ns,
            "-l",
            "patchbay.dev/configuration=history",
        ],
        "{.items[*].revision}",
        |s| s.split_whitespace().count() == 10 && !s.split_whitespace().any(|n| n == "1"),
    );
    // The BMC copy turned off, then the claim and the Switch deleted.
    cluster.kubectl_ok(&[
        "patch",
        "serverclaim",
        "claim",
        "-n",
        &ns,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"inventory":{"includeBmcCredentials":false}}}"#,
    ]);
    wait_jsonpath(
        &cluster,
        &["get", "secrets", "-n", &ns],
        "{.items[*].metadata.name}",
        |s| !s.contains("claim-bmc"),
    );
    // A repeated failure makes an Event series (p2's configuration does not exist:
    // tried again after each backoff step).
    wait_jsonpath(
        &cluster,
        &["get", "events.events.k8s.io", "-n", &ns],
        "{.items[*].series.count}",
        |s| !s.is_empty(),
    );
    // Another writer annotates the bound Server while the operator's Server cache
    // lags: the release goes out at a stale resourceVersion, conflicts, and is sent
    // again after a fresh read (servers get) shows the spec unchanged.
    devplane.delay_watch_events("servers", Duration::from_secs(3));
    let server = format!("{ns}-srv");
    cluster.kubectl_ok(&["annotate", "server", &server, "cmdb/seen=1"]);
    cluster.kubectl_ok(&["delete", "serverclaim", "claim", "-n", &ns, "--wait=false"]);
    wait_jsonpath(
        &cluster,
        &["get", "serverclaims", "-n", &ns],
        "{.items[*].metadata.name}",
        |s| s.is_empty(),
    );
    devplane.delay_watch_events("servers", Duration::ZERO);
    wait_jsonpath(
        &cluster,
        &["get", "server", &server],
        "{.spec.claimRef}",
        |s| s.is_empty(),
    );
    // Released: the BGPPeer goes.
    wait_jsonpath(
        &cluster,
        &["get", "bgppeers.metallb.io", "-n", &ns],
        "{.items[*].metadata.name}",
        |s| s.is_empty(),
    );
    cluster.kubectl_ok(&["delete", "switch", "sw", "-n", &ns, "--wait=false"]);
    wait_jsonpath(
        &cluster,
        &["get", "switchports", "-n", &ns],
        "{.items[*].metadata.name}",
        |s| s.is_empty(),
    );
    let status = Command::new("kill")
        .args(["-TERM", &operator.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(operator.wait().unwrap().success());

    let asked: BTreeSet<(String, String, String)> = devplane
        .requests()
        .into_iter()
        .filter(|e| e.client != "kubectl")
        .map(|e| (e.group, e.resource, e.verb))
        .collect();
    // The base role plus the opt-in's (which holds only nodes and bgppeers, so the
    // base alone covers everything else).
    let opt_in = role_rules("patchbay-bgp-nodes");
    assert!(
        opt_in
            .iter()
            .all(|(_, r, _)| r == "nodes" || r == "bgppeers"),
        "{opt_in:?}"
    );
    let granted: BTreeSet<_> = role_rules("patchbay-operator")
        .union(&opt_in)
        .cloned()
        .collect();
    let missing: Vec<_> = asked.difference(&granted).collect();
    assert!(
        missing.is_empty(),
        "the operator asked for what its ClusterRole does not grant: {missing:?}"
    );
    let unused: Vec<_> = granted.difference(&asked).collect();
    assert!(
        unused.is_empty(),
        "the ClusterRole grants what the operator never asked for: {unused:?}"
    );
    cluster.finish().await;
}
