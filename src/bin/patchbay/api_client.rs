//! The operator's Kubernetes API client: kube's own stack (TLS, timeouts, the
//! credentials layer, retries of throttled requests, extra headers), with one change:
//! an HTTP connection idle for [`IDLE`] is closed. Builds I/O; does none itself.
//!
//! kube's default client keeps nearly every connection it ever opened: its
//! connection pool has no timer, so its 90 s idle timeout is checked only on the
//! connection a request takes (the one idle for the shortest time). The pool grows to the
//! most requests that were in flight at once (~250 while 10,000 ports were created:
//! every Switch reconcile creating its ports), and each idle HTTP/1 connection keeps
//! its read and write buffers (~8 MB at 10,000 ports in a heap profile of an idle
//! operator). With a timer, the connections a burst opened are closed once it is
//! over; the few that steady work uses (lease renewals, status writes) stay open.
//!
//! A cluster reached through a proxy (`proxy-url` in the kubeconfig) gets kube's
//! default client unchanged.

use std::time::Duration;

use hyper_util::client::legacy::Builder;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{ClientBuilder, ConfigExt, retry::RetryPolicy};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// How long an HTTP connection to the API server may stay idle before it is closed.
pub const IDLE: Duration = Duration::from_secs(10);

/// A client for `config` (see the module doc).
pub fn client(config: kube::Config) -> anyhow::Result<kube::Client> {
    if config.proxy_url.is_some() {
        return Ok(kube::Client::try_from(config)?);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper = Builder::new(TokioExecutor::new())
        .pool_idle_timeout(IDLE)
        .pool_timer(TokioTimer::new())
        .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}
