//! `logbook purge` (docs/design.md, "Retention"): what it chooses, what it records,
//! what the triggers allow, export / import round trips, kills midway.
//! Backend-neutral; SQLite's space facts are `sqlite_only!`.

use crate::common::*;
use serde_json::Value;
use std::path::Path;

/// JSON Lines of `n` ended sessions of `app`, each of `events` events
/// (created, checkpoints, then `status`), ended at `t0 + i` ms: the
/// format `import` reads (it recomputes every hash).
pub fn seed_lines(n: usize, events: usize, app: &str, t0: i64, status: &str, salt: u32) -> String {
    let mut out = String::new();
    for i in 0..n {
        let id = format!("ses_{salt:08x}{i:08x}");
        let created = t0 - 1_000_000 + i as i64;
        let ended = t0 + i as i64;
        let mut evs = vec![format!(
            r#"{{"seq":0,"type":"created","at_ms":{created},"actor_type":"cli","detail":"session created","data":null,"run_id":null,"hash":""}}"#
        )];
        for s in 1..events - 1 {
            evs.push(format!(
                r#"{{"seq":{s},"type":"checkpoint","at_ms":{created},"actor_type":"cli","detail":null,"data":{{"step":"step {s}"}},"run_id":null,"hash":""}}"#
            ));
        }
        let last = events - 1;
        evs.push(format!(
            r#"{{"seq":{last},"type":"{status}","at_ms":{ended},"actor_type":"cli","detail":"done","data":null,"run_id":null,"hash":""}}"#
        ));
        let (result, reason) = if status == "completed" {
            (r#""done""#, "null")
        } else {
            ("null", r#""done""#)
        };
        out.push_str(&format!(
            r#"{{"format":"logbook.session.v1","session_id":"{id}","status":"{status}","title":"seeded {i}","goal":null,"app":"{app}","agent_id":null,"route":null,"stage":null,"parent_session_id":null,"tags":["t{}"],"context":{{}},"metadata":{{}},"actor":{{"type":"cli","id":null,"authenticated":false}},"rev":{events},"checkpoint_seq":{},"refs":[],"final_result":{result},"end_reason":{reason},"usage":{{"input_tokens":0,"output_tokens":0,"api_calls":0,"duration_ms":0}},"created_at_ms":{created},"updated_at_ms":{ended},"ended_at_ms":{ended},"events":[{}]}}"#,
            i % 3,
            if events > 2 { (events - 2).to_string() } else { "null".into() },
            evs.join(",")
        ));
        out.push('\n');
    }
    out
}

/// Imports `lines` into the env's database.
pub fn seed(env: &TestEnv, lines: &str) {
    let f = env.dir.path().join(format!("seed-{}.jsonl", now_ms()));
    std::fs::write(&f, lines).unwrap();
    let r = env.json(&["import", f.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
}

/// An ended session through the CLI: created in `app`, one checkpoint,
/// completed; with `parent`, a child of it.
pub fn ended(env: &TestEnv, app: &str, parent: Option<&str>) -> String {
    let mut a = vec!["--title", "work", "--app", app, "--tag", "t1"];
    if let Some(p) = parent {
        a.extend_from_slice(&["--parent", p]);
    }
    let id = env.create_with(&a);
    env.checkpoint(&id, "s1");
    env.json(&["session", "complete", &id, "--result", "ok"])
        .data();
    id
}

pub fn count(env: &TestEnv, table: &str) -> i64 {
    env.scalar(&format!("SELECT count(*) FROM {table}"))
}

pub fn purge(env: &TestEnv, args: &[&str]) -> Value {
    let mut a = vec!["purge"];
    a.extend_from_slice(args);
    a.push("--yes");
    env.json(&a).data()
}

#[test]
fn a_dry_run_lists_what_would_go_and_changes_nothing() {
    let env = TestEnv::new();
    let a = ended(&env, "a", None);
    let b = ended(&env, "a", None);
    let live = env.create("still working");
    let before = env.db_bytes();
    let plan = env.json(&["purge", "--app", "a", "--dry-run"]).data();
    assert_eq!(plan["sessions"], 2);
    assert_eq!(plan["events"], 6);
    assert!(plan["bytes"].as_u64().unwrap() > 0);
    let first: Vec<&str> = plan["first"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(first, [a.as_str(), b.as_str()]);
    assert_eq!(plan["resumes"], Value::Null);
    assert_eq!(env.db_bytes(), before, "a dry run changed the database");
    assert_eq!(count(&env, "purges"), 0);
    env.json(&["session", "show", &live]).data();
}

#[test]
fn a_real_purge_needs_yes_off_a_terminal_and_a_filter_and_ended_statuses() {
    let env = TestEnv::new();
    let id = ended(&env, "a", None);
    let r = env.json(&["purge", "--app", "a"]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "yes"
    );
    let r = env.json(&["purge", "--yes"]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "filter"
    );
    let r = env.json(&["purge", "--status", "active", "--yes"]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "status"
    );
    let r = env.json(&["purge", "--ended-before", "yesterday", "--yes"]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "ended_before"
    );
    let existing = env.dir.path().join("exists.jsonl");
    std::fs::write(&existing, b"keep me\n").unwrap();
    let r = env.json(&[
        "purge",
        "--app",
        "a",
        "--export",
        existing.to_str().unwrap(),
        "--yes",
    ]);
    assert_eq!(
        assert_error(&r, "INVALID_ARGUMENT", 2)["details"]["field"],
        "export"
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me\n");
    assert_eq!(count(&env, "purges"), 0);
    assert_eq!(count(&env, "tombstones"), 0);
    env.json(&["session", "show", &id]).data();
}

#[test]
fn purge_records_tombstones_and_verify_reports_them_as_purged() {
    let env = TestEnv::new();
    let a = ended(&env, "a", None);
    let b = ended(&env, "a", None);
    let other = ended(&env, "b", None);
    let live = env.create("live");
    let rep = purge(&env, &["--app", "a"]);
    assert_eq!(rep["sessions"], 2);
    assert_eq!(rep["events"], 6);
    assert_eq!(rep["resumed"], false);
    let pid = rep["purge_id"].as_i64().unwrap();
    assert_eq!(rep["total"]["sessions_purged"], 2);
    assert_eq!(rep["total"]["sessions_chosen"], 2);
    // The live session of app a stays, and so does app b's.
    env.json(&["session", "show", &live]).data();
    env.json(&["session", "show", &other]).data();
    for id in [&a, &b] {
        let r = env.json(&["session", "show", id]);
        let d = assert_error(&r, "SESSION_NOT_FOUND", 3)["details"].clone();
        assert_eq!(d["purge_id"], pid);
        assert_eq!(d["session_id"], id.as_str());
        assert_eq!(
            env.scalar(&format!(
                "SELECT count(*) FROM tombstones WHERE session_id = '{id}' AND events = 3 AND purge_id = {pid} AND status = 'completed'"
            )),
            1
        );
        assert_eq!(
            env.scalar(&format!(
                "SELECT count(*) FROM events WHERE session_id = '{id}'"
            )),
            0
        );
    }
    assert_eq!(
        env.scalar(&format!(
            "SELECT count(*) FROM v_purges WHERE purge_id = {pid} AND sessions_purged = 2 AND events_purged = 6 AND done = 1 AND actor_type = 'cli'"
        )),
        1
    );
    let v = env.json(&["verify"]).data();
    assert_eq!(
        (v["sessions"].as_i64(), v["purged"].as_i64()),
        (Some(2), Some(2))
    );
    let v = env.json(&["verify", &a]).data();
    assert_eq!(v["purged"], 1);
    assert_eq!(v["purged_heads"][0]["events"], 3);
    assert_eq!(
        v["purged_heads"][0]["head_hash"].as_str().unwrap().len(),
        64
    );
    env.json(&["doctor"]).data();
}

#[test]
fn live_sessions_and_parents_of_live_sessions_are_never_purged() {
    let env = TestEnv::new();
    let grand = ended(&env, "a", None);
    let parent = ended(&env, "a", Some(&grand));
    let child = env.create_with(&["--title", "live child", "--app", "a", "--parent", &parent]);
    let lone = ended(&env, "a", None);
    let plan = env.json(&["purge", "--app", "a", "--dry-run"]).data();
    assert_eq!(plan["sessions"], 1);
    assert_eq!(plan["kept_live_descendant"], 2);
    let rep = purge(&env, &["--app", "a"]);
    assert_eq!(rep["sessions"], 1);
    for id in [&grand, &parent, &child] {
        env.json(&["session", "show", id]).data();
    }
    assert_error(
        &env.json(&["session", "show", &lone]),
        "SESSION_NOT_FOUND",
        3,
    );
    // The triggers refuse a tombstone for a parent of a live session too.
    let err = env
        .try_batch(&raw_tombstone_sql(&parent, 77))
        .expect_err("a tombstone for a parent of a live session was written");
    assert!(
        err.contains("a tombstone must name an ended session"),
        "{err}"
    );
}

#[test]
fn keep_last_keeps_the_newest_ended_sessions_of_each_app() {
    let env = TestEnv::new();
    let a: Vec<String> = (0..5).map(|_| ended(&env, "a", None)).collect();
    let b = ended(&env, "b", None);
    let rep = purge(&env, &["--keep-last", "2"]);
    assert_eq!(rep["sessions"], 3);
    assert_eq!(rep["plan"]["kept_newest"], 3);
    for (i, id) in a.iter().enumerate() {
        let r = env.json(&["session", "show", id]);
        assert_eq!(r.code == 0, i >= 3, "session {i} of 5");
    }
    env.json(&["session", "show", &b]).data();
}

#[test]
fn a_purged_parent_is_named_as_purged_by_its_remaining_children() {
    let env = TestEnv::new();
    let parent = ended(&env, "a", None);
    let child = ended(&env, "b", Some(&parent));
    let rep = purge(&env, &["--app", "a"]);
    assert_eq!(rep["sessions"], 1);
    let pid = rep["purge_id"].clone();
    let show = env.json(&["session", "show", &child]).data();
    assert_eq!(show["session"]["parent_session_id"], parent.as_str());
    let r = show["resolved"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "session")
        .unwrap()
        .clone();
    assert_eq!(
        (r["id"].as_str(), r["state"].as_str()),
        (Some(parent.as_str()), Some("purged"))
    );
    let tree = env.json(&["session", "tree", &child]).data();
    assert_eq!(tree["parent_purged"]["session_id"], parent.as_str());
    assert_eq!(tree["parent_purged"]["purge_id"], pid);
    let human = env.run(&["session", "tree", &child]);
    assert!(
        human
            .stdout
            .contains(&format!("parent {parent} was purged")),
        "{}",
        human.stdout
    );
    env.json(&["verify"]).data();
    env.json(&["doctor"]).data();
    // The child goes later, by itself.
    assert_eq!(purge(&env, &["--app", "b"])["sessions"], 1);
    env.json(&["verify"]).data();
}

#[test]
fn export_then_purge_then_import_restores_the_sessions_byte_identically() {
    let env = TestEnv::new();
    let ids: Vec<String> = (0..3).map(|_| ended(&env, "a", None)).collect();
    let run_owner = env.create_with(&["--title", "with a run", "--app", "a"]);
    let run = env.json(&["run", "create", &run_owner]).data();
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    env.json(&["run", "start", &run_id]).data();
    env.json(&["run", "complete", &run_id]).data();
    env.json(&[
        "session",
        "checkpoint",
        &run_owner,
        "--step",
        "snap",
        "--state",
        r#"{"k":1}"#,
    ])
    .data();
    env.json(&["session", "complete", &run_owner, "--result", "ok"])
        .data();
    let before = env.dir.path().join("before.jsonl");
    env.json(&[
        "export",
        "--format",
        "jsonl",
        "--out",
        before.to_str().unwrap(),
    ])
    .data();
    let saved = env.dir.path().join("purged.jsonl");
    let rep = purge(&env, &["--app", "a", "--export", saved.to_str().unwrap()]);
    assert_eq!(rep["sessions"], 4);
    assert_eq!(rep["export"]["sessions"], 4);
    assert_eq!(count(&env, "sessions"), 0);
    assert_eq!(count(&env, "runs"), 0);
    assert_eq!(count(&env, "session_snapshots"), 0);
    assert_eq!(
        std::fs::read(&saved).unwrap(),
        std::fs::read(&before).unwrap()
    );
    let v = env
        .json(&["verify", "--export", saved.to_str().unwrap()])
        .data();
    assert_eq!(v["export_checked"], 4);
    // A tampered export: its own hashes no longer hold; with them left
    // out, it no longer matches its tombstone.
    let text = std::fs::read_to_string(&saved).unwrap();
    let edited = text.replacen("\"s1\"", "\"s2\"", 1);
    let bad = env.dir.path().join("bad.jsonl");
    std::fs::write(&bad, &edited).unwrap();
    let r = env.json(&["verify", "--export", bad.to_str().unwrap()]);
    let d = assert_error(&r, "LEDGER_TAMPERED", 6)["details"].clone();
    assert_eq!(d["problem"], "export_hash", "{d}");
    let blanked = regex::Regex::new(r#""hash":"[0-9a-f]{64}""#)
        .unwrap()
        .replace_all(&edited, r#""hash":"""#)
        .into_owned();
    std::fs::write(&bad, blanked).unwrap();
    let r = env.json(&["verify", "--export", bad.to_str().unwrap()]);
    let d = assert_error(&r, "LEDGER_TAMPERED", 6)["details"].clone();
    assert_eq!(d["problem"], "tombstone", "{d}");
    env.json(&["import", saved.to_str().unwrap()]).data();
    let after = env.dir.path().join("after.jsonl");
    env.json(&[
        "export",
        "--format",
        "jsonl",
        "--out",
        after.to_str().unwrap(),
    ])
    .data();
    // The sessions byte for byte; the audit trail (the purge's record
    // and tombstones) stays and is exported first.
    let after = std::fs::read_to_string(&after).unwrap();
    let (audit, sessions): (Vec<&str>, Vec<&str>) = after
        .lines()
        .partition(|l| l.starts_with(r#"{"format":"logbook.purge.v1""#));
    assert_eq!(audit.len(), 1, "{after}");
    assert_eq!(
        sessions.join("\n") + "\n",
        std::fs::read_to_string(&before).unwrap()
    );
    let v = env.json(&["verify"]).data();
    assert_eq!(
        (v["sessions"].as_i64(), v["purged"].as_i64()),
        (Some(4), Some(0))
    );
    for id in &ids {
        env.json(&["session", "show", id]).data();
    }
    // The restored sessions are new incarnations: purging them again
    // writes new tombstones.
    assert_eq!(purge(&env, &["--app", "a"])["sessions"], 4);
    assert_eq!(count(&env, "tombstones"), 8);
}

/// Raw SQL that tombstones `id` under purge `pid` (a tombstone that tells
/// the truth), on either engine.
pub fn raw_tombstone_sql(id: &str, pid: i64) -> String {
    format!(
        "INSERT INTO tombstones (session_id, insert_seq, purge_id, title, status, app, \
         parent_session_id, created_at_ms, ended_at_ms, events, last_event_id, last_hash, bytes, \
         purged_at_ms) SELECT s.session_id, s.insert_seq, {pid}, s.title, s.status, s.app, \
         s.parent_session_id, s.created_at_ms, s.ended_at_ms, \
         (SELECT count(*) FROM events e WHERE e.session_id = s.session_id), \
         (SELECT e.event_id FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), \
         (SELECT e.hash FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), \
         0, 0 FROM sessions s WHERE s.session_id = '{id}'"
    )
}

#[test]
fn raw_sql_deletes_need_a_tombstone_and_a_tombstone_is_recorded() {
    let env = TestEnv::new();
    let id = ended(&env, "a", None);
    for sql in [
        format!("DELETE FROM events WHERE session_id = '{id}'"),
        format!("DELETE FROM session_tags WHERE session_id = '{id}'"),
        format!("DELETE FROM session_data WHERE session_id = '{id}'"),
        format!("DELETE FROM sessions WHERE session_id = '{id}'"),
    ] {
        let err = env
            .try_batch(&sql)
            .expect_err("a delete without a tombstone ran");
        assert!(err.contains("logbook: "), "{sql}: {err}");
    }
    assert_eq!(
        env.scalar(&format!(
            "SELECT count(*) FROM events WHERE session_id = '{id}'"
        )),
        3
    );
    // A lying tombstone (wrong event count) is refused.
    let lie = raw_tombstone_sql(&id, 41).replace(
        "(SELECT count(*) FROM events e WHERE e.session_id = s.session_id)",
        "7",
    );
    let err = env
        .try_batch(&lie)
        .expect_err("a lying tombstone was written");
    assert!(err.contains("a tombstone must name"), "{err}");
    // One that tells the truth, then the deletes, in one transaction.
    env.batch(&format!(
        "BEGIN; {}; DELETE FROM idempotency_keys WHERE session_id = '{id}'; \
         DELETE FROM session_tags WHERE session_id = '{id}'; \
         DELETE FROM events WHERE session_id = '{id}'; \
         DELETE FROM session_data WHERE session_id = '{id}'; \
         DELETE FROM sessions WHERE session_id = '{id}'; COMMIT",
        raw_tombstone_sql(&id, 41)
    ));
    assert_eq!(
        env.scalar("SELECT count(*) FROM purges WHERE purge_id = 41 AND actor_type = 'sql'"),
        1
    );
    assert_error(&env.json(&["session", "show", &id]), "SESSION_NOT_FOUND", 3);
    env.json(&["verify"]).data();
    // Tombstones and purge records are never changed or removed.
    for sql in [
        "UPDATE tombstones SET title = 'x'",
        "DELETE FROM tombstones",
        "UPDATE purges SET actor_type = 'cli'",
        "DELETE FROM purges",
    ] {
        let err = env.try_batch(sql).expect_err(sql);
        assert!(err.contains("immutable"), "{sql}: {err}");
    }
    assert_eq!(count(&env, "tombstones"), 1);
    // The next purge gets an id of its own.
    ended(&env, "a", None);
    assert_eq!(purge(&env, &["--app", "a"])["purge_id"], 42);
}

#[test]
fn the_feed_goes_on_across_a_purge_with_no_error_no_repeat_and_no_reused_id() {
    let env = TestEnv::new();
    // A page of the feed from the start, once it holds `n` events: on a
    // server a page stops at the feed's horizon, which another client's
    // open write transaction (another test's, on the same server) can hold
    // back for a moment (docs/postgres.md).
    let first_page = |limit: &str, n: usize| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let page = env.json(&["events", "--limit", limit]).data();
            if page["events"].as_array().unwrap().len() >= n || std::time::Instant::now() >= until {
                return page;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let keep = ended(&env, "keep", None);
    let page = first_page("1000", 3);
    let seen_before = page["events"].as_array().unwrap().len();
    assert_eq!(seen_before, 3);
    // The newest events of the ledger belong to the purged session.
    let gone = ended(&env, "gone", None);
    let mid = first_page("4", 4);
    assert_eq!(mid["events"].as_array().unwrap().len(), 4);
    let cursor = mid["next_cursor"].as_str().unwrap().to_owned();
    let max_before = env.scalar("SELECT max(event_id) FROM events");
    purge(&env, &["--app", "gone"]);
    let next = ended(&env, "next", None);
    let ids: Vec<i64> = env
        .rows(
            &format!("SELECT event_id FROM events WHERE session_id = '{next}' ORDER BY seq"),
            &[],
        )
        .iter()
        .map(|r| r[0].as_i64().unwrap())
        .collect();
    assert!(
        ids[0] > max_before,
        "event id {} reused (max before the purge {max_before})",
        ids[0]
    );
    // Resumed from the cursor, page by page: on a server a page stops at
    // the feed's horizon, which another client's open write transaction
    // can hold back for a moment (docs/postgres.md), so follow the cursor
    // until the three events have come, each once.
    let mut sessions: Vec<String> = Vec::new();
    let mut at = cursor.clone();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while sessions.len() < 3 && std::time::Instant::now() < until {
        let page = env
            .json(&["events", "--after", &at, "--limit", "1000"])
            .data();
        for e in page["events"].as_array().unwrap() {
            sessions.push(e["session_id"].as_str().unwrap().to_owned());
        }
        if let Some(c) = page["next_cursor"].as_str() {
            at = c.to_owned();
        }
        if sessions.len() < 3 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    assert_eq!(
        sessions,
        [next.clone(), next.clone(), next.clone()],
        "after {cursor}"
    );
    let _ = (keep, gone);
}

#[test]
fn a_purge_killed_midway_and_rerun_ends_as_an_uninterrupted_one() {
    let env = TestEnv::new();
    let twin = TestEnv::new();
    let lines = seed_lines(400, 25, "a", 1_700_000_000_000, "completed", 1);
    let keep = seed_lines(3, 3, "b", 1_700_000_000_000, "failed", 2);
    for e in [&env, &twin] {
        seed(e, &lines);
        seed(e, &keep);
    }
    let mut child = env
        .cli(&["purge", "--app", "a", "--yes"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once a batch has committed and before the last.
    let mut killed_at = None;
    for _ in 0..20_000 {
        let n = env.count_or_zero("tombstones");
        if n > 0 && n < 400 {
            child.kill().unwrap();
            killed_at = Some(n);
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    let _ = child.wait();
    let n = killed_at.expect("the purge was not caught midway (it finished first)");
    assert_eq!(count(&env, "tombstones"), n);
    // Whole sessions only: every tombstoned session is gone entirely.
    assert_eq!(
        env.scalar(
            "SELECT count(*) FROM events e JOIN tombstones t ON t.session_id = e.session_id"
        ),
        0
    );
    env.json(&["verify"]).data();
    let rep = purge(&env, &["--app", "a"]);
    assert_eq!(rep["resumed"], true);
    assert_eq!(rep["purge_id"], 1);
    assert_eq!(rep["sessions"].as_i64().unwrap() + n, 400);
    assert_eq!(rep["total"]["sessions_purged"], 400);
    assert_eq!(rep["total"]["events_purged"], 400 * 25);
    let whole = purge(&twin, &["--app", "a"]);
    assert_eq!(whole["sessions"], 400);
    for e in [&env, &twin] {
        assert_eq!(count(e, "purges"), 1);
        assert_eq!(count(e, "tombstones"), 400);
        assert_eq!(count(e, "sessions"), 3);
        assert_eq!(count(e, "events"), 9);
        assert_eq!(
            e.scalar("SELECT count(*) FROM v_purges WHERE done = 1 AND sessions_purged = 400 AND events_purged = 10000"),
            1
        );
        e.json(&["verify"]).data();
    }
    let ids = |e: &TestEnv| {
        e.rows(
            "SELECT session_id, events FROM tombstones ORDER BY session_id",
            &[],
        )
    };
    assert_eq!(ids(&env), ids(&twin));
}

sqlite_only! {
    #[test]
    fn new_files_return_freed_pages_to_the_file_system() {
        let env = TestEnv::new();
        seed(&env, &seed_lines(300, 30, "a", 1_700_000_000_000, "completed", 3));
        assert_eq!(env.scalar("PRAGMA auto_vacuum"), 2);
        let size = |p: &Path| std::fs::metadata(p).unwrap().len();
        env.json(&["doctor"]).data(); // checkpoints the WAL on close
        let before = size(env.path());
        let rep = purge(&env, &["--app", "a"]);
        let space = &rep["space"];
        assert_eq!(space["auto_vacuum"], "incremental");
        assert!(space["free_pages_before"].as_i64().unwrap() > 50, "{space}");
        assert_eq!(space["free_pages_after"], 0);
        assert_eq!(space["vacuum_needed"], Value::Null);
        assert_eq!(env.scalar("PRAGMA freelist_count"), 0);
        let doc = env.json(&["doctor"]).data();
        let after = size(env.path());
        assert!(after * 4 < before, "file {before} → {after} bytes");
        let free = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "free_pages")
            .unwrap()
            .clone();
        assert!(free["detail"].as_str().unwrap().starts_with("0 free page(s)"), "{free}");
    }

    #[test]
    fn an_older_file_keeps_its_free_pages_and_purge_says_a_vacuum_is_needed() {
        let env = TestEnv::new();
        seed(&env, &seed_lines(200, 20, "a", 1_700_000_000_000, "completed", 4));
        // A file made before schema version 7: no auto_vacuum.
        env.batch("PRAGMA auto_vacuum = NONE; VACUUM;");
        assert_eq!(env.scalar("PRAGMA auto_vacuum"), 0);
        let rep = purge(&env, &["--app", "a"]);
        let space = &rep["space"];
        assert_eq!(space["auto_vacuum"], "none");
        let free = space["free_pages_after"].as_i64().unwrap();
        assert!(free > 20, "{space}");
        assert!(space["vacuum_needed"].as_str().unwrap().contains("VACUUM"), "{space}");
        let doc = env.json(&["doctor"]).data();
        let check = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "free_pages")
            .unwrap()
            .clone();
        assert!(check["detail"].as_str().unwrap().contains("auto_vacuum none"), "{check}");
    }
}

#[test]
fn writers_beside_a_purge_see_no_error() {
    writers_beside_a_purge_of(5_000);
}

/// The issue's size: 100,000 sessions (SQLite; 10,000 on a server, whose
/// purge costs round trips per session). Minutes in a debug build, so
/// `.ci/run` runs it on its own: `cargo test --test it -- --ignored
/// writers_beside`.
#[test]
#[ignore = "minutes in a debug build; .ci/run runs it explicitly"]
fn writers_beside_a_purge_of_100k_sessions_see_no_error() {
    writers_beside_a_purge_of(if on_pg() { 10_000 } else { 100_000 });
}

/// 3 writer processes checkpoint their own live sessions, each call a
/// whole `logbook` process, while `purge` removes `n` ended sessions: no
/// writer call fails, every chain verifies; the worst wait is printed.
fn writers_beside_a_purge_of(n: usize) {
    let env = TestEnv::new();
    let chunk = 25_000.min(n);
    for c in 0..n / chunk {
        seed(
            &env,
            &seed_lines(
                chunk,
                3,
                "old",
                1_700_000_000_000,
                "completed",
                100 + c as u32,
            ),
        );
    }
    let live: Vec<String> = (0..3).map(|i| env.create(&format!("writer {i}"))).collect();
    let mut purge = env
        .cli(&["purge", "--app", "old", "--yes"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = live
        .iter()
        .map(|id| {
            let (id, done, db) = (id.clone(), done.clone(), env.db.clone());
            let cmd = move |step: &str| {
                let mut c = std::process::Command::new(bin());
                c.env_clear()
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                    .args(["--db"])
                    .arg(&db)
                    .args(["session", "checkpoint", &id, "--step", step, "--json"]);
                c
            };
            std::thread::spawn(move || {
                let (mut ops, mut failures, mut worst) = (0u64, Vec::new(), 0f64);
                while !done.load(std::sync::atomic::Ordering::SeqCst) {
                    let t = std::time::Instant::now();
                    let out = cmd(&format!("step {ops}")).output().unwrap();
                    worst = worst.max(t.elapsed().as_secs_f64() * 1000.0);
                    ops += 1;
                    if !out.status.success() {
                        failures.push(String::from_utf8_lossy(&out.stdout).into_owned());
                    }
                }
                (ops, failures, worst)
            })
        })
        .collect();
    let mut out = String::new();
    std::io::Read::read_to_string(purge.stdout.as_mut().unwrap(), &mut out).unwrap();
    let status = purge.wait().unwrap();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(status.success(), "{out}");
    assert_eq!(v["data"]["sessions"], n);
    let (mut ops, mut worst) = (0, 0f64);
    for w in writers {
        let (o, failures, wst) = w.join().unwrap();
        assert!(
            failures.is_empty(),
            "writer errors beside the purge: {failures:?}"
        );
        ops += o;
        worst = worst.max(wst);
    }
    assert!(ops >= 3, "the writers did not run beside the purge");
    eprintln!(
        "purge of {n} sessions: {} batches, longest {:.1} ms; 3 writer processes: {ops} checkpoints (each a whole `logbook` process), 0 errors, worst {worst:.1} ms",
        v["data"]["batches"], v["data"]["longest_batch_ms"].as_f64().unwrap()
    );
    for id in &live {
        assert_rev_matches_events(&env, id);
    }
    env.json(&["verify"]).data();
}
