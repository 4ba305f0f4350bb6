//! How patchbay reads and writes YAML, said once (pure): dialect and model files, the
//! operator's config file, `patchbay validate`'s manifests and the demo's examples all
//! go through here.
//!
//! The crate is `serde-saphyr` (maintained; kube-client already builds it for
//! kubeconfigs), in place of the deprecated `serde_yaml`. Two choices differ from its
//! defaults, both to keep what `serde_yaml` 0.9 did:
//! - **YAML 1.2 booleans** (`strict_booleans`): only `true`/`false` are booleans, so a
//!   value such as `yes`, `on` or `no` read into a dynamic value stays a string;
//! - **one-line errors** (no source snippet): errors land in one-line places — a
//!   `patchbay validate` row, a log line, a condition message — and name the line and
//!   column (`… at line 3, column 7`).
//!
//! Duplicate keys stay an error (the crate's default), as they were. Dynamic values are
//! `serde_json::Value`: every YAML patchbay reads is a Kubernetes-style document with
//! string keys.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A YAML read failure, with the line and column where there is one (boxed: the
/// crate's error is a few hundred bytes, too large to return by value everywhere).
pub type Error = Box<serde_saphyr::Error>;

fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
    }
}

/// Reads one YAML document.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options()).map_err(Box::new)
}

/// Reads every document of a multi-document stream (`---` separated), skipping empty
/// ones. A syntax error anywhere fails the whole stream: a YAML parser cannot say
/// where the next document starts once one is broken.
pub fn documents(text: &str) -> Result<Vec<serde_json::Value>, Error> {
    serde_saphyr::from_multiple_with_options(text, options()).map_err(Box::new)
}

/// Writes one YAML document.
///
/// Long one-line strings stay on one line (no folded `>` block wrapped at 80
/// columns): a CRD's descriptions and patterns read as written, and a diff of them
/// shows the change. Multi-line strings are literal blocks (`|`).
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    let options = serde_saphyr::ser_options! {
        folded_wrap_chars: usize::MAX,
    };
    serde_saphyr::to_string_with_options(value, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn reads_as_serde_yaml_did() {
        // (input, expected value)
        let cases: [(&str, Value); 5] = [
            (
                "a: yes\nb: on\nc: true",
                json!({"a": "yes", "b": "on", "c": true}),
            ),
            ("vlan: 10\nname: '10'", json!({"vlan": 10, "name": "10"})),
            ("a: ~\nb: null", json!({"a": null, "b": null})),
            ("- 1\n- x", json!([1, "x"])),
            ("", Value::Null),
        ];
        for (text, want) in cases {
            assert_eq!(from_str::<Value>(text).unwrap(), want, "{text:?}");
        }
    }

    #[test]
    fn errors_are_one_line_with_a_position() {
        for text in ["a: [1,\n", "a: 1\na: 2\n"] {
            let e = from_str::<Value>(text).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains("line "), "{e}");
        }
    }

    #[test]
    fn documents_skip_empty_ones_and_a_broken_one_fails_the_stream() {
        let docs = documents("---\n---\na: 1\n---\nb: 2\n---\n").unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": 2})]);
        assert!(documents("a: 1\n---\nb: [\n").is_err());
    }

    #[test]
    fn writes_what_it_reads() {
        let v = json!({"a": {"b": [1, "yes", "1", "x: y", null, true, "two\nlines\n"]}});
        assert_eq!(from_str::<Value>(&to_string(&v).unwrap()).unwrap(), v);
        let long = "word ".repeat(40);
        let text = to_string(&json!({ "description": long.trim() })).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
    }
}
