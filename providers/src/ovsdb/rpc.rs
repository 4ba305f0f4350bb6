//! A small OVSDB JSON-RPC client (RFC 7047) over TCP or a unix socket.
//!
//! The wire format is back-to-back JSON objects with no framing; [`Connection`]
//! splits them with serde_json's streaming parser. Requests are answered in order
//! (one outstanding request at a time: each switch has one writer), and the server's
//! `echo` requests are answered whenever they arrive, so an idle-probe never drops a
//! session that is waiting on a slow transaction. Notifications (`update`, `locked`)
//! are ignored: this client does not `monitor`.
//!
//! `transact` checks every operation's result: OVSDB reports a failed operation
//! *inside* `result[i]` with the top-level `error` null (and rolls the whole
//! transaction back), and a commit failure as one extra element after the last
//! operation; both become [`OvsdbError::Operation`].

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::error::{Cause, DeviceError};
use crate::heard::Heard;

/// Where an OVSDB server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port` (RFC 7047's `tcp:` remote).
    Tcp(String),
    /// A unix socket path (`punix:` remote).
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp:{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Why an OVSDB call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OvsdbError {
    /// Connecting, reading or writing failed.
    #[error("cannot talk to the OVSDB server at {endpoint}: {cause}")]
    Io {
        /// The endpoint.
        endpoint: String,
        /// What the socket said.
        #[source]
        cause: Cause,
    },
    /// No answer in time.
    #[error("no answer from the OVSDB server within {:.1} s while {during}", after.as_secs_f64())]
    Timeout {
        /// What was being done.
        during: String,
        /// The timeout.
        after: Duration,
    },
    /// The server answered a request with a top-level error.
    #[error("OVSDB {method} failed: {error}")]
    Rpc {
        /// The method.
        method: String,
        /// The error object, as text.
        error: String,
    },
    /// One operation of a transaction failed (the transaction was rolled back).
    #[error("OVSDB refused {op}: {error}{}", if details.is_empty() { String::new() } else { format!(" ({details})") })]
    Operation {
        /// Which operation, e.g. `operation 2 (update Port)` or `commit`.
        op: String,
        /// The RFC 7047 error string (`constraint violation`, `referential integrity
        /// violation`, `timed out`, …).
        error: String,
        /// The server's details, if any.
        details: String,
    },
    /// The server sent something that is not OVSDB JSON-RPC.
    #[error("unexpected OVSDB answer while {during}: {detail}")]
    Protocol {
        /// What was being done.
        during: String,
        /// What was wrong.
        detail: String,
    },
}

impl From<OvsdbError> for DeviceError {
    fn from(e: OvsdbError) -> Self {
        match e {
            OvsdbError::Io { endpoint, cause } => DeviceError::Unreachable {
                address: endpoint,
                cause,
            },
            OvsdbError::Timeout { during, after } => DeviceError::Timeout { during, after },
            OvsdbError::Rpc { method, error } => DeviceError::CommandRejected {
                command: method,
                output: error,
            },
            OvsdbError::Operation { op, error, details } => DeviceError::CommandRejected {
                command: op,
                output: if details.is_empty() {
                    error
                } else {
                    format!("{error}: {details}")
                },
            },
            OvsdbError::Protocol { during, detail } => DeviceError::Protocol {
                during,
                cause: Cause::msg(detail),
            },
        }
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// One OVSDB session.
pub struct Connection {
    stream: Box<dyn Stream>,
    endpoint: String,
    buf: Vec<u8>,
    next_id: u64,
    timeout: Duration,
    /// How many `echo` requests from the server were answered (tests read this).
    echoes_answered: u64,
    /// Stamped whenever the server sends anything.
    heard: Heard,
}

impl Connection {
    /// Connects within `connect_timeout`; `timeout` bounds every later call.
    pub async fn connect(
        endpoint: &Endpoint,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Self, OvsdbError> {
        let name = endpoint.to_string();
        let io = |e: std::io::Error| OvsdbError::Io {
            endpoint: name.clone(),
            cause: Cause::new(e),
        };
        let dial = async {
            Ok::<Box<dyn Stream>, OvsdbError>(match endpoint {
                Endpoint::Tcp(addr) => {
                    let s = tokio::net::TcpStream::connect(addr).await.map_err(io)?;
                    let _ = s.set_nodelay(true);
                    Box::new(s)
                }
                Endpoint::Unix(path) => {
                    Box::new(tokio::net::UnixStream::connect(path).await.map_err(io)?)
                }
            })
        };
        let stream = tokio::time::timeout(connect_timeout, dial)
            .await
            .map_err(|_| OvsdbError::Timeout {
                during: format!("connecting to {name}"),
                after: connect_timeout,
            })??;
        Ok(Self {
            stream,
            endpoint: name,
            buf: Vec::with_capacity(64 * 1024),
            next_id: 1,
            timeout,
            echoes_answered: 0,
            heard: Heard::default(),
        })
    }

    /// This session stamps `heard` whenever the server sends anything.
    pub fn stamping(mut self, heard: &Heard) -> Self {
        self.heard = heard.clone();
        self
    }

    /// The endpoint this session talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// How many `echo` requests of the server this session answered.
    pub fn echoes_answered(&self) -> u64 {
        self.echoes_answered
    }

    async fn send(&mut self, msg: &Value) -> Result<(), OvsdbError> {
        let bytes = serde_json::to_vec(msg).map_err(|e| OvsdbError::Protocol {
            during: "encoding a request".into(),
            detail: e.to_string(),
        })?;
        self.stream
            .write_all(&bytes)
            .await
            .map_err(|e| OvsdbError::Io {
                endpoint: self.endpoint.clone(),
                cause: Cause::new(e),
            })
    }

    /// The next complete JSON message, reading more bytes as needed.
    async fn next_message(&mut self, deadline: Instant, during: &str) -> Result<Value, OvsdbError> {
        loop {
            let mut it = serde_json::Deserializer::from_slice(&self.buf).into_iter::<Value>();
            match it.next() {
                Some(Ok(v)) => {
                    let used = it.byte_offset();
                    self.buf.drain(..used);
                    return Ok(v);
                }
                Some(Err(e)) if !e.is_eof() => {
                    return Err(OvsdbError::Protocol {
                        during: during.into(),
                        detail: format!("not JSON: {e}"),
                    });
                }
                _ => {}
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk))
                .await
                .map_err(|_| OvsdbError::Timeout {
                    during: during.into(),
                    after: self.timeout,
                })?
                .map_err(|e| OvsdbError::Io {
                    endpoint: self.endpoint.clone(),
                    cause: Cause::new(e),
                })?;
            if n == 0 {
                return Err(OvsdbError::Io {
                    endpoint: self.endpoint.clone(),
                    cause: Cause::msg("the server closed the connection"),
                });
            }
            self.heard.stamp();
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one request and returns its `result`, answering the server's `echo`
    /// requests meanwhile.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, OvsdbError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"method": method, "params": params, "id": id}))
            .await?;
        let deadline = Instant::now() + self.timeout;
        let during = format!("waiting for the answer to {method}");
        loop {
            let msg = self.next_message(deadline, &during).await?;
            if let Some(m) = msg.get("method").and_then(Value::as_str) {
                if m == "echo" && msg.get("id").is_some_and(|i| !i.is_null()) {
                    let reply = json!({"id": msg["id"], "result": msg["params"], "error": null});
                    self.send(&reply).await?;
                    self.echoes_answered += 1;
                }
                // Notifications (update, locked, stolen) are not ours to handle.
                continue;
            }
            if msg.get("id").and_then(Value::as_u64) != Some(id) {
                // An answer to an earlier request we gave up on: skip it.
                continue;
            }
            match msg.get("error") {
                Some(e) if !e.is_null() => {
                    return Err(OvsdbError::Rpc {
                        method: method.into(),
                        error: error_text(e),
                    });
                }
                _ => {}
            }
            return msg.get("result").cloned().ok_or(OvsdbError::Protocol {
                during,
                detail: "an answer without result".into(),
            });
        }
    }

    /// The databases the server holds (`list_dbs`).
    pub async fn list_dbs(&mut self) -> Result<Vec<String>, OvsdbError> {
        let v = self.call("list_dbs", json!([])).await?;
        let list = v.as_array().ok_or_else(|| OvsdbError::Protocol {
            during: "list_dbs".into(),
            detail: "the result is not an array".into(),
        })?;
        Ok(list
            .iter()
            .filter_map(|d| d.as_str().map(str::to_owned))
            .collect())
    }

    /// Client-initiated `echo` (a liveness probe): returns what the server echoed.
    pub async fn echo(&mut self, payload: Value) -> Result<Value, OvsdbError> {
        self.call("echo", payload).await
    }

    /// Runs `ops` as one transaction on `db` and returns one result per operation.
    /// A failed operation (or commit) is an error; the server has then rolled the
    /// whole transaction back.
    pub async fn transact(&mut self, db: &str, ops: &[Value]) -> Result<Vec<Value>, OvsdbError> {
        let mut params = Vec::with_capacity(ops.len() + 1);
        params.push(Value::String(db.into()));
        params.extend(ops.iter().cloned());
        let result = self.call("transact", Value::Array(params)).await?;
        let results = result.as_array().ok_or_else(|| OvsdbError::Protocol {
            during: "transact".into(),
            detail: "the result is not an array".into(),
        })?;
        check_results(ops, results)?;
        Ok(results.iter().take(ops.len()).cloned().collect())
    }
}

/// The first failed operation of a transaction result, as a typed error.
pub fn check_results(ops: &[Value], results: &[Value]) -> Result<(), OvsdbError> {
    for (i, r) in results.iter().enumerate() {
        let Some(err) = r.get("error").filter(|e| !e.is_null()) else {
            continue;
        };
        let op = match ops.get(i) {
            Some(o) => {
                let name = o.get("op").and_then(Value::as_str).unwrap_or("?");
                match o.get("table").and_then(Value::as_str) {
                    Some(t) => format!("operation {i} ({name} {t})"),
                    None => format!("operation {i} ({name})"),
                }
            }
            None => "commit".into(),
        };
        return Err(OvsdbError::Operation {
            op,
            error: error_text(err),
            details: r
                .get("details")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        });
    }
    if results.len() < ops.len() {
        return Err(OvsdbError::Protocol {
            during: "transact".into(),
            detail: format!(
                "{} results for {} operations and no error",
                results.len(),
                ops.len()
            ),
        });
    }
    Ok(())
}

fn error_text(e: &Value) -> String {
    match e {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Builds an OVSDB set (`["set", [...]]`) from values.
pub fn set(values: impl IntoIterator<Item = Value>) -> Value {
    json!(["set", values.into_iter().collect::<Vec<_>>()])
}

/// Reads an OVSDB set or a single atom as a list of atoms.
pub fn atoms(v: &Value) -> Vec<Value> {
    match v {
        Value::Array(a) if a.first().and_then(Value::as_str) == Some("set") => a
            .get(1)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        Value::Array(a) if a.first().and_then(Value::as_str) == Some("uuid") => vec![v.clone()],
        Value::Null => Vec::new(),
        other => vec![other.clone()],
    }
}

/// Reads an OVSDB map (`["map", [[k, v], ...]]`) of strings.
pub fn string_map(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .filter(|a| a.first().and_then(Value::as_str) == Some("map"))
        .and_then(|a| a.get(1))
        .and_then(Value::as_array)
        .map(|pairs| {
            pairs
                .iter()
                .filter_map(|p| {
                    Some((
                        p.get(0)?.as_str()?.to_owned(),
                        p.get(1)?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The uuid string of a `["uuid", "…"]` atom.
pub fn uuid(v: &Value) -> Option<&str> {
    v.as_array()
        .filter(|a| a.first().and_then(Value::as_str) == Some("uuid"))
        .and_then(|a| a.get(1))
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_inside_the_results_names_the_operation() {
        let ops = vec![
            json!({"op": "select", "table": "Port"}),
            json!({"op": "update", "table": "Port"}),
        ];
        let results = vec![
            json!({"rows": []}),
            json!({"error": "constraint violation", "details": "4096 is not in the range 0 to 4095"}),
        ];
        let e = check_results(&ops, &results).unwrap_err();
        assert_eq!(
            e.to_string(),
            "OVSDB refused operation 1 (update Port): constraint violation (4096 is not in the range 0 to 4095)"
        );
        let commit = vec![
            json!({}),
            json!({}),
            json!({"error": "referential integrity violation"}),
        ];
        let e = check_results(&ops, &commit).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("OVSDB refused commit: referential"),
            "{e}"
        );
        assert!(check_results(&ops, &[json!({}), json!({"count": 1})]).is_ok());
        assert!(matches!(
            check_results(&ops, &[json!({})]),
            Err(OvsdbError::Protocol { .. })
        ));
    }

    #[test]
    fn sets_maps_and_uuids_read_back() {
        assert_eq!(atoms(&json!(["set", [1, 2]])), vec![json!(1), json!(2)]);
        assert_eq!(atoms(&json!(7)), vec![json!(7)]);
        assert_eq!(atoms(&json!(["set", []])), Vec::<Value>::new());
        assert_eq!(
            string_map(&json!(["map", [["a", "b"]]])),
            vec![("a".to_owned(), "b".to_owned())]
        );
        assert_eq!(uuid(&json!(["uuid", "x-1"])), Some("x-1"));
        assert_eq!(atoms(&json!(["uuid", "x-1"])).len(), 1);
    }

    #[tokio::test]
    async fn back_to_back_messages_split_and_echo_is_answered() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut conn = Connection {
            stream: Box::new(client),
            endpoint: "test".into(),
            buf: Vec::new(),
            next_id: 1,
            timeout: Duration::from_secs(5),
            echoes_answered: 0,
            heard: Heard::default(),
        };
        let peer = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let n = server.read(&mut buf).await.unwrap();
            let req: Value = serde_json::from_slice(&buf[..n]).unwrap();
            assert_eq!(req["method"], "list_dbs");
            // An echo, a notification and the answer in one write, the answer split.
            let answer = format!(
                "{}{}{}",
                json!({"method": "echo", "params": ["x"], "id": "echo"}),
                json!({"method": "update", "params": [null, {}], "id": null}),
                json!({"id": req["id"], "result": ["Open_vSwitch", "_Server"], "error": null})
            );
            let (a, b) = answer.split_at(answer.len() - 7);
            server.write_all(a.as_bytes()).await.unwrap();
            server.write_all(b.as_bytes()).await.unwrap();
            let n = server.read(&mut buf).await.unwrap();
            let echo: Value = serde_json::from_slice(&buf[..n]).unwrap();
            assert_eq!(echo, json!({"id": "echo", "result": ["x"], "error": null}));
        });
        assert_eq!(
            conn.list_dbs().await.unwrap(),
            vec!["Open_vSwitch", "_Server"]
        );
        assert_eq!(conn.echoes_answered(), 1);
        peer.await.unwrap();
    }
}
