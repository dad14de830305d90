//! CASES.md, one test (or a few) per failure case, for what exists now:
//! sessions, events and the `session` CLI. The parts of a case that need MCP,
//! runs or `doctor` are left for when those land. Where a case asks for
//! hundreds of processes or rounds, the counts are scaled down so that this
//! file runs in a few minutes on a 2-core machine; each such test says so.

use crate::common::*;
use logbook::store::open::JOURNAL_SIZE_LIMIT_BYTES;
use logbook::{
    AppendEvent, CheckpointRequest, Clock, CreateSession, ErrorCode, Ledger, LedgerOptions,
    ListSessions, Mutation, SyncMode,
};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};


// ---------------------------------------------------------------- C25

/// C25 (second pass, on an empty file until a second schema version
/// exists): while another connection holds an exclusive lock, the first
/// open fails with STORE_BUSY and writes nothing; after release it succeeds.
#[test]
fn c25_first_open_under_a_held_lock_is_store_busy_and_writes_nothing() {
    let env = TestEnv::new();
    fs::File::create(env.path()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let path = env.path().to_path_buf();
    let holder = std::thread::spawn(move || {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("BEGIN EXCLUSIVE").unwrap();
        tx.send(()).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        c.execute_batch("COMMIT").unwrap();
    });
    rx.recv().unwrap();
    let t = Instant::now();
    let r = env.json(&[
        "--busy-timeout-ms",
        "500",
        "session",
        "create",
        "--title",
        "t",
        "--app",
        "a",
    ]);
    let waited = t.elapsed();
    let e = assert_error(&r, "STORE_BUSY", 4);
    assert_eq!(e["details"]["busy_timeout_ms"], 500);
    assert!(waited < Duration::from_millis(2500), "{waited:?}");
    holder.join().unwrap();

    // The holder's own empty BEGIN EXCLUSIVE / COMMIT writes SQLite's page 1
    // (a header with no schema): that is SQLite, not logbook. logbook must
    // have added nothing: no object, no version, not even the switch to WAL.
    let header = fs::read(env.path()).unwrap();
    assert!(header.len() <= 4096, "{} bytes", header.len());
    if header.len() >= 20 {
        assert_eq!(
            (header[18], header[19]),
            (1, 1),
            "switched to WAL while refused"
        );
    }
    assert!(!companion(env.path(), "-wal").exists());
    {
        let c = env.sql();
        let probe: (i64, i64, i64) = c
            .query_row(
                "SELECT (SELECT count(*) FROM sqlite_schema),
                        (SELECT user_version FROM pragma_user_version),
                        (SELECT application_id FROM pragma_application_id)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(probe, (0, 0, 0));
    }

    let d = env
        .json(&["session", "create", "--title", "t", "--app", "a"])
        .data();
    assert_eq!(d["rev"], 1);
    let c = env.sql();
    let hist: (i64, i64) = c
        .query_row(
            "SELECT count(*), max(version) FROM refinery_schema_history",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(
        hist,
        (
            logbook::store::migrate::LATEST_VERSION,
            logbook::store::migrate::LATEST_VERSION
        )
    );
    let ic: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ic, "ok");
    let jm: String = c
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(jm, "wal");
}

// ---------------------------------------------------------------- C30

