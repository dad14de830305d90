//! `logbook doctor` and `logbook backup` (issue 3 §5).

use crate::common::*;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn check_names(report: &serde_json::Value) -> Vec<(String, bool)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["ok"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn doctor_passes_a_healthy_database() {
    let env = TestEnv::new();
    let s = env.create("a");
    env.json(&["session", "checkpoint", &s, "--step", "x"]);
    let d = env.json(&["doctor"]).data();
    assert_eq!(d["healthy"], true);
    assert_eq!(
        check_names(&d),
        [
            "schema",
            "integrity",
            "foreign_keys",
            "hash_chain",
            "schema_objects",
            "journal_mode",
            "file_modes",
            "wal_size",
            "wal_match"
        ]
        .iter()
        .map(|n| (n.to_string(), true))
        .collect::<Vec<_>>()
    );
    assert_eq!(
        (
            d["schema_version"].as_i64(),
            d["sessions"].as_i64(),
            d["events"].as_i64()
        ),
        (
            Some(logbook::store::migrate::LATEST_VERSION),
            Some(1),
            Some(2)
        )
    );
    assert_eq!(d["page_size"], 4096);
    let r = env.run(&["doctor"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("CHECK"), "{}", r.stdout);
}

#[test]
fn doctor_fails_on_a_broken_chain_with_the_report() {
    let env = TestEnv::new();
    let s = env.create("a");
    env.sql()
        .execute_batch(&format!(
            "DROP TRIGGER events_no_update; UPDATE events SET detail = 'forged' WHERE session_id = '{s}';"
        ))
        .unwrap();
    let e = assert_error(&env.json(&["doctor"]), "LEDGER_TAMPERED", 6);
    let d = &e["details"];
    assert_eq!(d["healthy"], false);
    let checks = check_names(d);
    assert_eq!(checks[3], ("hash_chain".to_owned(), false));
    // The dropped trigger shows too; the chain's code comes first.
    assert_eq!(checks[4], ("schema_objects".to_owned(), false));
    assert!(
        checks
            .iter()
            .filter(|c| c.0 != "hash_chain" && c.0 != "schema_objects")
            .all(|c| c.1),
        "{checks:?}"
    );
    let r = env.run(&["doctor"]);
    assert_eq!(r.code, 6);
    assert!(r.stdout.contains("hash_chain      PROBLEM"), "{}", r.stdout);
    assert!(
        r.stderr.starts_with("error[LEDGER_TAMPERED]"),
        "{}",
        r.stderr
    );
}

#[test]
fn doctor_reports_loose_modes_once_then_passes() {
    let env = TestEnv::new();
    env.create("a");
    std::fs::set_permissions(env.path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = assert_error(&env.json(&["doctor"]), "STORE_IO", 6);
    let modes = e["details"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "file_modes")
        .unwrap()
        .clone();
    assert_eq!(modes["ok"], false);
    assert!(
        modes["detail"]
            .as_str()
            .unwrap()
            .contains("was 0644 (now 0600"),
        "{modes}"
    );
    // Opening tightened it; the next run is clean.
    assert_eq!(env.json(&["doctor"]).code, 0);
}

#[test]
fn doctor_reports_the_wal_size() {
    let env = TestEnv::new();
    let s = env.create("a");
    // An open connection keeps the WAL file in place between commands.
    let keep = env.sql();
    keep.query_row("SELECT count(*) FROM sessions", [], |r| r.get::<_, i64>(0))
        .unwrap();
    for k in 0..20 {
        env.json(&["session", "checkpoint", &s, "--step", &format!("k{k}")]);
    }
    let mut wal = env.path().as_os_str().to_owned();
    wal.push("-wal");
    let size = std::fs::metadata(&wal).unwrap().len();
    assert!(size > 0);
    let d = env.json(&["doctor"]).data();
    assert_eq!(d["wal_bytes"].as_u64(), Some(size));
    drop(keep);
}

/// A backup taken while four writer processes keep committing is one
/// consistent snapshot: the copy passes integrity, foreign-key and chain
/// checks, every session in it has as many events as its rev, and it works
/// as a database of its own.
#[test]
fn backup_while_writers_write_is_consistent_and_restores() {
    let env = TestEnv::new();
    let sessions: Vec<String> = (0..4).map(|i| env.create(&format!("s{i}"))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = sessions
        .iter()
        .map(|s| {
            let s = s.clone();
            let stop = Arc::clone(&stop);
            let db = env.path().to_owned();
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let out = std::process::Command::new(bin())
                        .arg("--db")
                        .arg(&db)
                        .args([
                            "session",
                            "checkpoint",
                            &s,
                            "--step",
                            &format!("n{n}"),
                            "--json",
                        ])
                        .output()
                        .unwrap();
                    assert_eq!(out.status.code(), Some(0));
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let dest = env.path().parent().unwrap().join("backups/nested/copy.db");
    let r = env.json(&["backup", dest.to_str().unwrap()]);
    let d = r.data();
    std::thread::sleep(std::time::Duration::from_millis(200));
    stop.store(true, Ordering::SeqCst);
    let written: i32 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(written > 0);
    let copied_events = d["events"].as_i64().unwrap();
    assert_eq!(d["sessions"], 4);
    assert!(copied_events >= 4);
    // Modes: file 0600, created folders 0700.
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(dest.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    // The copy on its own.
    let restored = TestEnv::new();
    std::fs::copy(&dest, restored.path()).unwrap();
    assert_eq!(restored.json(&["doctor"]).code, 0);
    let c = restored.sql();
    let (n, mismatched): (i64, i64) = c
        .query_row(
            "SELECT (SELECT count(*) FROM events),
                    (SELECT count(*) FROM sessions s WHERE s.rev <> (SELECT count(*) FROM events e WHERE e.session_id = s.session_id))",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((n, mismatched), (copied_events, 0));
    // It is a working ledger.
    let s = &sessions[0];
    assert_eq!(
        restored
            .json(&["session", "checkpoint", s, "--step", "after-restore"])
            .code,
        0
    );
    assert_eq!(restored.json(&["verify"]).code, 0);

    // Never overwrites.
    let before = std::fs::read(&dest).unwrap();
    let e = assert_error(
        &env.json(&["backup", dest.to_str().unwrap()]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(e["details"]["field"], "dest");
    assert_eq!(std::fs::read(&dest).unwrap(), before);
    let e = assert_error(
        &env.json(&["backup", env.path().to_str().unwrap()]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(e["details"]["field"], "dest");
}

/// A dropped append-only trigger is a problem before any edit it would let
/// through (found by a fresh-user walkthrough).
#[test]
fn doctor_notices_a_dropped_trigger() {
    let env = TestEnv::new();
    env.create("a");
    env.sql()
        .execute_batch("DROP TRIGGER events_no_update")
        .unwrap();
    let e = assert_error(&env.json(&["doctor"]), "STORE_CORRUPT", 6);
    let objects = e["details"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "schema_objects")
        .unwrap()
        .clone();
    assert_eq!(objects["ok"], false);
    assert_eq!(objects["detail"], "trigger events_no_update is missing");
}

/// `doctor` and `verify` on a path with no database (a mistyped `--db`)
/// fail with STORE_IO and create nothing: they used to create a new, empty
/// database and report it healthy (found by adversarial testing).
#[test]
fn doctor_and_verify_refuse_a_missing_database_and_create_nothing() {
    let env = TestEnv::new();
    let missing = env.path().with_file_name("typo").join("logbook.db");
    let db = missing.to_str().unwrap();
    for cmd in ["doctor", "verify"] {
        let out: Run = env
            .command()
            .args(["--db", db, cmd, "--json"])
            .output()
            .unwrap()
            .into();
        let e = assert_error(&out, "STORE_IO", 6);
        assert_eq!(e["message"], format!("cannot read {db}"), "{cmd}");
        assert!(
            !missing.parent().unwrap().exists(),
            "{cmd} created the folder"
        );
    }
    // An existing database is checked as before.
    env.create("t");
    assert_eq!(env.json(&["doctor"]).code, 0);
    assert_eq!(env.json(&["verify"]).code, 0);
}
