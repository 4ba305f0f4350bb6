//! The operator's HTTP endpoint, on `--metrics-address`: `/metrics` (Prometheus text
//! format, [`crate::metrics`]), `/healthz` (the process answers) and `/readyz` (the
//! caches are synced and, with leader election, the leader is known). Plain HTTP/1.1,
//! one request per connection, GET only: what a scraper and a kubelet probe need,
//! without a web framework. Network I/O.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The longest request head read (a probe's is a few hundred bytes).
const HEAD_LIMIT: usize = 8192;

/// Serves on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    ready: impl Fn() -> bool + Send + Sync + Clone + 'static,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let ready = ready.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(5), answer(stream, ready)).await;
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

/// The status line and body for a request line.
pub fn respond(request_line: &str, ready: bool) -> (u16, &'static str, String) {
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != "GET" && method != "HEAD" {
        return (405, TEXT, "only GET\n".into());
    }
    match path {
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            crate::metrics::render(),
        ),
        "/healthz" => (200, TEXT, "ok\n".into()),
        "/readyz" if ready => (200, TEXT, "ok\n".into()),
        "/readyz" => (
            503,
            TEXT,
            "not ready: caches not synced or no leader known\n".into(),
        ),
        _ => (404, TEXT, "not found: /metrics, /healthz, /readyz\n".into()),
    }
}

async fn answer(mut stream: TcpStream, ready: impl Fn() -> bool) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < HEAD_LIMIT {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let line = text.lines().next().unwrap_or("");
    let (code, content_type, body) = respond(line, ready());
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let body = if line.starts_with("HEAD ") {
        String::new()
    } else {
        body
    };
    let response = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_gets_its_answer() {
        assert_eq!(respond("GET /healthz HTTP/1.1", false).0, 200);
        assert_eq!(respond("GET /readyz HTTP/1.1", false).0, 503);
        assert_eq!(respond("GET /readyz?verbose HTTP/1.1", true).0, 200);
        let (code, ct, body) = respond("GET /metrics HTTP/1.1", true);
        assert_eq!(code, 200);
        assert!(ct.starts_with("text/plain; version=0.0.4"));
        assert!(body.contains("# TYPE patchbay_reconciles_total counter"));
        assert_eq!(respond("POST /metrics HTTP/1.1", true).0, 405);
        assert_eq!(respond("GET /secrets HTTP/1.1", true).0, 404);
        assert_eq!(respond("", true).0, 405);
    }
}
