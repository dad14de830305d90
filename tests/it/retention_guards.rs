//! Retention against races and raw SQL (docs/schema.md, "Retention"): a
//! purge racing creates under its sessions, concurrent purges, tombstones
//! written by raw SQL, forged purge records, stray tombstones, replaced
//! snapshots. Backend-neutral: each runs on SQLite and on the server.

use crate::common::*;
use crate::purge::{count, ended, purge, raw_tombstone_sql, seed, seed_lines};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};

/// The seeded session ids of [`seed_lines`] with this salt.
fn seeded_ids(n: usize, salt: u32) -> Vec<String> {
    (0..n).map(|i| format!("ses_{salt:08x}{i:08x}")).collect()
}

/// Live sessions whose parent is not a session here (purged).
fn live_children_of_purged(env: &TestEnv) -> i64 {
    env.scalar(
        "SELECT count(*) FROM sessions c WHERE c.status IN ('pending', 'active', 'paused') \
         AND c.parent_session_id IS NOT NULL \
         AND NOT EXISTS (SELECT 1 FROM sessions p WHERE p.session_id = c.parent_session_id)",
    )
}

fn open_purges(env: &TestEnv) -> i64 {
    env.scalar("SELECT count(*) FROM v_purges WHERE done = 0")
}

#[test]
fn a_purge_racing_creates_under_its_sessions_leaves_no_live_child_under_a_purged_parent() {
    let env = TestEnv::new();
    let n = 300;
    seed(
        &env,
        &seed_lines(n, 3, "r", now_ms() - 10_000, "completed", 0xa1),
    );
    let ids = seeded_ids(n, 0xa1);
    let done = AtomicBool::new(false);
    let (purges, creates) = std::thread::scope(|s| {
        let creators: Vec<_> = (0..4usize)
            .map(|k| {
                let (env, ids, done) = (&env, &ids, &done);
                s.spawn(move || {
                    let mut runs = Vec::new();
                    let mut i = k;
                    while !done.load(Ordering::SeqCst) && runs.len() < 300 {
                        let parent = &ids[(i * 37) % ids.len()];
                        i += 4;
                        let r: Run = env
                            .cli(&[
                                "session", "create", "--title", "child", "--app", "child",
                                "--parent", parent,
                            ])
                            .output()
                            .expect("spawn")
                            .into();
                        runs.push((parent.clone(), r));
                    }
                    runs
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let purges: Vec<Run> = (0..3)
            .map(|_| env.json(&["purge", "--app", "r", "--yes"]))
            .collect();
        done.store(true, Ordering::SeqCst);
        let creates: Vec<(String, Run)> = creators
            .into_iter()
            .flat_map(|c| c.join().expect("creator"))
            .collect();
        (purges, creates)
    });
    for p in &purges {
        assert_eq!(p.code, 0, "a purge failed:\n{}\n{}", p.stdout, p.stderr);
    }
    let mut made = 0;
    for (parent, r) in &creates {
        if r.code == 0 {
            made += 1;
        } else {
            // The parent was purged first: the create is refused, coded.
            let e = assert_error(r, "SESSION_NOT_FOUND", 3);
            assert_eq!(e["details"]["session_id"], parent.as_str(), "{}", r.stdout);
        }
    }
    assert!(made > 0, "no create succeeded");
    assert_eq!(live_children_of_purged(&env), 0);
    // Once the creates are over, a last purge takes every parent left
    // without a live child; exactly the parents of live children stay.
    purge(&env, &["--app", "r"]);
    assert_eq!(
        env.scalar("SELECT count(*) FROM sessions WHERE app = 'r'"),
        env.scalar(
            "SELECT count(DISTINCT parent_session_id) FROM sessions \
             WHERE app = 'child' AND status = 'active'"
        )
    );
    assert_eq!(
        env.scalar("SELECT count(*) FROM sessions WHERE app = 'child'"),
        made
    );
    assert_eq!(open_purges(&env), 0);
    env.json(&["verify"]).data();
    env.json(&["doctor"]).data();
}

#[test]
fn concurrent_purges_each_finish_and_leave_no_open_record() {
    let env = TestEnv::new();
    let n = 400;
    let t0 = now_ms() - 10_000;
    seed(&env, &seed_lines(n, 3, "r", t0, "completed", 0xb2));
    let before = (t0 + 300).to_string();
    let export = env.dir.path().join("purged.jsonl");
    let runs = race(
        env.dir.path(),
        vec![
            env.cli(&["purge", "--app", "r", "--yes"]),
            env.cli(&["purge", "--status", "completed", "--yes"]),
            env.cli(&["purge", "--ended-before", &before, "--yes"]),
            env.cli(&[
                "purge",
                "--app",
                "r",
                "--status",
                "completed",
                "--export",
                export.to_str().unwrap(),
                "--yes",
            ]),
        ],
    );
    let mut purged = 0;
    for r in &runs {
        assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
        let d = r.data();
        purged += d["sessions"].as_i64().unwrap();
        // Whatever another purge took is skipped and counted, not an error.
        let skipped = &d["skipped"];
        assert_eq!(skipped["live_descendant"], 0, "{d}");
        assert_eq!(skipped["stray_tombstone"], 0, "{d}");
        assert_eq!(
            d["sessions"].as_i64().unwrap() + skipped["gone"].as_i64().unwrap(),
            d["plan"]["sessions"].as_i64().unwrap(),
            "{d}"
        );
    }
    assert_eq!(purged, n as i64, "each session purged exactly once");
    assert_eq!(count(&env, "sessions"), 0);
    assert_eq!(count(&env, "tombstones"), n as i64);
    assert_eq!(open_purges(&env), 0);
    // Each record ended: done, or superseded when another run found its
    // filter had nothing left before it recorded its own end.
    assert_eq!(
        env.scalar("SELECT count(*) FROM purge_ends"),
        env.scalar("SELECT count(*) FROM purges")
    );
    // The export holds every session its purge chose that was still there
    // when it was written: at least all it removed itself, and with what
    // it skipped as gone, all it chose.
    let lines = std::fs::read_to_string(&export).unwrap_or_default();
    let exported = lines.lines().count() as i64;
    let d = runs[3].data();
    assert_eq!(d["export"]["sessions"].as_i64(), Some(exported), "{d}");
    assert!(exported >= d["sessions"].as_i64().unwrap(), "{d}");
    // Nothing is left to go on with.
    let plan = env.json(&["purge", "--app", "r", "--dry-run"]).data();
    assert_eq!(plan["resumes"], Value::Null, "{plan}");
    assert_eq!(plan["sessions"], 0);
}

#[test]
fn an_unfinished_purge_whose_sessions_another_purge_removed_is_closed_as_superseded() {
    let env = TestEnv::new();
    let t0 = now_ms() - 10_000;
    seed(&env, &seed_lines(120, 3, "a", t0, "completed", 0xc3));
    // A purge stopped after its first batch (50 sessions) stays open.
    let mut opts = logbook::LedgerOptions::at(&env.db);
    let stop = logbook::Interrupt::new();
    opts.interrupt = stop.clone();
    let lg = logbook::Ledger::open(opts).unwrap();
    let req = logbook::ledger::PurgeRequest {
        filter: logbook::ledger::PurgeFilter {
            app: Some("a".into()),
            ..Default::default()
        },
        export: None,
    };
    let err = lg
        .purge(&req, &mut |_, _| stop.trigger(2))
        .expect_err("the purge was not stopped");
    assert_eq!(err.code().as_str(), "INTERRUPTED", "{err}");
    drop(lg);
    assert_eq!(open_purges(&env), 1);
    let first = env.scalar("SELECT min(purge_id) FROM purges");
    // Another filter removes the rest: its run closes the first purge.
    let second = purge(&env, &["--ended-before", &(t0 + 1000).to_string()]);
    assert_eq!(second["sessions"], 70);
    assert_eq!(second["superseded"], serde_json::json!([first]));
    assert_eq!(open_purges(&env), 0);
    let rows = env.rows(
        &format!(
            "SELECT outcome, sessions_skipped, sessions_purged FROM v_purges WHERE purge_id = {first}"
        ),
        &[],
    );
    assert_eq!(
        rows[0],
        vec![Value::from("superseded"), 70.into(), 50.into()]
    );
    // The same filter again does not "go on with" it.
    let plan = env.json(&["purge", "--app", "a", "--dry-run"]).data();
    assert_eq!(plan["resumes"], Value::Null, "{plan}");
}

#[test]
fn a_tombstone_deletes_its_session_in_the_statement_that_writes_it() {
    let env = TestEnv::new();
    let id = ended(&env, "a", None);
    let other = ended(&env, "a", None);
    env.batch(&raw_tombstone_sql(&id, 77));
    for table in ["sessions", "events", "session_data", "session_tags"] {
        assert_eq!(
            env.scalar(&format!(
                "SELECT count(*) FROM {table} WHERE session_id = '{id}'"
            )),
            0,
            "{table}"
        );
    }
    assert_eq!(
        env.scalar("SELECT count(*) FROM purges WHERE purge_id = 77 AND actor_type = 'sql'"),
        1
    );
    // No licence outlives that statement: the other session's rows stay.
    let err = env
        .try_batch(&format!("DELETE FROM events WHERE session_id = '{other}'"))
        .expect_err("a delete without a tombstone ran");
    assert!(err.contains("append-only"), "{err}");
    assert_eq!(
        env.scalar(&format!(
            "SELECT count(*) FROM events WHERE session_id = '{other}'"
        )),
        3
    );
    env.json(&["verify"]).data();
}

#[test]
fn raw_sql_cannot_forge_a_purge_record_of_logbook() {
    let env = TestEnv::new();
    let a = ended(&env, "a", None);
    let b = ended(&env, "b", None);
    // A purge record claiming the CLI, written by raw SQL: refused.
    for actor in ["cli", "mcp", "lib"] {
        let err = env
            .try_batch(&format!(
                "INSERT INTO purges (purge_id, at_ms, actor_type, actor_id, filter, sessions, \
                 events, bytes) VALUES (500, 0, '{actor}', 'someone', '{{}}', 0, 0, 0)"
            ))
            .expect_err("a forged purge record was written");
        assert!(err.contains("actor_type 'sql'"), "{err}");
    }
    assert_eq!(count(&env, "purges"), 0);
    // logbook's own purge records who ran it.
    let p = purge(&env, &["--app", "a"]);
    let pid = p["purge_id"].as_i64().unwrap();
    let rows = env.rows(
        &format!("SELECT actor_type, actor_id FROM purges WHERE purge_id = {pid}"),
        &[],
    );
    assert_eq!(rows[0][0], "cli");
    let who = rows[0][1].as_str().unwrap_or_default();
    assert!(who.contains('@') && who.len() > 2, "actor_id {who:?}");
    // Raw SQL may not write a tombstone under logbook's purge…
    let err = env
        .try_batch(&raw_tombstone_sql(&b, pid))
        .expect_err("a raw tombstone joined logbook's purge");
    assert!(
        err.contains("never under a purge logbook recorded"),
        "{err}"
    );
    assert_eq!(
        env.scalar(&format!(
            "SELECT count(*) FROM sessions WHERE session_id = '{b}'"
        )),
        1
    );
    // …only under one of its own, recorded as raw SQL.
    env.batch(&raw_tombstone_sql(&b, 9001));
    let rows = env.rows(
        "SELECT actor_type, actor_id FROM purges WHERE purge_id = 9001",
        &[],
    );
    assert_eq!(rows[0][0], "sql");
    if on_pg() {
        // The server knows the role that ran it.
        assert_eq!(rows[0][1], "logbook_test");
    }
    let _ = a;
}

/// Makes a tombstone of `id` beside its session, as raw SQL could before
/// schema V8 (the trigger that deletes the rows turned off around it).
fn stray_tombstone(env: &TestEnv, id: &str, purge_id: i64) {
    if on_pg() {
        env.batch(&format!(
            "ALTER TABLE tombstones DISABLE TRIGGER tombstones_purge_rows; {}; \
             ALTER TABLE tombstones ENABLE TRIGGER tombstones_purge_rows",
            raw_tombstone_sql(id, purge_id)
        ));
    } else {
        let sql: String = env
            .sql()
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE name = 'tombstones_purge_rows'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        env.batch(&format!(
            "DROP TRIGGER tombstones_purge_rows; {}; {sql}",
            raw_tombstone_sql(id, purge_id)
        ));
    }
}

#[test]
fn a_stray_tombstone_is_reported_by_doctor_and_skipped_by_purge() {
    let env = TestEnv::new();
    let stray = ended(&env, "a", None);
    let other = ended(&env, "a", None);
    stray_tombstone(&env, &stray, 31);
    let e = assert_error(&env.json(&["doctor"]), "LEDGER_TAMPERED", 6);
    let text = e.to_string();
    assert!(text.contains("\"tombstones\""), "{text}");
    assert!(text.contains(&stray), "{text}");
    for _ in 0..2 {
        let p = purge(&env, &["--app", "a"]);
        assert_eq!(open_purges(&env), 0, "{p}");
    }
    let rows = env.rows(
        "SELECT count(*) FROM sessions WHERE session_id = $1",
        &[&other],
    );
    assert_eq!(rows[0][0], 0);
    // The stray session stays, skipped with its reason each time.
    let p = purge(&env, &["--app", "a"]);
    assert_eq!(p["sessions"], 0);
    assert_eq!(p["skipped"]["stray_tombstone"], 1, "{p}");
    assert_eq!(
        env.scalar(&format!(
            "SELECT count(*) FROM sessions WHERE session_id = '{stray}'"
        )),
        1
    );
    assert_eq!(open_purges(&env), 0);
}

#[test]
fn restore_and_fork_refuse_a_snapshot_that_does_not_match_its_checkpoint() {
    let env = TestEnv::new();
    let id = env.create("snap");
    let cp = env
        .json(&[
            "session",
            "checkpoint",
            &id,
            "--step",
            "s1",
            "--state",
            r#"{"plan":"A"}"#,
        ])
        .data();
    let seq = cp["checkpoint"]["seq"].as_i64().unwrap().to_string();
    let restored = env
        .json(&["session", "restore", &id, "--checkpoint", &seq])
        .data();
    assert_eq!(restored["context"]["plan"], "A");
    let replace = format!(
        "UPDATE session_snapshots SET state = '{{\"plan\":\"B\"}}' WHERE session_id = '{id}'"
    );
    if on_pg() {
        env.batch(&format!(
            "ALTER TABLE session_snapshots DISABLE TRIGGER session_snapshots_no_update; {replace}; \
             ALTER TABLE session_snapshots ENABLE TRIGGER session_snapshots_no_update"
        ));
    } else {
        env.batch(&format!(
            "DROP TRIGGER session_snapshots_no_update; {replace}"
        ));
    }
    let rev = env.json(&["session", "show", &id]).data()["session"]["rev"].clone();
    assert_eq!(rev, 3);
    for args in [
        vec!["session", "restore", id.as_str(), "--checkpoint", &seq],
        vec!["session", "fork", id.as_str(), "--checkpoint", &seq],
    ] {
        let e = assert_error(&env.json(&args), "LEDGER_TAMPERED", 6);
        assert_eq!(e["details"]["problem"], "snapshot", "{e}");
        assert_eq!(e["details"]["seq"].to_string(), seq, "{e}");
    }
    let now = env.json(&["session", "show", &id]).data()["session"].clone();
    assert_eq!(now["rev"], rev);
    assert_eq!(now["context"]["plan"], "A");
    assert_eq!(count(&env, "sessions"), 1);
}

/// A session's line of a jsonl export: every column and event as this
/// ledger holds it, but for the ledger's own event ids.
fn session_line(env: &TestEnv, id: &str) -> String {
    let f = env.dir.path().join(format!("one-{}.jsonl", now_ms()));
    env.json(&[
        "export",
        "--format",
        "jsonl",
        "--session",
        id,
        "--out",
        f.to_str().unwrap(),
    ])
    .data();
    let text = std::fs::read_to_string(&f).unwrap();
    std::fs::remove_file(&f).unwrap();
    text.lines()
        .find(|l| l.contains("\"format\":\"logbook.session.v1\""))
        .expect("no session line")
        .to_owned()
}

/// `export --format jsonl` of the whole ledger into `path`.
fn export_all(env: &TestEnv, path: &std::path::Path) -> Value {
    env.json(&[
        "export",
        "--format",
        "jsonl",
        "--out",
        path.to_str().unwrap(),
    ])
    .data()
}

fn import(env: &TestEnv, path: &std::path::Path) -> Value {
    env.json(&["import", path.to_str().unwrap()]).data()
}

/// The audit trail as rows: every purge record (without its local id),
/// its end, and its tombstones.
fn audit_trail(env: &TestEnv) -> Vec<Vec<Value>> {
    env.rows(
        "SELECT p.at_ms, p.actor_type, p.actor_id, p.filter, p.sessions, p.events, p.bytes, \
         e.at_ms, e.outcome, e.skipped, t.session_id, t.insert_seq, t.title, t.status, t.app, \
         t.parent_session_id, t.created_at_ms, t.ended_at_ms, t.events, t.last_event_id, \
         t.last_hash, t.bytes, t.purged_at_ms \
         FROM purges p LEFT JOIN purge_ends e ON e.purge_id = p.purge_id \
         LEFT JOIN tombstones t ON t.purge_id = p.purge_id \
         ORDER BY p.at_ms, p.filter, t.session_id",
        &[],
    )
}

#[test]
fn a_purge_export_of_children_of_a_purged_parent_restores_here_and_in_a_new_ledger() {
    let env = TestEnv::new();
    let parent = ended(&env, "p", None);
    let child = ended(&env, "c", Some(&parent));
    let shown = session_line(&env, &child);
    purge(&env, &["--app", "p"]);
    let file = env.dir.path().join("children.jsonl");
    let r = purge(&env, &["--app", "c", "--export", file.to_str().unwrap()]);
    assert_eq!(r["sessions"], 1);
    // The file carries the parent's purge record with its tombstone.
    assert_eq!(r["export"]["purge_records"], 1, "{r}");
    assert_eq!(r["export"]["tombstones"], 1, "{r}");
    // Back into the same ledger: the child as it was.
    let back = import(&env, &file);
    assert_eq!(back["imported"], 1, "{back}");
    assert_eq!(back["rejected"], 0, "{back}");
    assert_eq!(back["purge_records"], 0, "{back}");
    assert_eq!(session_line(&env, &child), shown);
    // Into a new ledger: the child, and its parent's tombstone.
    let fresh = TestEnv::new();
    let moved = import(&fresh, &file);
    assert_eq!(moved["imported"], 1, "{moved}");
    assert_eq!(moved["purge_records"], 1, "{moved}");
    assert_eq!(moved["tombstones"], 1, "{moved}");
    assert_eq!(session_line(&fresh, &child), shown);
    let e = assert_error(
        &fresh.json(&["session", "show", &parent]),
        "SESSION_NOT_FOUND",
        3,
    );
    assert!(e["details"]["purge_id"].is_i64(), "{e}");
    fresh.json(&["verify"]).data();
    fresh.json(&["doctor"]).data();
}

#[test]
fn moving_a_ledger_carries_its_purge_records_and_tombstones() {
    let env = TestEnv::new();
    ended(&env, "a", None);
    ended(&env, "a", None);
    let keep = ended(&env, "b", None);
    purge(&env, &["--app", "a"]);
    let stray = ended(&env, "c", None);
    env.batch(&raw_tombstone_sql(&stray, 4242));
    let trail = audit_trail(&env);
    assert_eq!(trail.len(), 3);
    let file = env.dir.path().join("all.jsonl");
    let out = export_all(&env, &file);
    assert_eq!(out["purge_records"], 2, "{out}");
    assert_eq!(out["tombstones"], 3, "{out}");
    assert_eq!(out["sessions"], 1, "{out}");
    let fresh = TestEnv::new();
    let r = import(&fresh, &file);
    assert_eq!(r["imported"], 1, "{r}");
    assert_eq!(r["purge_records"], 2, "{r}");
    assert_eq!(r["tombstones"], 3, "{r}");
    assert_eq!(audit_trail(&fresh), trail);
    assert_eq!(session_line(&fresh, &keep), session_line(&env, &keep));
    // Moved again, nothing is doubled.
    let again = import(&fresh, &file);
    assert_eq!(again["purge_records"], 0, "{again}");
    assert_eq!(again["tombstones"], 0, "{again}");
    assert_eq!(again["skipped"], 1, "{again}");
    assert_eq!(audit_trail(&fresh), trail);
    // And back out: the same bytes.
    let file2 = fresh.dir.path().join("all2.jsonl");
    export_all(&fresh, &file2);
    let a = std::fs::read_to_string(&file).unwrap();
    let b = std::fs::read_to_string(&file2).unwrap();
    let strip = |s: &str| -> Vec<String> {
        // Purge ids are each ledger's own.
        s.lines()
            .map(|l| {
                let mut v: Value = serde_json::from_str(l).unwrap();
                if let Some(o) = v.as_object_mut() {
                    o.remove("purge_id");
                }
                v.to_string()
            })
            .collect()
    };
    assert_eq!(strip(&a), strip(&b));
    fresh.json(&["verify"]).data();
}

#[test]
fn purge_session_takes_the_named_sessions_and_no_other() {
    let env = TestEnv::new();
    let a = ended(&env, "a", None);
    let b = ended(&env, "a", None);
    let live = env.create("still working");
    let p = purge(&env, &["--session", &a, "--session", &live]);
    // The live one is never chosen, whatever names it.
    assert_eq!(p["sessions"], 1, "{p}");
    assert_eq!(
        p["plan"]["filter"]["sessions"],
        serde_json::json!([a.clone(), live.clone()]
            .iter()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()),
        "{p}"
    );
    assert_error(&env.json(&["session", "show", &a]), "SESSION_NOT_FOUND", 3);
    env.json(&["session", "show", &b]).data();
    env.json(&["session", "show", &live]).data();
    let e = assert_error(
        &env.json(&["purge", "--session", "nope", "--yes"]),
        "INVALID_ARGUMENT",
        2,
    );
    assert_eq!(e["details"]["field"], "session", "{e}");
}
