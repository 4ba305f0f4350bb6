//! The operator's one HTTP server, on hyper: `/metrics` (OpenMetrics text format,
//! [`crate::metrics`]), `/healthz` (the process answers), `/readyz` (the caches are
//! synced and, with leader election, the leader is known), `POST /validate` (the
//! tenancy webhook, [`crate::webhook`]) and `POST /blast-radius` (the warnings of
//! [`crate::blast_radius`]): an AdmissionReview v1 in, its answer out. One
//! router, on up to two listeners: plain HTTP on `--metrics-address` (what a scraper
//! and a kubelet probe use) and TLS on `--webhook-address` (what the API server
//! calls). The TLS certificate is read from a directory (a mounted Secret: `tls.crt`,
//! `tls.key`) and read again when its files change, so a rotated Secret is served
//! without a restart. Network I/O.

use parking_lot::Mutex;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;

/// The largest AdmissionReview read (the API server's own request limit is 3 MiB).
const BODY_LIMIT: usize = 3 * 1024 * 1024;
/// How long one connection may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What answers an admission request ([`crate::webhook`], [`crate::blast_radius`]):
/// kube-core's typed request in, its response out.
pub trait Admit: Send + Sync {
    /// The answer to one request.
    fn admit<'a>(
        &'a self,
        request: &'a AdmissionRequest<DynamicObject>,
    ) -> futures::future::BoxFuture<'a, AdmissionResponse>;
}

/// What the router answers with.
#[derive(Clone)]
pub struct Routes {
    /// Whether `/readyz` says ready.
    pub ready: Arc<dyn Fn() -> bool + Send + Sync>,
    /// What `/metrics` renders (and where the webhook's timings go).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// The tenancy webhook, when this process serves one (`/validate` is 404
    /// otherwise).
    pub admission: Option<Arc<dyn Admit>>,
    /// The blast-radius webhook, when this process serves one (`/blast-radius` is
    /// 404 otherwise).
    pub radius: Option<Arc<dyn Admit>>,
}

/// Serves `routes` on `listener` until `shutdown` completes; with `tls`, every
/// connection is a TLS one.
pub async fn serve(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    routes: Routes,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let routes = routes.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let routes = routes.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(req, &routes).await) }
                    });
                    // Probes and scrapes: one request per connection, closed after
                    // the answer (as before hyper). The API server keeps its TLS
                    // connection to the webhook open between reviews.
                    let http = hyper::server::conn::http1::Builder::new()
                        .header_read_timeout(REQUEST_TIMEOUT)
                        .timer(hyper_util::rt::TokioTimer::new())
                        .keep_alive(tls.is_some())
                        .to_owned();
                    match tls {
                        None => {
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                        Some(acceptor) => {
                            let Ok(Ok(stream)) =
                                tokio::time::timeout(REQUEST_TIMEOUT, acceptor.accept(stream)).await
                            else {
                                return;
                            };
                            let _ = http.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                });
            }
        }
    }
}

/// Binds `address` (`127.0.0.1:9090`; port 0 picks a free one).
pub async fn bind(address: SocketAddr) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

type Body = Full<Bytes>;

fn reply(code: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn answer(req: Request<Incoming>, routes: &Routes) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let webhook = match path.as_str() {
        "/validate" => Some(&routes.admission),
        "/blast-radius" => Some(&routes.radius),
        _ => None,
    };
    if let Some(webhook) = webhook {
        let Some(admission) = webhook else {
            return reply(
                404,
                TEXT,
                "not found: this process serves no such webhook\n",
            );
        };
        if req.method() != Method::POST {
            return reply(405, TEXT, "only POST\n");
        }
        let started = Instant::now();
        let body = match Limited::new(req.into_body(), BODY_LIMIT).collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => return reply(413, TEXT, "request too large or cut off\n"),
        };
        let request = serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
            .ok()
            .and_then(|review| review.try_into().ok());
        let Some(request) = request else {
            return reply(
                400,
                TEXT,
                "not an AdmissionReview v1 with a request (JSON)\n",
            );
        };
        let response = admission.admit(&request).await;
        let answer = match (response.allowed, &response.warnings) {
            (false, _) => "denied",
            (true, Some(w)) if !w.is_empty() => "warned",
            (true, _) => "allowed",
        };
        let review = response.into_review();
        routes
            .metrics
            .admission_seconds
            .get_or_create(&crate::metrics::AnswerLabel { answer })
            .observe(started.elapsed().as_secs_f64());
        return reply(
            200,
            "application/json",
            serde_json::to_vec(&review).unwrap_or_default(),
        );
    }
    let (code, content_type, body) =
        respond(req.method(), &path, (routes.ready)(), &routes.metrics);
    let body = if req.method() == Method::HEAD {
        String::new()
    } else {
        body
    };
    reply(code, content_type, body)
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The status, content type and body of a GET: metrics and probes.
pub fn respond(
    method: &Method,
    path: &str,
    ready: bool,
    metrics: &crate::metrics::Metrics,
) -> (u16, &'static str, String) {
    if method != Method::GET && method != Method::HEAD {
        return (405, TEXT, "only GET\n".into());
    }
    match path {
        "/metrics" => (
            200,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.render(),
        ),
        "/healthz" => (200, TEXT, "ok\n".into()),
        "/readyz" if ready => (200, TEXT, "ok\n".into()),
        "/readyz" => (
            503,
            TEXT,
            "not ready: caches not synced or no leader known\n".into(),
        ),
        _ => (
            404,
            TEXT,
            "not found: /metrics, /healthz, /readyz, /validate, /blast-radius\n".into(),
        ),
    }
}

/// Why the webhook's certificate cannot be served.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct CertError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// The certificate of a directory holding `tls.crt` (the chain, PEM) and `tls.key`
/// (PEM), read again at most once a second when either file's modification time
/// changed (kubelet swaps a mounted Secret's files atomically). A rotated pair that
/// does not load is logged and the last good one kept.
#[derive(Debug)]
pub struct CertDir {
    dir: PathBuf,
    current: Mutex<Loaded>,
}

/// The modification times of `tls.crt` and `tls.key`.
type Stamp = (Option<SystemTime>, Option<SystemTime>);

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamp: Stamp,
    checked: Instant,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl CertDir {
    /// Loads the pair in `dir`; an error names the file and why.
    pub fn load(dir: &Path) -> Result<Self, CertError> {
        let (key, stamp) = Self::read(dir)?;
        Ok(CertDir {
            dir: dir.to_owned(),
            current: Mutex::new(Loaded {
                key,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    fn read(dir: &Path) -> Result<(Arc<CertifiedKey>, Stamp), CertError> {
        let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let stamp = (modified(&crt), modified(&key));
        let err = |path: &Path, reason: String| CertError {
            path: path.to_owned(),
            reason,
        };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&crt)
            .map_err(|e| err(&crt, e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| err(&crt, e.to_string()))?;
        if chain.is_empty() {
            return Err(err(&crt, "no certificate in the file".into()));
        }
        // The key's own error text is not repeated: it could quote key material.
        let private = PrivateKeyDer::from_pem_file(&key)
            .map_err(|_| err(&key, "not a PEM private key".into()))?;
        let signing = rustls::crypto::ring::sign::any_supported_type(&private)
            .map_err(|_| err(&key, "an unsupported kind of private key".into()))?;
        Ok((Arc::new(CertifiedKey::new(chain, signing)), stamp))
    }

    /// The certificate to serve now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut loaded = self.current.lock();
        if loaded.checked.elapsed() >= Duration::from_secs(1) {
            loaded.checked = Instant::now();
            let stamp = (
                modified(&self.dir.join("tls.crt")),
                modified(&self.dir.join("tls.key")),
            );
            if stamp != loaded.stamp {
                match Self::read(&self.dir) {
                    Ok((key, stamp)) => {
                        tracing::info!(dir = %self.dir.display(), "webhook certificate reloaded");
                        loaded.key = key;
                        loaded.stamp = stamp;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook certificate not reloaded; serving the last good one");
                        loaded.stamp = stamp;
                    }
                }
            }
        }
        loaded.key.clone()
    }
}

impl ResolvesServerCert for CertDir {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// A TLS acceptor serving the certificate of `dir` (HTTP/1.1, TLS 1.2 and 1.3).
pub fn tls_acceptor(dir: &Path) -> Result<tokio_rustls::TlsAcceptor, CertError> {
    let certs = Arc::new(CertDir::load(dir)?);
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| CertError {
        path: dir.to_owned(),
        reason: e.to_string(),
    })?
    .with_no_client_auth()
    .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_gets_its_answer() {
        let get = Method::GET;
        let m = crate::metrics::Metrics::new();
        assert_eq!(respond(&get, "/healthz", false, &m).0, 200);
        assert_eq!(respond(&get, "/readyz", false, &m).0, 503);
        assert_eq!(respond(&get, "/readyz", true, &m).0, 200);
        let (code, ct, body) = respond(&get, "/metrics", true, &m);
        assert_eq!(code, 200);
        assert!(ct.starts_with("application/openmetrics-text"));
        assert!(body.contains("# TYPE patchbay_leader gauge"), "{body}");
        assert_eq!(respond(&Method::POST, "/metrics", true, &m).0, 405);
        assert_eq!(respond(&get, "/secrets", true, &m).0, 404);
    }

    #[test]
    fn a_rotated_certificate_is_served_without_a_restart_and_a_bad_one_is_not() {
        let dir = std::env::temp_dir().join(format!("pb-certs-{}", std::process::id()));
        patchbay_testbed::webhook_certificate(&dir, "first").unwrap();
        let certs = CertDir::load(&dir).unwrap();
        let first = certs.current().cert[0].clone();
        patchbay_testbed::webhook_certificate(&dir, "second").unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        let second = certs.current().cert[0].clone();
        assert_ne!(first, second, "the rotated pair is served");
        // A broken key: the last good pair stays, and the error names the file
        // without quoting it.
        std::fs::write(
            dir.join("tls.key"),
            "-----BEGIN PRIVATE KEY-----\nnot a key\n",
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(certs.current().cert[0], second);
        let err = CertDir::load(&dir).unwrap_err().to_string();
        assert!(err.ends_with("tls.key: not a PEM private key"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
