//! Export and import (docs/import-export.md): logbook's own JSON Lines round trip
//! (byte-identical, private modes), selecting what to export, a byte order
//! mark, and concurrent imports of one file; and the helpers the
//! `transfer_*` modules share. The Phelix and Amber formats are in
//! `transfer_seeds.rs`, malformed JSON Lines in `transfer_jsonl.rs`, the
//! workflow rows in `transfer_workflow.rs`, per-field fidelity in
//! `transfer_fidelity.rs`.

use crate::common::*;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub(crate) const PHELIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/phelix");
pub(crate) const AMBER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/amber");
pub(crate) const AMBER_UUID: &str = "550e8400-e29b-41d4-a716-446655440000";
pub(crate) const SECRET: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

pub(crate) fn amber_id(uuid: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(format!("amber:{uuid}").as_bytes());
    format!("ses_{}", &hex::encode(h)[..16])
}

/// `import --json`: the report of a run that rejected nothing.
#[track_caller]
pub(crate) fn import_ok(env: &TestEnv, format: &str, src: &Path) -> Value {
    let r = env.json(&["import", "--format", format, src.to_str().unwrap()]);
    r.data()
}

/// `import --json` of a run with rejections: exit 2, the report in details.
#[track_caller]
pub(crate) fn import_rejecting(env: &TestEnv, format: &str, src: &Path) -> (Run, Value) {
    let r = env.json(&["import", "--format", format, src.to_str().unwrap()]);
    let err = assert_error(&r, "INVALID_ARGUMENT", 2);
    let details = err["details"].clone();
    (r, details)
}

#[track_caller]
pub(crate) fn assert_counts(report: &Value, imported: u64, skipped: u64, rejected: u64) {
    assert_eq!(
        (
            report["imported"].as_u64().unwrap(),
            report["skipped"].as_u64().unwrap(),
            report["rejected"].as_u64().unwrap()
        ),
        (imported, skipped, rejected),
        "{report}"
    );
}

pub(crate) fn export_jsonl(env: &TestEnv) -> String {
    let r = env.run(&["export", "--format", "jsonl"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.stdout
}

/// Rows of a session in every table (all must be 0 for a rejected one).
pub(crate) fn rows_anywhere(env: &TestEnv, id: &str) -> i64 {
    [
        "SELECT count(*) FROM sessions WHERE session_id = $1",
        "SELECT count(*) FROM session_data WHERE session_id = $1",
        "SELECT count(*) FROM session_tags WHERE session_id = $1",
        "SELECT count(*) FROM session_refs WHERE session_id = $1",
        "SELECT count(*) FROM events WHERE session_id = $1",
        "SELECT count(*) FROM idempotency_keys WHERE session_id = $1",
    ]
    .iter()
    .map(|q| env.rows(q, &[id])[0][0].as_i64().unwrap())
    .sum()
}

pub(crate) fn table_counts(env: &TestEnv) -> Vec<i64> {
    [
        "sessions",
        "session_data",
        "session_tags",
        "session_refs",
        "events",
    ]
    .iter()
    .map(|t| env.scalar(&format!("SELECT count(*) FROM {t}")))
    .collect()
}

pub(crate) fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// `v` with every event's hash left out: a line a test edits, so import
/// computes its chain on arrival instead of finding the file changed
/// after export (which it checks when hashes are there).
pub(crate) fn unhashed(mut v: Value) -> Value {
    if let Some(events) = v["events"].as_array_mut() {
        for e in events {
            e["hash"] = json!("");
        }
    }
    v
}

/// One good exported line, as a JSON value to mutate (hashes left out).
pub(crate) fn good_line() -> Value {
    let env = TestEnv::new();
    let id = env.create("template");
    env.json(&["session", "checkpoint", &id, "--step", "s"]);
    unhashed(serde_json::from_str(export_jsonl(&env).trim()).unwrap())
}

/// `v` as session `ses_` + `n` in 16 hex digits (hashes left out: the
/// session id is part of every event's hash).
pub(crate) fn with_id(mut v: Value, n: u32) -> Value {
    v["session_id"] = json!(format!("ses_{n:016x}"));
    unhashed(v)
}

pub(crate) fn amber_session(root: &Path, uuid: &str, state: &str, goal: &str, timeline: &[Value]) {
    let dir = root.join(".amber/sessions").join(uuid);
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = json!({"sessionId": uuid, "goal": goal, "route": "r", "state": state,
        "currentStage": "build", "createdAt": "2026-06-21T10:00:00Z"});
    std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
    let tl: String = timeline.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(dir.join("timeline.jsonl"), tl).unwrap();
}

/// `n` completed Amber sessions under `root`, uuids `…-{i:012x}` and goals
/// `goal {i}`, each with `timeline`.
pub(crate) fn amber_sessions(root: &Path, n: u32, timeline: &[Value]) {
    for i in 0..n {
        let uuid = format!("00000000-0000-4000-8000-{i:012x}");
        amber_session(root, &uuid, "completed", &format!("goal {i}"), timeline);
    }
}

pub(crate) fn ev(t: &str, ts: &str) -> Value {
    json!({"type": t, "timestamp": ts})
}

/// A ledger with sessions in every status, tags, references, context,
/// metadata, custom events, idempotency keys and a parent/child pair.
fn rich_ledger(env: &TestEnv) -> Vec<String> {
    let mut ids = Vec::new();
    let p = env.create_with(&[
        "--title",
        "parent",
        "--app",
        "web",
        "--tag",
        "a",
        "--tag",
        "b",
        "--context",
        r#"{"z":1,"a":{"k":[1,2.5,"x"]}}"#,
        "--metadata",
        r#"{"owner":"ops"}"#,
        "--goal",
        "line one\n\tline two",
        "--route",
        "r",
        "--stage",
        "s",
        "--agent",
        "ag",
    ]);
    env.json(&[
        "session",
        "checkpoint",
        &p,
        "--step",
        "plan",
        "--note",
        "n1",
        "--plan",
        "pln_1",
        "--plan",
        "pln_2",
        "--operation",
        "op_1",
        "--idempotency-key",
        "k1",
    ]);
    env.json(&[
        "session",
        "checkpoint",
        &p,
        "--deployment",
        "dep-1",
        "--plan",
        "pln_3",
    ]);
    env.json(&[
        "session",
        "event",
        &p,
        "--type",
        "x.build",
        "--detail",
        "ok",
        "--data",
        r#"{"b":2,"a":1}"#,
    ]);
    ids.push(p.clone());
    let child = env.create_with(&["--title", "child", "--parent", &p]);
    env.json(&["session", "complete", &child, "--result", "done"]);
    ids.push(child);
    let pending = env.create_with(&["--title", "pending", "--pending"]);
    ids.push(pending);
    let paused = env.create("paused");
    env.json(&["session", "pause", &paused, "--reason", "wait"]);
    ids.push(paused);
    let failed = env.create("failed");
    env.json(&["session", "fail", &failed, "--reason", "boom"]);
    ids.push(failed);
    let cancelled = env.create_with(&["--title", "cancelled", "--pending"]);
    env.json(&["session", "cancel", &cancelled, "--reason", "nope"]);
    ids.push(cancelled);
    ids
}

#[test]
fn jsonl_round_trip_is_byte_identical() {
    let src = TestEnv::new();
    let ids = rich_ledger(&src);
    let first = export_jsonl(&src);
    assert_eq!(first.lines().count(), ids.len());
    let file = src.dir.path().join("x.jsonl");
    std::fs::write(&file, &first).unwrap();

    let dst = TestEnv::new();
    let r = import_ok(&dst, "jsonl", &file);
    assert_counts(&r, 6, 0, 0);
    assert_eq!(dst.json(&["verify"]).code, 0);
    assert_eq!(export_jsonl(&dst), first);
    for id in &ids {
        // Everything but the global event_id cursor is the same.
        let strip = |t: String| {
            let mut v: Value = serde_json::from_str(&t).unwrap();
            for e in v["data"]["events"].as_array_mut().unwrap() {
                e["event_id"] = Value::Null;
            }
            v
        };
        assert_eq!(strip(src.show(id)), strip(dst.show(id)), "{id}");
    }

    // Children before their parents (reversed file) import all the same.
    let reversed: String = first.lines().rev().map(|l| format!("{l}\n")).collect();
    let rfile = src.dir.path().join("rev.jsonl");
    std::fs::write(&rfile, reversed).unwrap();
    let dst2 = TestEnv::new();
    assert_counts(&import_ok(&dst2, "jsonl", &rfile), 6, 0, 0);
    assert_eq!(export_jsonl(&dst2), first);

    // From stdin, in both orders (so one has the child first: it waits in
    // the spill file), and a --out file is 0600 with the same bytes.
    let from_stdin = |src: &Path| {
        let dst = TestEnv::new();
        let mut c = dst.command();
        let db = dst.db.to_str().unwrap().to_owned();
        c.args(["--db", &db, "import", "--format", "jsonl", "-", "--json"]);
        c.stdin(std::fs::File::open(src).unwrap());
        let run: Run = c.output().unwrap().into();
        assert_counts(&run.data(), 6, 0, 0);
        dst
    };
    assert_eq!(export_jsonl(&from_stdin(&rfile)), first);
    let dst3 = from_stdin(&file);
    let out = dst3.dir.path().join("new/dir/e.jsonl");
    let d = dst3
        .json(&[
            "export",
            "--format",
            "jsonl",
            "--out",
            out.to_str().unwrap(),
        ])
        .data();
    assert_eq!(
        (d["sessions"].clone(), d["events"].clone()),
        (json!(6), json!(13))
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), first);
    assert_eq!(mode(&out), 0o600);
    assert_eq!(mode(out.parent().unwrap()), 0o700);

    // A second import skips everything and changes nothing.
    let counts = table_counts(&dst);
    assert_counts(&import_ok(&dst, "jsonl", &file), 0, 6, 0);
    assert_eq!(counts, table_counts(&dst));
    assert_eq!(export_jsonl(&dst), first);
}

#[test]
fn export_selects_sessions_and_refuses_unknown_ones_and_json_to_stdout() {
    let env = TestEnv::new();
    let ids = rich_ledger(&env);
    let r = env.run(&[
        "export",
        "--format",
        "jsonl",
        "--session",
        &ids[2],
        "--session",
        &ids[2],
    ]);
    assert_eq!(r.stdout.lines().count(), 1);
    assert!(r.stdout.contains(&ids[2]));
    let out = env.dir.path().join("none.jsonl");
    let r = env.json(&[
        "export",
        "--format",
        "jsonl",
        "--session",
        "ses_0000000000000000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_error(&r, "SESSION_NOT_FOUND", 3);
    assert!(!out.exists());
    let leftovers = std::fs::read_dir(env.dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".tmp-")
        })
        .count();
    assert_eq!(leftovers, 0);
    assert_error(
        &env.json(&["export", "--format", "jsonl"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_error(
        &env.json(&["export", "--format", "phelix"]),
        "INVALID_ARGUMENT",
        2,
    );
    // `--out -` is stdout, as `-` is stdin for import (it used to write a
    // file named `-` in the working directory); a folder format refuses it.
    let mut c = env.command();
    c.current_dir(env.dir.path())
        .args(["--db", env.path().to_str().unwrap()]);
    let r: Run = c
        .args(["export", "--format", "jsonl", "--out", "-"])
        .output()
        .unwrap()
        .into();
    assert_eq!((r.code, r.stdout), (0, export_jsonl(&env)));
    assert!(!env.dir.path().join("-").exists());
    assert_error(
        &env.json(&["export", "--format", "phelix", "--out", "-"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert!(!env.dir.path().join("-").exists());
}

/// `export --format jsonl --out DIR` with DIR an existing folder read and
/// rendered every session, then failed STORE_IO "Is a directory" (attack
/// report #13). It is a bad argument: INVALID_ARGUMENT naming `out`, its
/// details only the field and reason (no counts: nothing was read), and
/// nothing is written into the folder — through a symlink too.
#[test]
fn export_jsonl_to_an_existing_folder_is_refused_before_reading() {
    let env = TestEnv::new();
    env.create("one");
    let dir = env.dir.path().join("px");
    std::fs::create_dir(&dir).unwrap();
    let link = env.dir.path().join("pxlink");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    for out in [&dir, &link] {
        let r = env.json(&[
            "export",
            "--format",
            "jsonl",
            "--out",
            out.to_str().unwrap(),
        ]);
        let e = assert_error(&r, "INVALID_ARGUMENT", 2);
        let reason = format!(
            "{} is a folder; a jsonl export is one file: name a file (in that folder, if you like), or use --format phelix to write a folder",
            out.display()
        );
        assert_eq!(e["details"], json!({"field": "out", "reason": reason}));
        assert_eq!(e["message"], format!("invalid `out`: {reason}"));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    }
    // A file in that folder is fine.
    let file = dir.join("x.jsonl");
    let r = env.json(&[
        "export",
        "--format",
        "jsonl",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert_eq!(r.data()["sessions"], 1);
}

/// A UTF-8 byte order mark before the first line is not part of the JSON
/// (found by adversarial testing: it used to reject the first session).
#[test]
fn a_byte_order_mark_before_the_first_line_is_ignored() {
    let env = TestEnv::new();
    env.create("a");
    env.create("b");
    let text = export_jsonl(&env);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bom.jsonl");
    let mut bytes = vec![0xEF, 0xBB, 0xBF];
    bytes.extend_from_slice(text.as_bytes());
    std::fs::write(&file, bytes).unwrap();
    let other = TestEnv::new();
    assert_counts(&import_ok(&other, "jsonl", &file), 2, 0, 0);
    assert_eq!(export_jsonl(&other), text);
}

/// Imports of one file racing into one database (found by adversarial
/// testing): sessions another process wrote meanwhile are skipped, never
/// reported as duplicates within this input, and every run exits 0.
#[test]
fn concurrent_imports_of_one_file_skip_each_others_sessions() {
    let src = TestEnv::new();
    let root = src.dir.path().join("many");
    let n = 1000u32; // four batches of at most 256
    amber_sessions(
        &root,
        n,
        &[
            ev("session_created", "2026-06-21T10:00:00Z"),
            ev("session_completed", "2026-06-21T10:00:03Z"),
        ],
    );
    assert_counts(&import_ok(&src, "amber", &root), n as u64, 0, 0);
    let file = src.dir.path().join("all.jsonl");
    std::fs::write(&file, export_jsonl(&src)).unwrap();

    let env = TestEnv::new();
    assert_eq!(env.run(&["session", "list"]).code, 0);
    let cmds = (0..3)
        .map(|_| {
            let mut c = env.command();
            c.arg("--db").arg(&env.db).args([
                "import",
                "--format",
                "jsonl",
                file.to_str().unwrap(),
                "--json",
            ]);
            c
        })
        .collect();
    let runs = race(env.dir.path(), cmds);
    let mut imported = 0;
    for r in &runs {
        assert_eq!(r.code, 0, "{} {}", r.stdout, r.stderr);
        let d = r.data();
        assert_eq!(d["rejected"], 0, "{d}");
        assert_eq!(
            d["imported"].as_u64().unwrap() + d["skipped"].as_u64().unwrap(),
            n as u64,
            "{d}"
        );
        imported += d["imported"].as_u64().unwrap();
    }
    assert_eq!(imported, n as u64);
    assert_eq!(table_counts(&env)[0], n as i64);
    assert_eq!(export_jsonl(&env), export_jsonl(&src));
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// `export` defaults to jsonl, as `import` does: no `--format` gives the
/// same bytes as `--format jsonl`, to stdout and to `--out`, and `import`
/// reads them back without a `--format` either.
#[test]
fn export_defaults_to_jsonl_like_import() {
    let env = TestEnv::new();
    rich_ledger(&env);
    let plain = env.run(&["export"]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    let jsonl = env.run(&["export", "--format", "jsonl"]);
    assert_eq!(plain.stdout, jsonl.stdout);
    assert!(!plain.stdout.is_empty());
    let out = env.dir.path().join("default.jsonl");
    let r = env.json(&["export", "--out", out.to_str().unwrap()]).data();
    assert_eq!(r["format"], "jsonl");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), jsonl.stdout);
    let twin = TestEnv::new();
    twin.json(&["import", out.to_str().unwrap()]).data();
    assert_eq!(twin.run(&["export"]).stdout, jsonl.stdout);
}
