//! Golden files: reviewed snapshots of public contracts, kept in the tree
//! under `tests/golden/` (and `docs/errors.md`).
//!
//! A test renders the contract and hands the text to [`assert_golden`],
//! which fails when the file is missing or differs. To accept a change after
//! reviewing it, run the tests with `UPDATE_GOLDEN=1`:
//!
//! ```text
//! UPDATE_GOLDEN=1 cargo test --test it contracts
//! git diff tests/golden docs/errors.md   # review, then commit
//! ```
//!
//! Under CI (the `CI` variable set and not `false`/`0`, as `.ci/run` sets
//! it) `UPDATE_GOLDEN` is ignored: a missing or changed golden file always
//! fails there, so an unreviewed change cannot pass. A failure prints the
//! first differing line and writes the rendered text beside the target dir
//! (`target/tmp/golden/…`) for a full `diff`.

use std::path::{Path, PathBuf};

/// The repository root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Whether the tests run under CI: `CI` set, and not `false` or `0`.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Whether golden files may be rewritten: `UPDATE_GOLDEN=1`, outside CI.
fn updating() -> bool {
    std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") && !under_ci()
}

/// Checks `actual` against the golden file `rel` (relative to the
/// repository root); rewrites it instead under `UPDATE_GOLDEN=1` outside CI.
#[track_caller]
pub fn assert_golden(rel: &str, actual: &str) {
    let path = root().join(rel);
    let expected = std::fs::read_to_string(&path).ok();
    if expected.as_deref() == Some(actual) {
        return;
    }
    if updating() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the golden folder");
        }
        std::fs::write(&path, actual).expect("write the golden file");
        return;
    }
    let saved = save_actual(rel, actual);
    let how = "review the change, then run `UPDATE_GOLDEN=1 cargo test --test it contracts` \
               outside CI and commit the file";
    match expected {
        None => panic!(
            "golden file {rel} is missing; the rendered text is in {}; {how}",
            saved.display()
        ),
        Some(expected) => panic!(
            "{rel} differs from the rendered text ({}):\n{}\n{how}",
            saved.display(),
            first_difference(&expected, actual)
        ),
    }
}

/// Writes the rendered text under the target dir, for `diff`.
fn save_actual(rel: &str, actual: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("golden")
        .join(rel);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    let _ = std::fs::write(&path, actual);
    path
}

/// The first line where the two texts differ, with two lines of context.
fn first_difference(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    let at = e
        .iter()
        .zip(&a)
        .position(|(x, y)| x != y)
        .unwrap_or(e.len().min(a.len()));
    let from = at.saturating_sub(2);
    let mut out = format!(
        "first difference at line {} ({} lines expected, {} rendered)\n",
        at + 1,
        e.len(),
        a.len()
    );
    for (i, line) in e.iter().enumerate().take(at + 1).skip(from) {
        let mark = if i == at { "-" } else { " " };
        out.push_str(&format!("{mark} {:>4} | {line}\n", i + 1));
    }
    if let Some(line) = a.get(at) {
        out.push_str(&format!("+ {:>4} | {line}\n", at + 1));
    }
    out
}

/// Replaces what differs from run to run with stable placeholders: session
/// and run ids become `ses_<1>`, `run_<1>`, … in order of first appearance
/// (the fixed sample id `ses_0123456789abcdef` too), times in ms
/// (`at_ms` and `…_at_ms` members, also inside escaped JSON text) `<ms>`,
/// and SHA-256 hex `<sha256>`.
pub fn scrub(text: &str) -> String {
    let mut s = text.to_owned();
    for prefix in ["ses", "run"] {
        let re = regex::Regex::new(&format!(r"{prefix}_[0-9a-f]{{16}}")).unwrap();
        let mut seen: Vec<String> = Vec::new();
        s = re
            .replace_all(&s, |c: &regex::Captures| {
                let id = c[0].to_owned();
                let n = match seen.iter().position(|x| *x == id) {
                    Some(i) => i + 1,
                    None => {
                        seen.push(id);
                        seen.len()
                    }
                };
                format!("{prefix}_<{n}>")
            })
            .into_owned();
    }
    let ms = regex::Regex::new(r#"(at_ms\\?"):-?[0-9]+"#).unwrap();
    s = ms.replace_all(&s, "$1:<ms>").into_owned();
    let hash = regex::Regex::new(r"\b[0-9a-f]{64}\b").unwrap();
    hash.replace_all(&s, "<sha256>").into_owned()
}
