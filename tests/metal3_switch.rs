//! Metal3's BareMetalSwitch as a cluster with the baremetal-operator (v0.14.0-rc.0)
//! has it: the CRD rendition in `testbed/crds/` accepts and refuses, at
//! `kubectl apply`, what upstream's schema does — required fields, the MAC pattern,
//! the driver enum and its default, the port's range, and no field upstream lacks —
//! and patchbay's type (`patchbay::api::metal3_switch`) reads back what is stored.

mod support;

use kube::api::Api;
use patchbay::api::metal3_switch::BareMetalSwitch;
use support::Cluster;

fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testbed/crds/metal3.io_baremetalswitches.yaml"),
    )
    .expect("the CRD rendition");
    patchbay_providers::yaml::from_str(&text).expect("a CRD")
}

/// `kubectl apply` of one BareMetalSwitch whose spec is `spec`: stdout on success,
/// stderr on refusal.
fn apply(cluster: &Cluster, name: &str, spec: &str) -> Result<String, String> {
    let path = cluster.dir.join(format!("{name}.yaml"));
    let doc = format!(
        "apiVersion: metal3.io/v1alpha1\nkind: BareMetalSwitch\nmetadata:\n  name: {name}\n  namespace: {}\nspec:\n{spec}",
        cluster.namespace
    );
    std::fs::write(&path, doc).expect("write manifest");
    let out = cluster.kubectl(&["apply", "-f", path.to_str().expect("path")]);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn a_bare_metal_switch_is_accepted_and_refused_as_upstream_does() {
    let cluster = Cluster::start("metal3-switch").await;
    cluster.install_crd(crd()).await;
    let good = "  address: 192.0.2.10\n  macAddress: aa:bb:cc:00:00:01\n  deviceType: netmiko_cisco_ios\n  credentials:\n    name: tor-1\n  port: 22\n";
    apply(&cluster, "tor-1", good).expect("upstream's shape is accepted");
    let api: Api<BareMetalSwitch> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let read = api.get("tor-1").await.expect("read back");
    assert_eq!(read.spec.address, "192.0.2.10");
    assert_eq!(read.spec.mac_address, "aa:bb:cc:00:00:01");
    assert_eq!(read.spec.device_type, "netmiko_cisco_ios");
    assert_eq!(read.spec.port, Some(22));
    assert_eq!(
        read.spec.driver.as_deref(),
        Some("generic-switch"),
        "the driver defaults as upstream's schema says"
    );
    assert_eq!(
        read.spec.credentials.and_then(|c| c.name).as_deref(),
        Some("tor-1")
    );
    // (name, spec, what the refusal names)
    let refused = [
        (
            "no-mac",
            "  address: 192.0.2.11\n  deviceType: netmiko_cisco_ios\n",
            "spec.macAddress",
        ),
        (
            "no-type",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n",
            "spec.deviceType",
        ),
        (
            "no-address",
            "  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n",
            "spec.address",
        ),
        (
            "bad-mac",
            "  address: 192.0.2.11\n  macAddress: aa-bb-cc-00-00-02\n  deviceType: netmiko_cisco_ios\n",
            "spec.macAddress",
        ),
        (
            "bad-driver",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n  driver: ironic\n",
            "spec.driver",
        ),
        (
            "port-zero",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n  port: 0\n",
            "spec.port",
        ),
        (
            "port-high",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n  port: 65536\n",
            "spec.port",
        ),
        // A field upstream lacks (a port list) is refused, as kubectl's strict
        // field validation does on a real cluster.
        (
            "with-ports",
            "  address: 192.0.2.11\n  macAddress: aa:bb:cc:00:00:02\n  deviceType: netmiko_cisco_ios\n  ports: [Gi0/1]\n",
            "spec.ports",
        ),
    ];
    for (name, spec, field) in refused {
        let err = apply(&cluster, name, spec).expect_err(name);
        assert!(
            err.contains(field),
            "{name}: the refusal names {field}: {err}"
        );
        assert!(
            api.get_opt(name).await.expect("get").is_none(),
            "{name} was stored"
        );
    }
    cluster.finish().await;
}
