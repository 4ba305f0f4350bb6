//! The real kubectl against the cluster (devplane by default): the CRDs and examples
//! apply, objects read back as YAML and tables, `get -w` sees an update, `delete`
//! waits for a finalizer, an invalid object is refused naming the field, and
//! `explain` shows the field documentation.
//!
//! kubectl is the machine's (`make test` installs Debian's `kubernetes-client` when
//! there is none).

mod support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use patchbay::api::{SwitchPort, SwitchPortConfiguration};
use serde_json::json;
use support::Cluster;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The examples, rewritten into the test's namespace.
fn examples_in(cluster: &Cluster) -> std::path::PathBuf {
    let dir = cluster.dir.join("examples");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(format!("{ROOT}/examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path)
                .unwrap()
                .replace("network-infra", &cluster.namespace);
            // The test namespace exists already; skip the example's Namespace.
            if text.contains("kind: Namespace") {
                continue;
            }
            std::fs::write(dir.join(path.file_name().unwrap()), text).unwrap();
        }
    }
    dir
}

async fn with_crds_and_examples(test: &str) -> Cluster {
    let cluster = Cluster::start(test).await;
    let out = cluster.kubectl_ok(&["apply", "-f", "crds/"]);
    assert!(out.contains("switchports.patchbay.dev"), "{out}");
    for crd in [
        "switchports.patchbay.dev",
        "switchportconfigurations.patchbay.dev",
    ] {
        cluster.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{crd}"),
            "--timeout=30s",
        ]);
    }
    // Metal3's CRDs (the renditions of upstream's): the example BareMetalSwitch,
    // HostNetworkAttachment and BareMetalHost are taken in as a cluster with the
    // baremetal-operator takes them.
    cluster.kubectl_ok(&["apply", "-f", "testbed/crds/"]);
    for crd in [
        "baremetalswitches.metal3.io",
        "hostnetworkattachments.metal3.io",
        "baremetalhosts.metal3.io",
    ] {
        cluster.kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{crd}"),
            "--timeout=30s",
        ]);
    }
    let dir = examples_in(&cluster);
    let out = cluster.kubectl_ok(&["apply", "-f", dir.to_str().unwrap()]);
    for created in [
        "baremetalswitch.metal3.io/tor-5 created",
        "hostnetworkattachment.metal3.io/web-trunk created",
        "baremetalhost.metal3.io/server-51 created",
    ] {
        assert!(out.contains(created), "{out}");
    }
    assert!(
        out.contains("switchportconfiguration.patchbay.dev/tenant-web created"),
        "{out}"
    );
    cluster
}

#[tokio::test]
async fn kubectl_applies_crds_and_examples_and_reads_them_back() {
    let cluster = with_crds_and_examples("kubectl_apply").await;
    let ns = cluster.namespace.clone();
    let yaml = cluster.kubectl_ok(&["get", "swpc", "tenant-web", "-n", &ns, "-o", "yaml"]);
    assert!(yaml.contains("untaggedVLAN: 100"), "{yaml}");
    assert!(yaml.contains("name: web-front"), "{yaml}");
    assert!(yaml.contains("resourceVersion:"), "{yaml}");

    // Re-applying unchanged manifests changes nothing.
    let dir = cluster.dir.join("examples");
    let again = cluster.kubectl_ok(&["apply", "-f", dir.to_str().unwrap()]);
    assert!(
        again.contains("switchportconfiguration.patchbay.dev/tenant-web unchanged"),
        "{again}"
    );

    // The server prints the CRD's columns.
    let table = cluster.kubectl_ok(&["get", "switchports", "-n", &ns]);
    let header = table.lines().next().unwrap_or("");
    for col in [
        "NAME",
        "STATE",
        "SWITCH",
        "PORT",
        "CONFIGURATION",
        "HOST",
        "REASON",
        "AGE",
    ] {
        assert!(header.contains(col), "missing {col} in {header:?}");
    }
    assert!(
        table.contains("server-7-eth0") && table.contains("tenant-web"),
        "{table}"
    );
    let all = cluster.kubectl_ok(&["get", "patchbay", "-n", &ns]);
    assert!(all.contains("switch.patchbay.dev/tor-1"), "{all}");

    let explain = cluster.kubectl_ok(&["explain", "switchportconfiguration.spec.untaggedVLAN"]);
    assert!(explain.contains("VLAN carried untagged"), "{explain}");
    let explain = cluster.kubectl_ok(&[
        "explain",
        "serverclaim.spec.roles.requirements.macAddresses",
    ]);
    assert!(
        explain.contains("Pins: a Server whose boot MAC"),
        "{explain}"
    );
    let explain = cluster.kubectl_ok(&["explain", "vlanpool.spec.shared"]);
    assert!(
        explain.contains("True for a VLAN every listed namespace may carry"),
        "{explain}"
    );
    cluster.finish().await;
}

#[tokio::test]
async fn kubectl_refuses_an_invalid_object_naming_the_field() {
    let cluster = with_crds_and_examples("kubectl_invalid").await;
    let file = cluster.dir.join("bad.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: patchbay.dev/v1alpha1\nkind: SwitchPortConfiguration\nmetadata:\n  \
             name: bad\n  namespace: {}\nspec:\n  untaggedVLAN: 5000\n  vlans:\n  - id: 0\n",
            cluster.namespace
        ),
    )
    .unwrap();
    let out = cluster.kubectl(&["apply", "-f", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.untaggedVLAN"), "{err}");
    assert!(err.contains("less than or equal to 4094"), "{err}");
    assert!(err.contains("spec.vlans[0].id"), "{err}");
    let get = cluster.kubectl(&["get", "swpc", "bad", "-n", &cluster.namespace]);
    assert!(!get.status.success(), "the invalid object was not stored");
    cluster.finish().await;
}

#[tokio::test]
async fn kubectl_get_watch_receives_an_update() {
    let cluster = with_crds_and_examples("kubectl_watch").await;
    let mut child = cluster
        .kubectl_command(&[
            "get",
            "swpc",
            "provisioning",
            "-n",
            &cluster.namespace,
            "-w",
            "-o",
            "jsonpath={.spec.untaggedVLAN}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("initial state");
    assert_eq!(first.trim(), "10");
    // kubectl prints the object, then opens its watch; on a loaded machine that can
    // take a while, so keep making updates until one is printed.
    let api: Api<SwitchPortConfiguration> =
        Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let mut sent = Vec::new();
    let mut seen = None;
    for vlan in 11..=30 {
        api.patch(
            "provisioning",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"untaggedVLAN": vlan}})),
        )
        .await
        .unwrap();
        sent.push(vlan.to_string());
        if let Ok(line) = rx.recv_timeout(Duration::from_secs(3)) {
            seen = Some(line.trim().to_owned());
            break;
        }
    }
    let seen = seen.expect("kubectl get -w printed no update within 60 s");
    assert!(sent.contains(&seen), "printed {seen:?}, sent {sent:?}");
    let _ = child.kill();
    let _ = child.wait();
    cluster.finish().await;
}

#[tokio::test]
async fn kubectl_delete_waits_until_the_finalizer_is_removed() {
    let cluster = with_crds_and_examples("kubectl_delete").await;
    let ns = cluster.namespace.clone();
    let api: Api<SwitchPort> = Api::namespaced(cluster.client.clone(), &ns);
    api.patch(
        "server-7-eth0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["patchbay.dev/cleanup"]}})),
    )
    .await
    .unwrap();
    let mut child = cluster
        .kubectl_command(&["delete", "swp", "server-7-eth0", "-n", &ns, "--timeout=60s"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // kubectl has sent its DELETE once the deletionTimestamp is set (on a loaded
    // machine kubectl itself may take a while to start).
    support::eventually(60, "kubectl's DELETE", || async {
        let p = api.get("server-7-eth0").await.ok()?;
        p.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "kubectl delete returned while the finalizer holds"
    );
    api.patch(
        "server-7-eth0",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let mut status = None;
    for _ in 0..600 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(status.expect("kubectl delete returned").success());
    assert!(api.get_opt("server-7-eth0").await.unwrap().is_none());
    cluster.finish().await;
}
