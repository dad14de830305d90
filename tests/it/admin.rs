//! `logbook doctor` and `logbook backup` (docs/design.md, "Doctor and backup").

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
            "tombstones",
            "journal_mode",
            "file_modes",
            "wal_size",
            "wal_match",
            "free_pages"
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
        (Some(logbook::store::LATEST_VERSION), Some(1), Some(2))
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

/// docs/design.md, "Database files": `doctor` reports `user_version` and refinery's history
/// disagreeing (here the history lost its newest row).
#[test]
fn doctor_reports_user_version_and_history_disagreeing() {
    let env = TestEnv::new();
    env.create("a");
    let latest = logbook::store::LATEST_VERSION;
    env.sql()
        .execute(
            "DELETE FROM refinery_schema_history WHERE version = ?1",
            [latest],
        )
        .unwrap();
    let e = assert_error(&env.json(&["doctor"]), "STORE_CORRUPT", 6);
    let schema = e["details"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "schema")
        .unwrap()
        .clone();
    assert_eq!(schema["ok"], false);
    assert_eq!(
        schema["detail"],
        format!(
            "user_version {latest} and refinery_schema_history's newest version {} disagree (this logbook's latest {latest}): another tool changed one of them",
            latest - 1
        )
    );
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

/// The `schema_objects` check of a doctor report (`data` or error details).
fn objects_check(report: &serde_json::Value) -> serde_json::Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "schema_objects")
        .unwrap()
        .clone()
}

/// An index and a view an operator added for a dashboard are not logbook's,
/// but they are no damage either: a warning naming them, exit 0 (they used
/// to be STORE_CORRUPT, exit 6).
#[test]
fn doctor_warns_about_an_operators_index_and_view_and_passes() {
    let env = TestEnv::new();
    env.create("a");
    env.sql()
        .execute_batch(
            "CREATE INDEX dash_sessions_by_title ON sessions (title);
             CREATE VIEW dash_active AS SELECT session_id FROM sessions WHERE status = 'active';",
        )
        .unwrap();
    let d = env.json(&["doctor"]).data();
    assert_eq!(
        (d["healthy"].as_bool(), d["warnings"].as_i64()),
        (Some(true), Some(2))
    );
    let o = objects_check(&d);
    assert_eq!(
        (o["ok"].as_bool(), o["level"].as_str()),
        (Some(true), Some("warning"))
    );
    assert_eq!(
        o["warnings"],
        serde_json::json!([
            "view dash_active is not part of logbook's schema",
            "index dash_sessions_by_title is not part of logbook's schema"
        ])
    );
    assert_eq!(
        o["detail"],
        "logbook's tables, indexes, triggers and views are as the migrations made it; \
         not logbook's (left as they are): view dash_active, index dash_sessions_by_title"
    );
    // Every other check is plainly ok.
    let others: Vec<(String, String)> = d["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["check"] != "schema_objects")
        .map(|c| {
            (
                c["check"].as_str().unwrap().to_owned(),
                c["level"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(others.iter().all(|(_, l)| l == "ok"), "{others:?}");
    let r = env.run(&["doctor"]);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""));
    assert!(
        r.stdout.contains(
            "schema_objects  warning  logbook's tables, indexes, triggers and views are as the migrations made it; not logbook's (left as they are): view dash_active, index dash_sessions_by_title\n"
        ),
        "{}",
        r.stdout
    );
}

/// A table an operator keeps beside logbook's is a warning too.
#[test]
fn doctor_warns_about_an_operators_table() {
    let env = TestEnv::new();
    env.create("a");
    env.sql()
        .execute_batch("CREATE TABLE dash_notes (note TEXT)")
        .unwrap();
    let d = env.json(&["doctor"]).data();
    assert_eq!(
        objects_check(&d)["warnings"],
        serde_json::json!(["table dash_notes is not part of logbook's schema"])
    );
}

/// What can refuse or change logbook's own writes is not a dashboard's
/// drift: an extra trigger or an extra UNIQUE index stays STORE_CORRUPT.
#[test]
fn doctor_fails_on_an_extra_trigger_or_unique_index() {
    for (sql, finding) in [
        (
            "CREATE TRIGGER boom BEFORE INSERT ON events WHEN NEW.detail = 'BOOM' \
             BEGIN SELECT RAISE(ABORT, 'boom'); END",
            "trigger boom is not part of logbook's schema (it can change or refuse logbook's writes)",
        ),
        (
            "CREATE UNIQUE INDEX one_per_title ON sessions (title)",
            "unique index one_per_title is not part of logbook's schema (it can refuse logbook's writes)",
        ),
    ] {
        let env = TestEnv::new();
        env.create("a");
        env.sql().execute_batch(sql).unwrap();
        let e = assert_error(&env.json(&["doctor"]), "STORE_CORRUPT", 6);
        let o = objects_check(&e["details"]);
        assert_eq!((o["ok"].as_bool(), o["level"].as_str()), (Some(false), Some("problem")));
        assert_eq!(o["detail"], finding);
        assert_eq!(o["warnings"], serde_json::json!([]));
        assert_eq!(e["details"]["healthy"], false);
    }
}

/// A logbook index an operator dropped is still damage: STORE_CORRUPT, exit
/// 6, even beside an operator's own index (a warning in the same check).
#[test]
fn doctor_fails_on_a_dropped_logbook_index() {
    let env = TestEnv::new();
    env.create("a");
    env.sql()
        .execute_batch("DROP INDEX sessions_by_app; CREATE INDEX dash_by_app ON sessions (app);")
        .unwrap();
    let e = assert_error(&env.json(&["doctor"]), "STORE_CORRUPT", 6);
    let o = objects_check(&e["details"]);
    assert_eq!(
        (o["ok"].as_bool(), o["level"].as_str()),
        (Some(false), Some("problem"))
    );
    assert_eq!(
        o["detail"],
        "index sessions_by_app is missing; not logbook's (left as they are): index dash_by_app"
    );
    assert_eq!(
        o["warnings"],
        serde_json::json!(["index dash_by_app is not part of logbook's schema"])
    );
    let r = env.run(&["doctor"]);
    assert_eq!(r.code, 6);
    assert!(
        r.stdout
            .contains("schema_objects  PROBLEM  index sessions_by_app is missing"),
        "{}",
        r.stdout
    );
    assert!(r.stderr.starts_with("error[STORE_CORRUPT]"), "{}", r.stderr);
}

/// A logbook trigger dropped and created again with another body (here one
/// that lets DELETE through) is changed, not merely extra: STORE_CORRUPT.
#[test]
fn doctor_fails_on_a_changed_trigger() {
    let env = TestEnv::new();
    env.create("a");
    env.sql()
        .execute_batch(
            "DROP TRIGGER events_no_delete;
             CREATE TRIGGER events_no_delete BEFORE DELETE ON events WHEN 0
             BEGIN SELECT RAISE(ABORT, 'logbook: events are append-only; DELETE is not allowed'); END;",
        )
        .unwrap();
    let e = assert_error(&env.json(&["doctor"]), "STORE_CORRUPT", 6);
    let o = objects_check(&e["details"]);
    assert_eq!(o["level"], "problem");
    assert_eq!(
        o["detail"],
        "trigger events_no_delete differs from its migration"
    );
}
