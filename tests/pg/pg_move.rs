//! Moving a ledger between backends (docs/design.md, "Backends"): `logbook --db old.db
//! export --format jsonl --out - | logbook --db postgres://… import -`;
//! the server's export is then byte-identical to SQLite's, `verify` passes
//! there, and each session reads back the same.

use crate::common::*;
use serde_json::Value;
use std::process::Stdio;

/// A SQLite env beside the binary's PostgreSQL one.
fn sqlite_env() -> TestEnv {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("old.db");
    TestEnv { dir, db, pg: None }
}

/// Sessions of every kind of row: checkpoints with state, runs with usage
/// and output, a budget, a stage, a gate, a snapshot and a fork, ended and
/// live ones.
fn busy_ledger(env: &TestEnv) -> Vec<String> {
    let ok = |args: &[&str]| env.json(args).data();
    let a = env.create_with(&[
        "--title", "moved", "--app", "web", "--tag", "x", "--stage", "plan",
    ]);
    ok(&[
        "session",
        "budget",
        &a,
        "--max-tokens",
        "100",
        "--on-exceed",
        "warn",
    ]);
    ok(&[
        "session",
        "checkpoint",
        &a,
        "--step",
        "plan",
        "--state",
        r#"{"k":[1,2],"z":{"a":"b"}}"#,
    ]);
    let r = ok(&["run", "create", &a, "--input", r#"{"prompt":"hi"}"#])["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&["run", "start", &r]);
    ok(&[
        "run",
        "usage",
        &r,
        "--input-tokens",
        "7",
        "--output-tokens",
        "3",
        "--api-calls",
        "1",
    ]);
    ok(&["run", "complete", &r, "--output", r#"{"answer":42}"#]);
    ok(&["session", "stage", &a, "start", "build"]);
    ok(&["session", "stage", &a, "complete", "build"]);
    ok(&[
        "gate",
        "open",
        &a,
        "--gate",
        "deploy",
        "--kind",
        "user-approval",
    ]);
    ok(&["gate", "approve", &a, "--gate", "deploy"]);
    let snap = ok(&[
        "session",
        "checkpoint",
        &a,
        "--step",
        "snap",
        "--state",
        r#"{"n":1}"#,
    ]);
    assert!(snap["rev"].as_i64().unwrap() > 1);
    let b = ok(&["session", "fork", &a, "--title", "the fork"])["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&["session", "complete", &a, "--result", "done"]);
    let c = env.create("still live");
    ok(&["session", "checkpoint", &c, "--step", "one"]);
    vec![a, c, b]
}

#[test]
fn pg_a_ledger_moved_from_sqlite_exports_byte_identically_and_verifies() {
    let old = sqlite_env();
    let ids = busy_ledger(&old);
    let pg = TestEnv::new();
    // The pipe of docs/postgres.md, as a shell runs it.
    let script = format!(
        "{bin} --db \"$OLD\" export --format jsonl --out - | {bin} --db \"$NEW\" import - --json",
        bin = bin()
    );
    let out = old
        .sh(&script)
        .env("OLD", &old.db)
        .env("NEW", &pg.db)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let r: Run = out.into();
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let report = r.json()["data"].clone();
    assert_eq!(
        report["imported"].as_u64(),
        Some(ids.len() as u64),
        "{report}"
    );
    let export = |env: &TestEnv| {
        let r = env.run(&["export", "--format", "jsonl"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    let from_sqlite = export(&old);
    assert!(!from_sqlite.is_empty());
    assert_eq!(
        export(&pg),
        from_sqlite,
        "the server's export is SQLite's, byte for byte"
    );
    let v = pg.json(&["verify"]).data();
    assert_eq!(v["sessions"].as_u64(), Some(ids.len() as u64));
    for id in &ids {
        let strip = |t: String| {
            let mut v: Value = serde_json::from_str(&t).unwrap();
            for e in v["data"]["events"].as_array_mut().unwrap() {
                e["event_id"] = Value::Null;
            }
            v
        };
        assert_eq!(strip(old.show(id)), strip(pg.show(id)), "{id}");
        assert_eq!(
            old.json(&["run", "list", id]).data(),
            pg.json(&["run", "list", id]).data(),
            "{id}"
        );
    }
    // The moved ledger goes on: the live session takes a checkpoint.
    let d = pg.checkpoint(&ids[1], "after the move");
    assert_eq!(d["rev"], 3);
}
