//! patchbay's admission webhooks in a test: served with TLS on a free loopback port
//! from a certificate the test makes, and registered with the cluster as deploy/
//! registers them (a URL instead of the Service).

use std::net::SocketAddr;
use std::path::Path;

use base64::Engine;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, PostParams};
use serde_json::json;

/// Serves `routes` with TLS from `dir`'s `tls.crt` and `tls.key` on a free loopback
/// port, until the test ends; the address.
pub async fn serve(routes: patchbay::serve::Routes, dir: &Path) -> SocketAddr {
    let tls = patchbay::serve::tls_acceptor(dir).expect("certificate loads");
    let (listener, addr) = patchbay::serve::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    tokio::spawn(patchbay::serve::serve(
        listener,
        Some(tls),
        routes,
        std::future::pending::<()>(),
    ));
    addr
}

/// What one ValidatingWebhookConfiguration sends where.
pub struct Registration<'a> {
    /// The configuration's name.
    pub name: &'a str,
    /// Its one webhook's name (`tenancy.patchbay.dev`).
    pub webhook: &'a str,
    /// The URL it calls.
    pub url: &'a str,
    /// The CA its certificate is verified against (PEM).
    pub ca: &'a [u8],
    /// `Fail` or `Ignore`.
    pub policy: &'a str,
    /// The operations sent.
    pub operations: &'a [&'a str],
    /// The patchbay.dev resources sent.
    pub resources: &'a [&'a str],
}

/// Creates or replaces the ValidatingWebhookConfiguration `r` describes.
pub async fn register(client: kube::Client, r: &Registration<'_>) {
    let config: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": r.name},
        "webhooks": [{
            "name": r.webhook,
            "clientConfig": {"url": r.url,
                             "caBundle": base64::engine::general_purpose::STANDARD.encode(r.ca)},
            "rules": [{"apiGroups": ["patchbay.dev"], "apiVersions": ["v1alpha1"],
                       "operations": r.operations, "resources": r.resources}],
            "failurePolicy": r.policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }]
    }))
    .unwrap();
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    match api.get_opt(r.name).await.unwrap() {
        None => {
            api.create(&PostParams::default(), &config).await.unwrap();
        }
        Some(old) => {
            let mut config = config;
            config.metadata.resource_version = old.metadata.resource_version;
            api.replace(r.name, &PostParams::default(), &config)
                .await
                .unwrap();
        }
    }
}

/// The resources deploy/blast-radius/ sends to the blast-radius webhook.
pub const BLAST_RADIUS_RESOURCES: &[&str] = &[
    "switchportconfigurations",
    "switches",
    "providerswitches",
    "switchports",
    "smartnicconfigurations",
    "smartnicports",
    "vlanpools",
];

/// patchbay's blast-radius webhook, deciding under `tenancy` as the operator does,
/// served from a certificate made in `dir` and registered as deploy/blast-radius/
/// registers it (a URL instead of the Service).
pub async fn blast_radius(
    client: kube::Client,
    dir: &Path,
    tenancy: Option<patchbay::decide::tenancy::Tenancy>,
) {
    use std::sync::Arc;
    patchbay_testbed::webhook_certificate(dir, "patchbay-webhook").unwrap();
    let routes = patchbay::serve::Routes {
        ready: Arc::new(|| true),
        metrics: Arc::default(),
        admission: None,
        radius: Some(Arc::new(patchbay::blast_radius::BlastRadius::new(
            client.clone(),
            tenancy,
        ))),
    };
    let addr = serve(routes, dir).await;
    let url = format!("https://{addr}/blast-radius");
    let ca = std::fs::read(dir.join("tls.crt")).unwrap();
    register(
        client,
        &Registration {
            name: "patchbay-blast-radius",
            webhook: "blast-radius.patchbay.dev",
            url: &url,
            ca: &ca,
            policy: "Ignore",
            operations: &["UPDATE", "DELETE"],
            resources: BLAST_RADIUS_RESOURCES,
        },
    )
    .await;
}
