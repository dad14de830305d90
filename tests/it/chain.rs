//! The events' hash chain (docs/design.md, "Hash chain") and the V1 → V2 upgrade (CASES C25).

use crate::common::*;
use serde_json::Value;

/// Two sessions: `a` with 5 events (created + 3 checkpoints + complete) and
/// `b` with 2; then every events trigger dropped, as a tamperer would.
fn tamperable() -> (TestEnv, String, String) {
    let env = TestEnv::new();
    let a = env.create("a");
    for step in ["s1", "s2", "s3"] {
        env.json(&["session", "checkpoint", &a, "--step", step]);
    }
    env.json(&["session", "complete", &a, "--result", "done"]);
    let b = env.create("b");
    env.json(&["session", "checkpoint", &b, "--step", "only"]);
    assert_eq!(env.json(&["verify"]).code, 0);
    // On PostgreSQL as a superuser, who may switch the triggers off (the
    // foreign keys' too).
    env.batch(pick(
        "DROP TRIGGER events_no_update; DROP TRIGGER events_no_delete; \
         DROP TRIGGER events_seq_contiguous;",
        "ALTER TABLE events DISABLE TRIGGER ALL",
    ));
    (env, a, b)
}

/// The hash of an event, as lowercase hex.
fn hash_of(env: &TestEnv, id: &str, seq: i64) -> String {
    env.rows(
        &format!("SELECT hash FROM events WHERE session_id = $1 AND seq = {seq}"),
        &[id],
    )[0][0]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Runs `verify --json` and returns the LEDGER_TAMPERED details.
#[track_caller]
fn tampered(env: &TestEnv, args: &[&str]) -> Value {
    let mut a = vec!["verify"];
    a.extend_from_slice(args);
    let err = assert_error(&env.json(&a), "LEDGER_TAMPERED", 6);
    assert_eq!(err["retryable"], false);
    err["details"].clone()
}

#[test]
fn an_untouched_ledger_verifies_and_reports_heads() {
    let env = TestEnv::new();
    let a = env.create("a");
    env.json(&["session", "checkpoint", &a, "--step", "x"]);
    let d = env.json(&["verify", &a]).data();
    assert_eq!(d["sessions"], 1);
    assert_eq!(d["events"], 2);
    assert_eq!(d["heads"][0]["session_id"], a.as_str());
    assert_eq!(d["heads"][0]["events"], 2);
    assert_eq!(d["heads"][0]["head_hash"], hash_of(&env, &a, 1).as_str());
    // Seq 0 links to zeros; seq 1 to seq 0.
    let p = env.rows(
        "SELECT (SELECT prev_hash FROM events WHERE session_id = $1 AND seq = 0),
                (SELECT prev_hash FROM events WHERE session_id = $1 AND seq = 1)",
        &[&a],
    );
    assert_eq!(p[0][0], "0".repeat(64));
    assert_eq!(p[0][1], hash_of(&env, &a, 0));
    let all = env.json(&["verify"]).data();
    assert_eq!(
        (all["sessions"].as_i64(), all["events"].as_i64()),
        (Some(1), Some(2))
    );
    assert_eq!(all["heads"], serde_json::json!([]));
    // Human form.
    let r = env.run(&["verify"]);
    assert_eq!(r.code, 0);
    assert_eq!(
        r.stdout,
        "ok: 1 session(s), 2 event(s); every hash chain holds\n"
    );
}

#[test]
fn an_edited_event_is_caught_at_its_seq() {
    let (env, a, b) = tamperable();
    let original = hash_of(&env, &a, 2);
    env.batch(&format!(
        "UPDATE events SET detail = 'forged' WHERE session_id = '{a}' AND seq = 2"
    ));
    let d = tampered(&env, &[]);
    assert_eq!(d["session_id"], a.as_str());
    assert_eq!(d["seq"], 2);
    assert_eq!(d["problem"], "hash");
    assert_eq!(d["found"], original.as_str());
    assert_ne!(d["expected"], original.as_str());
    assert_eq!(d["broken_sessions"], 1);
    // The untouched session still verifies on its own; the broken one not.
    assert_eq!(env.json(&["verify", &b]).code, 0);
    assert_eq!(tampered(&env, &[&a])["seq"], 2);
    // Human form names the code on stderr.
    let r = env.run(&["verify"]);
    assert_eq!(r.code, 6);
    assert!(
        r.stderr.starts_with("error[LEDGER_TAMPERED]"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_edited_data_timestamp_or_type_is_caught() {
    for sql in [
        "UPDATE events SET data = '{\"step\":\"other\"}' WHERE session_id = 'A' AND seq = 1",
        "UPDATE events SET at_ms = at_ms + 1 WHERE session_id = 'A' AND seq = 1",
        "UPDATE events SET type = 'x.forged' WHERE session_id = 'A' AND seq = 1",
        "UPDATE events SET actor_type = 'mcp' WHERE session_id = 'A' AND seq = 1",
        "UPDATE events SET run_id = 'run_0000000000000000' WHERE session_id = 'A' AND seq = 1",
    ] {
        let (env, a, _) = tamperable();
        env.batch(&sql.replace("'A'", &format!("'{a}'")));
        let d = tampered(&env, &[]);
        assert_eq!(
            (d["seq"].as_i64(), d["problem"].as_str()),
            (Some(1), Some("hash")),
            "{sql}"
        );
    }
}

#[test]
fn a_deleted_event_is_caught_in_the_middle_and_at_the_end() {
    let (env, a, _) = tamperable();
    env.batch(&format!(
        "DELETE FROM events WHERE session_id = '{a}' AND seq = 2"
    ));
    let d = tampered(&env, &[]);
    assert_eq!(
        (
            d["seq"].as_i64(),
            d["problem"].as_str(),
            d["expected"].as_str(),
            d["found"].as_str()
        ),
        (Some(2), Some("seq"), Some("2"), Some("3"))
    );

    let (env, a, _) = tamperable();
    env.batch(&format!(
        "DELETE FROM events WHERE session_id = '{a}' AND seq = 4"
    ));
    let d = tampered(&env, &[]);
    assert_eq!(
        (
            d["seq"].as_i64(),
            d["problem"].as_str(),
            d["expected"].as_str(),
            d["found"].as_str()
        ),
        (
            Some(4),
            Some("missing_events"),
            Some("at least 5 events"),
            Some("4 events")
        )
    );
}

#[test]
fn reordered_events_are_caught() {
    let (env, a, _) = tamperable();
    env.batch(&format!(
        "UPDATE events SET seq = 1000 WHERE session_id = '{a}' AND seq = 1;
         UPDATE events SET seq = 1 WHERE session_id = '{a}' AND seq = 2;
         UPDATE events SET seq = 2 WHERE session_id = '{a}' AND seq = 1000;"
    ));
    let d = tampered(&env, &[]);
    assert_eq!(
        (d["seq"].as_i64(), d["problem"].as_str()),
        (Some(1), Some("prev_hash"))
    );
    assert_eq!(d["expected"], hash_of(&env, &a, 0).as_str());
}

#[test]
fn inserted_events_are_caught() {
    // At the end, linked correctly but with a made-up hash.
    let (env, a, _) = tamperable();
    let head = hash_of(&env, &a, 4);
    let (unhex, zeros) = if on_pg() {
        (
            format!("decode('{head}', 'hex')"),
            "decode(repeat('00', 32), 'hex')",
        )
    } else {
        (format!("unhex('{head}')"), "zeroblob(32)")
    };
    env.batch(&format!(
        "INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash, hash)
         VALUES ('{a}', 5, 'x.forged', 0, 'cli', {unhex}, {zeros})"
    ));
    let d = tampered(&env, &[]);
    assert_eq!(
        (d["seq"].as_i64(), d["problem"].as_str()),
        (Some(5), Some("hash"))
    );
    assert_eq!(d["found"], "0".repeat(64).as_str());

    // In the middle: later events shifted up to make room.
    let (env, a, _) = tamperable();
    env.batch(&format!(
        "UPDATE events SET seq = seq + 100 WHERE session_id = '{a}' AND seq >= 2;
         UPDATE events SET seq = seq - 99 WHERE session_id = '{a}' AND seq >= 100;
         INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash, hash)
         SELECT session_id, 2, 'x.forged', at_ms, 'cli', hash, hash FROM events
         WHERE session_id = '{a}' AND seq = 1;"
    ));
    let d = tampered(&env, &[]);
    assert_eq!(
        (d["seq"].as_i64(), d["problem"].as_str()),
        (Some(2), Some("hash"))
    );

    // Events of a session that does not exist.
    let (env, _, _) = tamperable();
    // (On PostgreSQL the foreign key's triggers are off since tamperable.)
    env.batch(pick(
        "PRAGMA foreign_keys = OFF;
         INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash, hash)
         VALUES ('ses_00000000000000ee', 0, 'x.orphan', 0, 'cli', zeroblob(32), zeroblob(32));",
        "INSERT INTO events (session_id, seq, type, at_ms, actor_type, prev_hash, hash)
         VALUES ('ses_00000000000000ee', 0, 'x.orphan', 0, 'cli',
                 decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'));",
    ));
    let d = tampered(&env, &[]);
    assert_eq!(
        (d["session_id"].as_str(), d["problem"].as_str()),
        (Some("ses_00000000000000ee"), Some("orphan_events"))
    );
}

#[test]
fn verify_refuses_bad_and_unknown_ids_and_counts_every_broken_session() {
    let (env, a, b) = tamperable();
    assert_error(&env.json(&["verify", "nope"]), "INVALID_ARGUMENT", 2);
    assert_error(
        &env.json(&["verify", "ses_00000000000000aa"]),
        "SESSION_NOT_FOUND",
        3,
    );
    env.batch(&format!(
        "UPDATE events SET detail = 'x' WHERE session_id = '{a}' AND seq = 0;
         UPDATE events SET detail = 'y' WHERE session_id = '{b}' AND seq = 1;"
    ));
    let d = tampered(&env, &[]);
    assert_eq!(d["broken_sessions"], 2);
}

// A V1 SQLite file and its upgrade (and SQLite's write lock).
sqlite_only! {
/// A file at schema V1 (tests/fixtures/v1.db, written by the V1 binary)
/// upgrades in one transaction: old rows unchanged, chains backfilled, and
/// the upgraded file works for every command (CASES C25, first pass).
#[test]
fn c25_a_v1_database_upgrades_keeping_every_row() {
    let env = TestEnv::new();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v1.db"),
        env.path(),
    )
    .unwrap();
    let digest = |c: &rusqlite::Connection| -> (i64, i64, String) {
        let rows: Vec<String> = {
            let mut st = c
                .prepare(
                    "SELECT json_array(session_id, status, title, app, rev, checkpoint_seq, final_result,
                            end_reason, created_at_ms, updated_at_ms, ended_at_ms) FROM sessions ORDER BY session_id",
                )
                .unwrap();
            let mut v: Vec<String> = st
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let mut st = c
                .prepare(
                    "SELECT json_array(event_id, session_id, seq, type, at_ms, actor_type, detail, data, run_id)
                     FROM events ORDER BY event_id",
                )
                .unwrap();
            v.extend(
                st.query_map([], |r| r.get::<_, String>(0))
                    .unwrap()
                    .map(Result::unwrap),
            );
            v
        };
        let n = |t: &str| -> i64 {
            c.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))
                .unwrap()
        };
        (n("sessions"), n("events"), rows.join("\n"))
    };
    let before = digest(&env.sql());
    assert_eq!((before.0, before.1), (6, 14));

    let list = env.json(&["session", "list"]).data();
    assert_eq!(list["sessions"].as_array().unwrap().len(), 6);
    let c = env.sql();
    assert_eq!(digest(&c), before);
    let (ver, hist, ic, unhashed): (i64, i64, String, i64) = c
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT max(version) FROM refinery_schema_history),
                    (SELECT integrity_check FROM pragma_integrity_check),
                    (SELECT count(*) FROM events WHERE hash IS NULL OR prev_hash IS NULL)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        (ver, hist, ic.as_str(), unhashed),
        (
            logbook::store::LATEST_VERSION,
            logbook::store::LATEST_VERSION,
            "ok",
            0
        )
    );
    let v = env.json(&["verify"]).data();
    assert_eq!(
        (v["sessions"].as_i64(), v["events"].as_i64()),
        (Some(6), Some(14))
    );

    // Every command works on the upgraded file, and chains continue.
    let active: String = c
        .query_row(
            "SELECT session_id FROM sessions WHERE status = 'active'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let cp = env.json(&["session", "checkpoint", &active, "--step", "after-upgrade"]);
    assert_eq!(cp.code, 0, "{}", cp.stdout);
    let s = env.create("new");
    assert_eq!(env.json(&["session", "show", &s]).code, 0);
    let v = env.json(&["verify"]).data();
    assert_eq!(
        (v["sessions"].as_i64(), v["events"].as_i64()),
        (Some(7), Some(16))
    );
    // The pre-V2 rows can no longer be updated, hash or not.
    let err = c
        .execute("UPDATE events SET detail = 'x' WHERE event_id = 1", [])
        .unwrap_err()
        .to_string();
    assert!(err.contains("append-only"), "{err}");
}

/// C25, second pass: a first open by the V2 binary while another client
/// holds the write lock fails with STORE_BUSY and leaves the V1 file exactly
/// as it was; once the lock is gone it upgrades.
#[test]
fn c25_an_upgrade_under_a_held_lock_is_store_busy_and_changes_nothing() {
    let env = TestEnv::new();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v1.db"),
        env.path(),
    )
    .unwrap();
    let schema = |c: &rusqlite::Connection| -> String {
        let mut st = c
            .prepare("SELECT coalesce(sql, name) FROM sqlite_schema ORDER BY name")
            .unwrap();
        let mut v: Vec<String> = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut st = c
            .prepare("SELECT version || ' ' || name || ' ' || checksum FROM refinery_schema_history ORDER BY version")
            .unwrap();
        v.extend(
            st.query_map([], |r| r.get::<_, String>(0))
                .unwrap()
                .map(Result::unwrap),
        );
        v.join("\n")
    };
    let holder = env.sql();
    let before = schema(&holder);
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let r = env.json(&["--busy-timeout-ms", "1000", "session", "list"]);
    let err = assert_error(&r, "STORE_BUSY", 4);
    assert_eq!(err["retryable"], true);
    holder.execute_batch("COMMIT").unwrap();
    assert_eq!(schema(&holder), before);
    let ver: i64 = holder
        .query_row("SELECT user_version FROM pragma_user_version", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(ver, 1);
    assert_eq!(env.json(&["session", "list"]).code, 0);
    assert_ne!(schema(&holder), before);
    assert_eq!(env.json(&["verify"]).code, 0);
}
}

/// Snapshots are covered by the chain through their checkpoint events
/// (which record each one's SHA-256 and size): editing a snapshot's state,
/// even to one of the same length, or deleting it, is caught by verify and
/// doctor. (Found by adversarial testing.)
#[test]
fn a_tampered_or_deleted_snapshot_is_caught() {
    let tampers = if on_pg() {
        [
            "ALTER TABLE session_snapshots DISABLE TRIGGER ALL; UPDATE session_snapshots SET state = '{\"st\":\"x\"}'",
            "ALTER TABLE session_snapshots DISABLE TRIGGER ALL; DELETE FROM session_snapshots",
        ]
    } else {
        [
            "DROP TRIGGER session_snapshots_no_update; UPDATE session_snapshots SET state = '{\"st\":\"x\"}'",
            "DROP TRIGGER session_snapshots_no_delete; DELETE FROM session_snapshots",
        ]
    };
    for tamper in tampers {
        let env = TestEnv::new();
        let s = env.create("a");
        let r = env.json(&[
            "session",
            "checkpoint",
            &s,
            "--step",
            "one",
            "--state",
            "{\"st\":\"a\"}",
        ]);
        assert_eq!(r.code, 0, "{}", r.stdout);
        assert_eq!(env.json(&["verify"]).code, 0);
        env.batch(tamper);
        let d = tampered(&env, &[]);
        assert_eq!(
            (d["seq"].as_i64(), d["problem"].as_str()),
            (Some(1), Some("snapshot")),
            "{tamper}"
        );
        // doctor is SQLite's alone for now (INVALID_ARGUMENT on a server).
        if !on_pg() {
            assert_error(&env.json(&["doctor"]), "LEDGER_TAMPERED", 6);
        }
    }
}
