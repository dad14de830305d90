//! The repository speaks for itself: code, docs and tests cite the
//! repository's own documents (`docs/design.md` and the other docs), never
//! issue numbers or documents outside it, and every
//! `docs/design.md, "<Heading>"` names a heading that exists.
//! `migrations/` is left out: its files are pinned by checksum.

use std::fs;
use std::path::{Path, PathBuf};

/// The files and folders searched, relative to the repository root.
const SCANNED: &[&str] = &[
    "src",
    "docs",
    "README.md",
    "BENCHMARKS.md",
    "benches",
    "tests",
];

/// This file names the patterns it looks for.
const THIS_FILE: &str = "tests/it/repo_docs.rs";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = fs::read_dir(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for p in entries {
            collect(&p, out);
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    }
}

/// Every scanned file as (path relative to the root, text).
fn scanned_files() -> Vec<(String, String)> {
    let root = root();
    let mut files = Vec::new();
    for s in SCANNED {
        collect(&root.join(s), &mut files);
    }
    files
        .into_iter()
        .filter_map(|p| {
            let rel = p
                .strip_prefix(&root)
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/");
            if rel == THIS_FILE || rel.starts_with("migrations/") {
                return None;
            }
            let bytes = fs::read(&p).unwrap_or_else(|e| panic!("{rel}: {e}"));
            Some((rel, String::from_utf8_lossy(&bytes).into_owned()))
        })
        .collect()
}

/// The outside citation a line holds, if any: `issue <digits>` (in any
/// case), `SPEC §`, `Spec: §`, `Amber seed` or `Phelix seed`.
fn outside_citation(line: &str) -> Option<&'static str> {
    let lower = line.to_ascii_lowercase();
    for (i, _) in lower.match_indices("issue ") {
        let rest = &lower[i + "issue ".len()..];
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Some("issue <number>");
        }
    }
    ["SPEC §", "Spec: §", "Amber seed", "Phelix seed"]
        .into_iter()
        .find(|p| line.contains(p))
}

#[test]
fn no_file_cites_issue_numbers_or_outside_documents() {
    let mut found = Vec::new();
    for (path, text) in scanned_files() {
        for (n, line) in text.lines().enumerate() {
            if let Some(what) = outside_citation(line) {
                found.push(format!("{path}:{}: {what}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite the repository's docs (docs/design.md, \"<Heading>\") instead:\n{}",
        found.join("\n")
    );
}

/// The headings of `docs/design.md` (`##` and deeper).
fn design_headings() -> Vec<String> {
    let text = fs::read_to_string(root().join("docs/design.md")).expect("docs/design.md");
    text.lines()
        .filter_map(|l| l.strip_prefix("##"))
        .map(|l| l.trim_start_matches('#').trim().to_string())
        .collect()
}

#[test]
fn every_design_citation_names_an_existing_heading() {
    let headings = design_headings();
    assert!(headings.len() > 5, "docs/design.md has its sections");
    let cite = "docs/design.md, \"";
    let mut bad = Vec::new();
    let mut cited = 0;
    for (path, text) in scanned_files() {
        for (n, line) in text.lines().enumerate() {
            for (i, _) in line.match_indices(cite) {
                let rest = &line[i + cite.len()..];
                let Some(end) = rest.find('"') else {
                    bad.push(format!("{path}:{}: unterminated: {}", n + 1, line.trim()));
                    continue;
                };
                let heading = &rest[..end];
                cited += 1;
                if heading != "<Heading>" && !headings.iter().any(|h| h == heading) {
                    bad.push(format!("{path}:{}: no heading {heading:?}", n + 1));
                }
            }
        }
    }
    assert!(
        cited > 50,
        "the repository cites docs/design.md ({cited} citations found)"
    );
    assert!(
        bad.is_empty(),
        "docs/design.md has no such heading:\n{}",
        bad.join("\n")
    );
}

/// The store is laid out by backend (`src/store/mod.rs`): the interface,
/// its rows and the driver-free helpers at the top, SQLite's code under
/// `sqlite/`, PostgreSQL's under `postgres/`, and the two mirror each other
/// where they do the same job.
#[test]
fn the_store_is_laid_out_by_backend() {
    let store = root().join("src/store");
    let mut top: Vec<String> = fs::read_dir(&store)
        .expect("src/store")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    top.sort();
    assert_eq!(
        top,
        [
            "codec.rs",
            "handle.rs",
            "mod.rs",
            "postgres",
            "purge_rows.rs",
            "rows.rs",
            "sqlite",
            "transfer_rows.rs",
            "writes.rs"
        ],
        "src/store holds the interface and the two backend folders only"
    );
    for both in [
        "mod.rs",
        "store.rs",
        "tx.rs",
        "tx/interface.rs",
        "migrate.rs",
        "query.rs",
        "sql/mod.rs",
        "sql/sessions.rs",
        "sql/events.rs",
        "sql/runs.rs",
        "sql/workflow.rs",
        "sql/list.rs",
        "sql/feed.rs",
        "sql/chain.rs",
        "sql/transfer.rs",
        "sql/retention.rs",
    ] {
        for backend in ["sqlite", "postgres"] {
            assert!(
                store.join(backend).join(both).is_file(),
                "src/store/{backend}/{both} is missing: the backends mirror each other"
            );
        }
    }
}

/// The ledger decides and the store executes: no code line under
/// `src/ledger/` names a backend module (what it needs of one is
/// re-exported by `store`).
#[test]
fn the_ledger_names_no_backend_module() {
    let mut files = Vec::new();
    collect(&root().join("src/ledger"), &mut files);
    let mut found = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if code.contains("store::sqlite") || code.contains("store::postgres") {
                found.push(format!("{}:{}: {}", f.display(), n + 1, code));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the ledger names a backend module:\n{}",
        found.join("\n")
    );
}
