//! A database file replaced or removed under a long-lived handle (docs/design.md,
//! "Database files"): the handle refuses every later call with STORE_IO instead of
//! writing, acknowledged, into the file nobody else sees; `events --follow`
//! stops with that error instead of going silent; `doctor` explains a
//! `-wal` left from the file that was replaced.

use crate::common::*;
use logbook::{
    CheckpointRequest, CreateSession, ErrorCode, Ledger, LedgerOptions, ListSessions, Mutation,
};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn checkpoint(
    l: &Ledger,
    id: &str,
    step: &str,
) -> logbook::Result<logbook::Written<logbook::Session>> {
    l.checkpoint(
        id,
        CheckpointRequest {
            step: Some(step.into()),
            ..CheckpointRequest::default()
        },
        &Mutation::default(),
    )
}

/// The README's restore steps after the writers have stopped: the old
/// `-wal`, `-shm` and `-lock` go, then the restored file is opened fresh.
fn clear_companions(db: &Path) {
    for s in ["-wal", "-shm", "-lock"] {
        let _ = std::fs::remove_file(companion(db, s));
    }
}

#[test]
fn a_long_lived_ledger_refuses_every_call_once_its_file_is_replaced() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("t.db");
    let l = open_ledger(&db);
    let s = l.create_session(CreateSession::titled("kept")).unwrap();
    let id = s.session_id.to_string();
    let backup = d.path().join("b.db");
    l.backup(&backup).unwrap();
    assert_eq!(checkpoint(&l, &id, "after the backup").unwrap().rev, 2);
    let wal = std::fs::read(companion(&db, "-wal")).unwrap();
    // The operator restores the backup while the handle is open.
    std::fs::rename(&backup, &db).unwrap();
    let e = checkpoint(&l, &id, "into the replaced file").unwrap_err();
    assert_eq!(e.code(), ErrorCode::StoreIo, "{e}");
    assert!(e.to_string().contains("was replaced"), "{e}");
    let hint = e.details()["hint"].as_str().unwrap_or_default().to_owned();
    assert!(hint.contains("open the database again"), "{e:?}");
    // Nothing was appended to the WAL the restored file would be paired with.
    assert_eq!(std::fs::read(companion(&db, "-wal")).unwrap(), wal);
    for e in [
        l.create_session(CreateSession::titled("lost"))
            .map(|_| ())
            .unwrap_err(),
        l.list_sessions(&ListSessions::default())
            .map(|_| ())
            .unwrap_err(),
        l.show_session(&id).map(|_| ()).unwrap_err(),
        l.verify(&[]).map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(e.code(), ErrorCode::StoreIo, "{e}");
    }
    drop(l);
    clear_companions(&db);
    let fresh = open_ledger(&db);
    let v = fresh.show_session(&id).unwrap();
    assert_eq!(
        (v.session.rev, v.events.len()),
        (1, 1),
        "the backup's state"
    );
    assert_eq!(fresh.verify(&[]).unwrap().sessions, 1);
    assert_eq!(
        fresh
            .list_sessions(&ListSessions::default())
            .unwrap()
            .sessions
            .len(),
        1
    );
}

#[test]
fn a_long_lived_ledger_refuses_every_call_once_its_file_is_removed() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("t.db");
    let l = open_ledger(&db);
    let s = l.create_session(CreateSession::titled("x")).unwrap();
    std::fs::remove_file(&db).unwrap();
    let e = checkpoint(&l, &s.session_id.to_string(), "gone").unwrap_err();
    assert_eq!(e.code(), ErrorCode::StoreIo, "{e}");
    assert!(e.to_string().contains("was removed"), "{e}");
    let e = l.list_sessions(&ListSessions::default()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::StoreIo, "{e}");
    // A read-only handle checks too.
    let d2 = tempfile::tempdir().unwrap();
    let db2 = d2.path().join("t.db");
    drop(open_ledger(&db2));
    let ro = Ledger::open_read_only(LedgerOptions::at(&db2)).unwrap();
    std::fs::copy(&db2, d2.path().join("copy.db")).unwrap();
    std::fs::rename(d2.path().join("copy.db"), &db2).unwrap();
    let e = ro.list_sessions(&ListSessions::default()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::StoreIo, "{e}");
    let e = ro.query("SELECT 1", None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::StoreIo, "{e}");
}

/// Waits for `child` to exit, up to a minute (a hang guard, not a timing
/// assertion); kills it and fails otherwise.
fn wait_exit(child: &mut Child, what: &str) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `events --follow` as a real process: it prints an event, then, when a
/// backup is moved over the file, exits 6 with a STORE_IO error instead of
/// waiting for commits that can no longer reach it.
#[test]
fn events_follow_stops_with_store_io_when_its_file_is_replaced() {
    let env = TestEnv::new();
    let first = env.create("before");
    let backup = env.dir.path().join("b.db");
    assert_eq!(env.json(&["backup", backup.to_str().unwrap()]).code, 0);
    let mut c = env.command();
    c.arg("--db")
        .arg(env.path())
        .args(["events", "--follow", "--json", "--after", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(line["session_id"], first.as_str());
    let second = env.create("while following");
    let line: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(line["session_id"], second.as_str());
    std::fs::rename(&backup, env.path()).unwrap();
    let code = wait_exit(&mut child, "events --follow");
    assert_eq!(code, 6);
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert_eq!(rest.len(), 1, "{rest:?}");
    let v: Value = serde_json::from_str(&rest[0]).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["error"]["code"], "STORE_IO");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("was replaced"),
        "{v}"
    );
    assert!(
        v["error"]["details"]["hint"]
            .as_str()
            .unwrap()
            .contains("open the database again"),
        "{v}"
    );
}

/// One JSON-RPC line to the server, one reply read back.
fn rpc(
    stdin: &mut impl Write,
    out: &mut impl Iterator<Item = std::io::Result<String>>,
    v: &Value,
) -> Value {
    writeln!(stdin, "{v}").unwrap();
    serde_json::from_str(&out.next().unwrap().unwrap()).unwrap()
}

fn body(reply: &Value) -> Value {
    serde_json::from_str(reply["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// `mcp serve` as a real process keeps one handle open: after a backup is
/// moved over its file, a checkpoint (a write) and a list (a read) answer
/// STORE_IO and nothing reaches the file; once the server is stopped and
/// the old `-wal`/`-shm` removed, the restored file holds the backup's state.
#[test]
fn mcp_serve_refuses_calls_once_its_file_is_replaced() {
    let env = TestEnv::new();
    let mut child = Command::new(bin())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.dir.path())
        .arg("--db")
        .arg(env.path())
        .args(["mcp", "serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "replaced-test", "version": "0"}}});
    rpc(&mut stdin, &mut out, &init);
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let call = |id: i64, tool: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": tool, "arguments": args}})
    };
    let r = rpc(
        &mut stdin,
        &mut out,
        &call(1, "logbook_session_create", json!({"title": "t"})),
    );
    let id = body(&r)["session_id"].as_str().unwrap().to_owned();
    let backup = env.dir.path().join("b.db");
    assert_eq!(env.json(&["backup", backup.to_str().unwrap()]).code, 0);
    std::fs::rename(&backup, env.path()).unwrap();
    let r = rpc(
        &mut stdin,
        &mut out,
        &call(
            2,
            "logbook_session_checkpoint",
            json!({"session_id": id, "step": "lost?"}),
        ),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(body(&r)["code"], "STORE_IO", "{r}");
    assert!(
        body(&r)["message"]
            .as_str()
            .unwrap()
            .contains("was replaced"),
        "{r}"
    );
    let r = rpc(
        &mut stdin,
        &mut out,
        &call(3, "logbook_session_list", json!({})),
    );
    assert_eq!(body(&r)["code"], "STORE_IO", "{r}");
    drop(stdin);
    assert_eq!(wait_exit(&mut child, "mcp serve"), 0);
    clear_companions(env.path());
    let v = env.json(&["session", "show", &id]).data();
    assert_eq!(v["session"]["rev"], 1, "{v}");
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// A `-wal` of the file a backup replaced, left beside the restored file,
/// damages it when applied: `doctor` says so (`wal_match`, first, with what
/// to do), leaves both files as they were instead of checkpointing the
/// frames into the file, and passes once the `-wal` is moved aside.
#[test]
fn doctor_explains_a_wal_left_from_a_replaced_file() {
    let env = TestEnv::new();
    for i in 0..10 {
        env.create(&format!("early {i}"));
    }
    let backup = env.dir.path().join("b.db");
    assert_eq!(env.json(&["backup", backup.to_str().unwrap()]).code, 0);
    // Later writes, checkpointed into the file; then a few more that stay
    // in the WAL (a held connection keeps it from being checkpointed).
    let keep = env.sql();
    keep.query_row("SELECT count(*) FROM sessions", [], |r| r.get::<_, i64>(0))
        .unwrap();
    for i in 0..60 {
        env.create(&format!("later {i} {}", "x".repeat(150)));
    }
    keep.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    for i in 0..5 {
        env.create(&format!("last {i}"));
    }
    let old_wal = std::fs::read(companion(env.path(), "-wal")).unwrap();
    assert!(old_wal.len() > 32);
    drop(keep);
    // The restore as it went wrong: the backup moved into place, the old
    // -wal still beside it (no process left running).
    clear_companions(env.path());
    std::fs::rename(&backup, env.path()).unwrap();
    std::fs::write(companion(env.path(), "-wal"), &old_wal).unwrap();
    let db_before = std::fs::read(env.path()).unwrap();
    let e = assert_error(&env.json(&["doctor"]), "STORE_CORRUPT", 6);
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("the first: wal_match"), "{msg}");
    assert!(msg.contains("move its -wal and -shm aside"), "{msg}");
    let checks = e["details"]["checks"].as_array().unwrap();
    let wal_match = checks.iter().find(|c| c["check"] == "wal_match").unwrap();
    assert_eq!(wal_match["ok"], false, "{wal_match}");
    assert!(
        checks
            .iter()
            .any(|c| c["check"] == "integrity" && c["ok"] == false),
        "{checks:?}"
    );
    // Doctor changed neither file: the frames were not copied into it.
    assert_eq!(std::fs::read(env.path()).unwrap(), db_before);
    assert_eq!(
        std::fs::read(companion(env.path(), "-wal")).unwrap(),
        old_wal
    );
    // Following the advice restores the backup's state.
    std::fs::rename(
        companion(env.path(), "-wal"),
        env.dir.path().join("old-wal"),
    )
    .unwrap();
    let _ = std::fs::remove_file(companion(env.path(), "-shm"));
    let d = env.json(&["doctor"]).data();
    assert_eq!(
        (d["healthy"].as_bool(), d["sessions"].as_i64()),
        (Some(true), Some(10))
    );
}
