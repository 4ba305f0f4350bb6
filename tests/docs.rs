//! The documentation is tested: every relative link of README.md and docs/*.md
//! resolves (the file exists, and an anchor names a heading of it), and every YAML
//! example is accepted by the validator `patchbay validate` runs — or is marked as
//! a deliberate bad example (`<!-- bad example -->` on the line before the fence)
//! and is refused. Documents `validate` skips (kinds that are not patchbay's) are
//! listed here by kind and printed; they are not counted as accepted. The
//! error-policy table of docs/architecture.md is checked against the retry
//! policy's own table.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use patchbay::decide::validate::manifests::validate_manifests;

/// Kinds an example may hold that `patchbay validate` does not check.
const SKIPPED_KINDS: &[&str] = &["Namespace", "Secret", "BareMetalHost", "BareMetalSwitch"];
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

/// Where a path a page names may start: the checkout, or a crate's `src/` (pages
/// name modules as `controllers/runtime.rs` as often as `src/controllers/runtime.rs`).
const PATH_BASES: &[&str] = &[
    "",
    "src/",
    "core/src/",
    "model/src/",
    "providers/src/",
    "devplane/src/",
    "testbed/src/",
];

/// The file paths named on a line: words with a `/` ending in a file name
/// (`.rs`, `.md`, `.yaml`, `.py`, `.sh`, `.toml`, `.yang`) or naming a folder of
/// the checkout (`docs/`). Templates (`<name>`, `*`, `{…}`), URLs, absolute paths
/// and what a build writes (`target/`) are not paths of the checkout.
fn named_paths(line: &str) -> Vec<String> {
    let word = regex::Regex::new(r"[A-Za-z0-9_.*<>{}/-]+").expect("regex");
    let file = regex::Regex::new(r"\.(rs|md|yaml|yml|py|sh|toml|yang)$").expect("regex");
    let mut out = Vec::new();
    for m in word.find_iter(line) {
        let w = m.as_str().trim_end_matches('.');
        let before = &line[..m.start()];
        if !w.contains('/')
            || w.starts_with('/')
            || w.starts_with("target/")
            || w.contains("//")
            || w.contains(['<', '>', '*', '{', '}'])
            || before.ends_with("://")
            || before.ends_with(':')
            || before.ends_with('~')
            || before.ends_with('$')
        {
            continue;
        }
        if file.is_match(w) || (w.ends_with('/') && w.len() > 1) {
            out.push(w.to_owned());
        }
    }
    out
}

#[test]
fn every_file_path_a_page_names_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let dir = page.parent().expect("a page's folder").to_path_buf();
        for (n, line) in prose(&text) {
            for path in named_paths(line) {
                checked += 1;
                let exists = PATH_BASES
                    .iter()
                    .any(|b| root().join(b).join(&path).exists())
                    || dir.join(&path).exists();
                if !exists {
                    missing.push(format!(
                        "{}:{n}: {path}",
                        page.strip_prefix(root()).unwrap_or(&page).display(),
                    ));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} paths found: the finder is broken"
    );
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The files under `dir`, as paths relative to it.
fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = format!("{prefix}{}", e.file_name().to_string_lossy());
        if e.path().is_dir() {
            out.push(format!("{name}/"));
            files_under(&e.path(), &format!("{name}/"), out);
        } else {
            out.push(name);
        }
    }
}

/// The code map of docs/architecture.md (the fenced tree that starts with
/// `Cargo.toml`): every entry, by its indentation under its folder, exists (a
/// crate's entries under its `src/`), and every file a description names exists
/// under the entry's folder.
#[test]
fn the_code_map_names_files_that_exist() {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).expect("read");
    let tree: Vec<&str> = text
        .split("```")
        .find(|block| block.trim_start().starts_with("Cargo.toml"))
        .expect("docs/architecture.md has the code map")
        .lines()
        .collect();
    let entry = regex::Regex::new(r"^( *)([A-Za-z0-9_.-]+/?(?:[A-Za-z0-9_.-]+/?)*)\s").expect("re");
    let resolve = |path: &str| -> Option<PathBuf> {
        let direct = root().join(path);
        if direct.exists() {
            return Some(direct);
        }
        let (krate, rest) = path.split_once('/')?;
        let in_src = root().join(krate).join("src").join(rest);
        in_src.exists().then_some(in_src)
    };
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut folder = root();
    let (mut missing, mut entries) = (Vec::new(), 0);
    for line in &tree {
        let described = if let Some(m) = entry.captures(line)
            && m[1].len() < 20
            && m[1].len() % 2 == 0
        {
            let depth = m[1].len() / 2;
            stack.truncate(depth);
            let parent: String = stack.iter().map(|(_, p)| p.as_str()).collect();
            let path = format!("{parent}{}", &m[2]);
            entries += 1;
            match resolve(&path) {
                Some(p) => {
                    folder = if p.is_dir() {
                        p
                    } else {
                        p.parent().expect("a parent").into()
                    };
                }
                None => missing.push(format!("entry {path}")),
            }
            if m[2].ends_with('/') {
                stack.push((depth, m[2].to_owned()));
            }
            &line[m[0].len()..]
        } else {
            line
        };
        let mut under = Vec::new();
        files_under(&folder, "", &mut under);
        for named in named_files(described) {
            let at_root = named.contains('/') && root().join(&named).exists();
            if !at_root
                && !under
                    .iter()
                    .any(|f| f == &named || f.ends_with(&format!("/{named}")))
            {
                missing.push(format!("{named} under {}", folder.display()));
            }
        }
    }
    assert!(
        entries > 60,
        "only {entries} entries read: the map's parser is broken"
    );
    assert!(
        missing.is_empty(),
        "docs/architecture.md's code map names what does not exist:\n{}",
        missing.join("\n")
    );
}

/// The files a code-map description names: Rust files (`retry.rs`,
/// `dialect/lag.rs`, under the entry's folder) and paths from the checkout's root
/// (`tests/layout.rs`, `examples/README.md`). Other bare names (`hosts.yaml`) are
/// what the code writes, not files of the checkout.
fn named_files(text: &str) -> Vec<String> {
    let re = regex::Regex::new(r"(?:^|[\s(,])([A-Za-z0-9_/-]+\.(?:rs|md|yaml|py))\b").expect("re");
    re.captures_iter(text)
        .map(|c| c[1].to_owned())
        .filter(|f| !f.starts_with('/') && (f.ends_with(".rs") || f.contains('/')))
        .collect()
}

#[test]
fn the_path_finder_finds_paths_and_skips_templates() {
    assert_eq!(
        named_paths("see `src/decide/tenancy.rs` and [docs](docs/tenancy.md)."),
        ["src/decide/tenancy.rs", "docs/tenancy.md"]
    );
    assert_eq!(named_paths("the `examples/` folder"), ["examples/"]);
    assert!(named_paths("`providers/dialects/<name>.yaml`, `target/bench-out/x.txt`").is_empty());
    assert!(named_paths("https://github.com/metal3-io/x/y.md and /etc/ssh/sshd.yaml").is_empty());
    assert!(named_paths("a/b and ports/s").is_empty());
}

/// The error-policy table in docs/architecture.md is the retry policy's own table
/// (`decide::retry::TABLE`): a row per class, each "retried" cell its words.
#[test]
fn the_error_policy_table_is_the_retry_policy() {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect();
    for (class, words) in patchbay::decide::retry::TABLE {
        let name = format!("`{class:?}`");
        let row = rows
            .iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("docs/architecture.md has no row for {name}"));
        assert_eq!(row[2], *words, "the retried cell of {name}");
    }
}
