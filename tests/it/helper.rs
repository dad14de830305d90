//! A long-lived writer process for durability and restart tests.
//!
//! The test binary re-executes itself running only `helper_entry` (an
//! ignored test, so a normal run neither runs nor counts it as passed) with
//! `LOGBOOK_TEST_HELPER` set; run without that variable it fails.

use logbook::{CheckpointRequest, Ledger, LedgerOptions, Mutation};
use std::io::Write;
use std::process::{Command, Stdio};

/// Starts the helper: it opens one `Ledger` on `db` and checkpoints `session`
/// in a loop (`--step k<i> --note n<i>`), printing `<seq> k<i>` after each
/// commit, for `count` iterations (0 = until killed).
pub fn spawn_writer(
    db: &std::path::Path,
    session: &str,
    start: u64,
    count: u64,
) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper::helper_entry",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env("LOGBOOK_TEST_HELPER", "writer")
        .env("LOGBOOK_TEST_DB", db)
        .env("LOGBOOK_TEST_SESSION", session)
        .env("LOGBOOK_TEST_START", start.to_string())
        .env("LOGBOOK_TEST_COUNT", count.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
#[ignore = "a writer process the durability and concurrency tests start, not a test"]
fn helper_entry() {
    let mode = std::env::var("LOGBOOK_TEST_HELPER")
        .expect("LOGBOOK_TEST_HELPER: this is a helper process that tests start, not a test");
    assert_eq!(mode, "writer");
    let db = std::env::var("LOGBOOK_TEST_DB").unwrap();
    let id = std::env::var("LOGBOOK_TEST_SESSION").unwrap();
    let start: u64 = std::env::var("LOGBOOK_TEST_START")
        .unwrap()
        .parse()
        .unwrap();
    let count: u64 = std::env::var("LOGBOOK_TEST_COUNT")
        .unwrap()
        .parse()
        .unwrap();
    let l = Ledger::open(LedgerOptions {
        busy_timeout_ms: 30_000,
        ..LedgerOptions::at(db)
    })
    .unwrap();
    let mut out = std::io::stdout().lock();
    let mut i = start;
    loop {
        let req = CheckpointRequest {
            step: Some(format!("k{i}")),
            note: Some(format!("n{i}")),
            ..Default::default()
        };
        let s = l.checkpoint(&id, req, &Mutation::default()).unwrap();
        let seq = s.checkpoint.as_ref().unwrap().seq;
        writeln!(out, "{seq} k{i}").unwrap();
        out.flush().unwrap();
        i += 1;
        if count > 0 && i >= start + count {
            break;
        }
    }
}
