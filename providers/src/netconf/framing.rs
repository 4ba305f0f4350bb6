//! NETCONF message framing over SSH (RFC 6242). Pure, no I/O.
//!
//! - base:1.0 ends each message with `]]>]]>` ([`Framing::EndOfMessage`]);
//! - base:1.1 sends chunks, `\n#<len>\n<bytes>`, and ends with `\n##\n`
//!   ([`Framing::Chunked`]). Both peers switch to it after the hellos when both
//!   announced base:1.1; the hellos themselves always use end-of-message framing.

/// How messages are delimited on the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// base:1.0: the message, then `]]>]]>`.
    EndOfMessage,
    /// base:1.1: length-prefixed chunks, then `\n##\n`.
    Chunked,
}

/// The end-of-message marker of base:1.0.
pub const END_OF_MESSAGE: &str = "]]>]]>";

/// The largest chunk RFC 6242 allows (4294967295 bytes); patchbay refuses anything
/// above 64 MiB as a broken peer long before that.
const MAX_CHUNK: usize = 64 << 20;

/// A peer that broke the framing rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("broken NETCONF framing: {0}")]
pub struct FramingError(pub String);

impl Framing {
    /// One message, framed. With end-of-message framing a message containing the
    /// marker cannot be sent (values are escaped, so patchbay never builds one).
    pub fn encode(self, message: &str) -> Result<Vec<u8>, FramingError> {
        match self {
            Framing::EndOfMessage => {
                if message.contains(END_OF_MESSAGE) {
                    return Err(FramingError(
                        "the message contains the end-of-message marker".into(),
                    ));
                }
                let mut out = message.as_bytes().to_vec();
                out.extend_from_slice(END_OF_MESSAGE.as_bytes());
                Ok(out)
            }
            Framing::Chunked => {
                let mut out = format!("\n#{}\n", message.len()).into_bytes();
                out.extend_from_slice(message.as_bytes());
                out.extend_from_slice(b"\n##\n");
                Ok(out)
            }
        }
    }

    /// The first complete message in `buf`: `Ok(Some((message, consumed)))`, or
    /// `Ok(None)` when more bytes are needed. Whitespace between messages (some
    /// devices print a newline after `]]>]]>`) is skipped.
    pub fn decode(self, buf: &[u8]) -> Result<Option<(String, usize)>, FramingError> {
        match self {
            Framing::EndOfMessage => {
                let Some(at) = find(buf, END_OF_MESSAGE.as_bytes()) else {
                    return Ok(None);
                };
                let text = utf8(&buf[..at])?;
                Ok(Some((
                    text.trim_start().to_owned(),
                    at + END_OF_MESSAGE.len(),
                )))
            }
            Framing::Chunked => decode_chunked(buf),
        }
    }
}

fn utf8(bytes: &[u8]) -> Result<&str, FramingError> {
    std::str::from_utf8(bytes).map_err(|e| FramingError(format!("a message is not UTF-8: {e}")))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn decode_chunked(buf: &[u8]) -> Result<Option<(String, usize)>, FramingError> {
    // Leading whitespace between messages is tolerated; a chunk header starts "\n#".
    let mut at = buf
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t' | b'\r'))
        .unwrap_or(buf.len());
    let mut body: Vec<u8> = Vec::new();
    loop {
        let rest = &buf[at..];
        if rest.len() < 3 {
            return Ok(None);
        }
        if !rest.starts_with(b"\n#") {
            return Err(FramingError(format!(
                "expected a chunk header (\\n#), got {:?}",
                String::from_utf8_lossy(&rest[..rest.len().min(16)])
            )));
        }
        if rest[2] == b'#' {
            if rest.len() < 4 {
                return Ok(None);
            }
            if rest[3] != b'\n' {
                return Err(FramingError(
                    "end-of-chunks marker without its newline".into(),
                ));
            }
            let text = String::from_utf8(body)
                .map_err(|e| FramingError(format!("a message is not UTF-8: {e}")))?;
            return Ok(Some((text, at + 4)));
        }
        let digits_end = match rest[2..].iter().position(|b| *b == b'\n') {
            Some(n) => 2 + n,
            None if rest.len() - 2 > 10 => {
                return Err(FramingError("chunk size longer than 10 digits".into()));
            }
            None => return Ok(None),
        };
        let digits = &rest[2..digits_end];
        let size: usize = std::str::from_utf8(digits)
            .ok()
            .filter(|d| !d.is_empty() && d.len() <= 10 && !d.starts_with('0'))
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| {
                FramingError(format!(
                    "bad chunk size {:?}",
                    String::from_utf8_lossy(digits)
                ))
            })?;
        if size > MAX_CHUNK {
            return Err(FramingError(format!("chunk of {size} bytes is too large")));
        }
        let start = digits_end + 1;
        if rest.len() < start + size {
            return Ok(None);
        }
        body.extend_from_slice(&rest[start..start + size]);
        at += start + size;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_of_message_frames_round_trip_and_wait_for_the_marker() {
        let f = Framing::EndOfMessage;
        let wire = f.encode("<rpc/>").unwrap();
        assert_eq!(wire, b"<rpc/>]]>]]>");
        // The simulator prints a newline after each marker.
        let mut two = b"\n<a/>]]>]]>\n<b/>]]>]]>".to_vec();
        let (m, n) = f.decode(&two).unwrap().unwrap();
        assert_eq!(m, "<a/>");
        two.drain(..n);
        assert_eq!(f.decode(&two).unwrap().unwrap().0, "<b/>");
        assert_eq!(f.decode(b"<a/>]]>]]").unwrap(), None);
        assert!(f.encode("x]]>]]>y").is_err());
    }

    #[test]
    fn chunked_frames_round_trip_across_chunks_and_partial_input() {
        let f = Framing::Chunked;
        assert_eq!(f.encode("<rpc/>").unwrap(), b"\n#6\n<rpc/>\n##\n");
        // RFC 6242 §4.2's example: one message in two chunks.
        let wire = b"\n#4\n<rpc\n#18\n message-id=\"102\"\n\n##\n";
        let (m, n) = f.decode(wire).unwrap().unwrap();
        assert_eq!(m, "<rpc message-id=\"102\"\n");
        assert_eq!(n, wire.len());
        // Any prefix is incomplete, never an error.
        for cut in 0..wire.len() {
            assert_eq!(f.decode(&wire[..cut]).unwrap(), None, "cut at {cut}");
        }
    }

    #[test]
    fn broken_chunked_framing_is_an_error() {
        let f = Framing::Chunked;
        for bad in [
            &b"<rpc/>"[..],
            b"\n#0\n\n##\n",
            b"\n#012\n",
            b"\n#x\n",
            b"\n#12345678901\n",
            b"\n##x",
        ] {
            assert!(f.decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
