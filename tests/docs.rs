//! The documentation is tested: every relative link of README.md and docs/*.md
//! resolves (the file exists, and an anchor names a heading of it), and every YAML
//! example is accepted by the validator `patchbay validate` runs — or is marked as
//! a deliberate bad example (`<!-- bad example -->` on the line before the fence)
//! and is refused. Documents `validate` skips (kinds that are not patchbay's) are
//! listed here by kind and printed; they are not counted as accepted.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use patchbay::decide::validate::manifests::validate_manifests;

/// Kinds an example may hold that `patchbay validate` does not check.
const SKIPPED_KINDS: &[&str] = &["Namespace", "Secret", "BareMetalHost"];
/// The marker of a deliberate bad example, on the line before its fence.
const BAD_EXAMPLE: &str = "<!-- bad example -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 8, "docs/ holds {} pages", docs.len());
    out.extend(docs);
    out
}

/// The lines outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    prose(text)
        .into_iter()
        .filter_map(|(_, l)| l.strip_prefix('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// The targets of `[text](target)` links on a line, inline code left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let without_code: String = line
        .split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(" ");
    let mut rest = without_code.as_str();
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(after[..end].to_owned());
        rest = &after[end..];
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let dir = page.parent().expect("a page has a folder");
        for (n, line) in prose(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    page.clone()
                } else {
                    dir.join(path)
                };
                let at = format!(
                    "{}:{n}: {target}",
                    page.strip_prefix(root()).unwrap_or(&page).display()
                );
                if !file.exists() {
                    broken.push(format!("{at}: no such file"));
                    continue;
                }
                if let Some(a) = anchor {
                    let target_text = std::fs::read_to_string(&file).unwrap_or_default();
                    if !anchors(&target_text).contains(a) {
                        broken.push(format!("{at}: no heading #{a} in {}", file.display()));
                    }
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: is the link parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Each ```yaml block with where it is and whether it is marked bad.
fn yaml_examples() -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i].trim_start().starts_with("```yaml") {
                let bad = i > 0 && lines[i - 1].trim() == BAD_EXAMPLE;
                let start = i + 1;
                let mut end = start;
                while end < lines.len() && !lines[end].trim_start().starts_with("```") {
                    end += 1;
                }
                out.push((
                    format!("{name}:{}", i + 1),
                    lines[start..end].join("\n"),
                    bad,
                ));
                i = end;
            }
            i += 1;
        }
    }
    out
}

#[test]
fn every_yaml_example_is_accepted_unless_marked_bad() {
    let examples = yaml_examples();
    assert!(!examples.is_empty(), "no YAML examples found");
    let mut problems = Vec::new();
    let mut skipped = Vec::new();
    let mut accepted = 0;
    for (at, yaml, bad) in &examples {
        let report = validate_manifests(&[(at.clone(), yaml.clone())]);
        let checked: Vec<_> = report.verdicts.iter().filter(|v| !v.skipped).collect();
        for v in report.verdicts.iter().filter(|v| v.skipped) {
            let kind = v.object.split(' ').next().unwrap_or_default();
            if SKIPPED_KINDS.contains(&kind) {
                skipped.push(format!("{at}: {}", v.object));
            } else {
                problems.push(format!(
                    "{at}: {} was skipped by validate (not a listed kind)",
                    v.object
                ));
            }
        }
        match (bad, report.is_ok()) {
            (false, true) if !checked.is_empty() => accepted += 1,
            (false, true) => problems.push(format!("{at}: nothing in it was checked")),
            (false, false) => problems.push(format!(
                "{at}: refused: {:?}",
                report
                    .verdicts
                    .iter()
                    .flat_map(|v| v.errors.iter().map(ToString::to_string))
                    .collect::<Vec<_>>()
            )),
            (true, false) => {}
            (true, true) => problems.push(format!("{at}: marked as a bad example but accepted")),
        }
    }
    eprintln!(
        "{accepted} YAML examples accepted; skipped by validate (kinds {SKIPPED_KINDS:?}): {skipped:?}"
    );
    assert!(
        problems.is_empty(),
        "YAML examples:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_link_parser_and_slugs_work() {
    assert_eq!(
        link_targets("see [a](docs/x.md#y) and `[b](not-a-link)` or [c](#z)"),
        vec!["docs/x.md#y".to_owned(), "#z".to_owned()]
    );
    assert_eq!(
        slug(" Port ACLs and link aggregation"),
        "port-acls-and-link-aggregation"
    );
    assert_eq!(
        slug("devplane: a Kubernetes API server"),
        "devplane-a-kubernetes-api-server"
    );
    assert!(Path::new(&root()).join("README.md").exists());
}
