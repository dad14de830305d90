//! Operator views (docs/design.md, "Operator access") and a plain SQLite reader beside writers
//! (docs/design.md, "Operator access").

use crate::common::*;
use serde_json::json;
use std::process::{Command, Stdio};

/// The dashboard queries docs/schema.md recommends: each filter in both
/// orders, with the index that must serve it. None may sort in a temp
/// B-tree.
const DASHBOARD: &[(&str, &str)] = &[
    ("SELECT * FROM v_sessions WHERE status = 'active' ORDER BY created_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_status"),
    ("SELECT * FROM v_sessions WHERE app = 'a' ORDER BY created_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_app"),
    ("SELECT * FROM v_sessions WHERE status = 'active' AND app = 'a' ORDER BY created_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_status_app"),
    ("SELECT * FROM v_sessions WHERE agent_id = 'g' ORDER BY created_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_agent"),
    ("SELECT * FROM v_sessions WHERE parent_session_id = 'ses_0000000000000001' ORDER BY created_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_parent"),
    ("SELECT * FROM v_sessions WHERE created_at_ms >= 0 AND created_at_ms < 9999999999999 ORDER BY created_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_created"),
    ("SELECT s.* FROM session_tags t JOIN v_sessions s ON s.insert_seq = t.insert_seq WHERE t.tag = 'x' ORDER BY t.created_at_ms DESC, t.insert_seq DESC LIMIT 20", "PRIMARY KEY (tag=?)"),
    ("SELECT * FROM v_sessions ORDER BY updated_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_updated"),
    ("SELECT * FROM v_sessions WHERE updated_at_ms >= 0 AND updated_at_ms < 9999999999999 ORDER BY updated_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_updated"),
    ("SELECT * FROM v_sessions WHERE +status = 'active' ORDER BY updated_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_updated"),
    ("SELECT * FROM v_sessions WHERE +app = 'a' ORDER BY updated_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_updated"),
    ("SELECT * FROM v_sessions WHERE +agent_id = 'g' ORDER BY updated_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_updated"),
    ("SELECT * FROM v_sessions WHERE +parent_session_id = 'ses_0000000000000001' ORDER BY updated_at_ms DESC, insert_seq DESC LIMIT 20", "sessions_by_updated"),
    ("SELECT * FROM v_events WHERE session_id = 'ses_0000000000000001' ORDER BY seq", "events_by_session_seq"),
    ("SELECT * FROM v_events WHERE event_id > 100 ORDER BY event_id LIMIT 50", "INTEGER PRIMARY KEY (rowid>?)"),
    ("SELECT * FROM v_runs WHERE session_id = 'ses_0000000000000001'", "runs_by_session"),
];

// EXPLAIN QUERY PLAN is SQLite's.
sqlite_only! {
#[test]
fn every_dashboard_filter_is_served_by_an_index_without_a_sort() {
    let env = TestEnv::new();
    let s = env.create_with(&["--title", "t", "--app", "a", "--tag", "x"]);
    env.json(&["session", "checkpoint", &s, "--step", "one"]);
    let c = env.sql();
    for (q, index) in DASHBOARD {
        let plan = query_plan(&c, q).join("\n");
        assert!(plan.contains(index), "{q}\n{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{q}\n{plan}");
        assert!(
            !plan
                .lines()
                .any(|l| l.starts_with("SCAN s") && !l.contains("USING INDEX")),
            "{q}\n{plan}"
        );
    }
}
}

#[test]
fn views_hold_the_documented_values() {
    let env = TestEnv::new();
    let s = env.create_with(&["--title", "ship", "--app", "billing", "--agent", "g7"]);
    env.json(&["session", "checkpoint", &s, "--step", "one"]);
    env.json(&[
        "session",
        "usage",
        &s,
        "--input-tokens",
        "100",
        "--output-tokens",
        "20",
        "--api-calls",
        "3",
    ]);
    let run = env.json(&["run", "create", &s]).data()["run_id"]
        .as_str()
        .unwrap()
        .to_owned();
    env.json(&["run", "start", &run]);
    env.json(&[
        "run",
        "usage",
        &run,
        "--input-tokens",
        "5",
        "--output-tokens",
        "1",
    ]);
    env.json(&["run", "complete", &run]);
    env.json(&["session", "complete", &s, "--result", "done"]);
    let f = env.create_with(&["--title", "broken", "--app", "billing"]);
    env.json(&["session", "fail", &f, "--reason", "no"]);
    let row = env
        .rows(
            "SELECT status, rev, event_count, total_tokens, api_calls, last_event_type,
                    CASE WHEN last_event_at_ms = updated_at_ms THEN 1 ELSE 0 END,
                    CASE WHEN elapsed_ms = ended_at_ms - created_at_ms THEN 1 ELSE 0 END
             FROM v_sessions WHERE session_id = $1",
            &[&s],
        )
        .remove(0);
    let events = env.rows("SELECT count(*) FROM events WHERE session_id = $1", &[&s]);
    assert_eq!(
        row,
        [
            json!("completed"),
            row[1].clone(),
            events[0][0].clone(),
            json!(126),
            json!(3),
            json!("completed"),
            json!(1),
            json!(1)
        ]
    );
    let ev = env.rows(
        "SELECT title, app, agent_id FROM v_events WHERE session_id = $1 AND seq = 0",
        &[&s],
    );
    assert_eq!(ev[0], [json!("ship"), json!("billing"), json!("g7")]);
    let r = env.rows(
        "SELECT status, total_tokens, app FROM v_runs WHERE run_id = $1",
        &[&run],
    );
    assert_eq!(r[0], [json!("completed"), json!(6), json!("billing")]);
    let daily = env.rows(
        "SELECT CAST(sum(sessions) AS BIGINT), CAST(sum(completions) AS BIGINT),
                CAST(sum(failures) AS BIGINT), CAST(sum(tokens) AS BIGINT)
         FROM v_daily WHERE app = 'billing'",
        &[],
    );
    assert_eq!(daily[0], [json!(2), json!(1), json!(1), json!(126)]);
    if on_pg() {
        return;
    }
    // Stock sqlite3 reads the views too (the shell is required: .ci/run
    // installs it).
    let out = Command::new("sqlite3")
        .arg(env.path())
        .arg("SELECT count(*) FROM v_sessions; SELECT count(*) FROM v_daily;")
        .output()
        .expect("the sqlite3 shell is required (.ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2\n1\n");
}

/// Python's sqlite3 module reads `v_sessions` in a tight loop while 8
/// writer processes commit checkpoints: the reader never errors and never
/// sees a half-applied mutation (each session's rev equals its event count,
/// as every mutation here appends exactly one event), and no writer gets
/// STORE_BUSY.
#[test]
fn a_plain_reader_beside_8_writers_never_sees_half_a_mutation() {
    if !on_pg()
        && Command::new("python3")
            .arg("-c")
            .arg("import sqlite3")
            .status()
            .map_or(true, |s| !s.success())
    {
        panic!("python3 with its sqlite3 module is required (.ci/run installs it)");
    }
    let env = TestEnv::new();
    let sessions: Vec<String> = (0..8).map(|i| env.create(&format!("s{i}"))).collect();
    let stop = env.dir.path().join("stop");
    let script = r#"
import sqlite3, sys, os
db, stop = sys.argv[1], sys.argv[2]
c = sqlite3.connect(db, timeout=30)
reads = bad = 0
while not os.path.exists(stop):
    for sid, rev, n in c.execute("SELECT session_id, rev, event_count FROM v_sessions"):
        if rev != n:
            bad += 1
    reads += 1
print(reads, bad)
"#;
    // On PostgreSQL the plain reader is a client of the server, in a loop
    // of its own (one statement, one snapshot, as Python's autocommit).
    let pg_reader = on_pg().then(|| {
        let mut c = env.pg_client();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut reads, mut bad) = (0u64, 0u64);
            while !stop.exists() {
                for r in c
                    .query("SELECT rev, event_count FROM v_sessions", &[])
                    .unwrap()
                {
                    if r.get::<_, i64>(0) != r.get::<_, i64>(1) {
                        bad += 1;
                    }
                }
                reads += 1;
            }
            vec![reads, bad]
        })
    });
    let reader = (!on_pg()).then(|| {
        Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(env.path())
            .arg(&stop)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    });
    let writers: Vec<_> = sessions
        .iter()
        .map(|s| {
            let mut cmds = Vec::new();
            for k in 0..25 {
                let mut c = env.command();
                c.arg("--db").arg(env.path()).args([
                    "session",
                    "checkpoint",
                    s,
                    "--step",
                    &format!("k{k}"),
                    "--json",
                ]);
                cmds.push(c);
            }
            std::thread::spawn(move || {
                cmds.into_iter()
                    .map(|mut c| c.output().unwrap())
                    .filter(|o| o.status.code() != Some(0))
                    .count()
            })
        })
        .collect();
    let failed: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
    std::fs::write(&stop, "").unwrap();
    let nums: Vec<u64> = if let Some(r) = pg_reader {
        r.join().unwrap()
    } else {
        let out = reader.unwrap().wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "reader failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        text.split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect()
    };
    assert!(nums[0] > 0, "the reader never read");
    assert_eq!(nums[1], 0, "half-applied mutations seen");
    assert_eq!(failed, 0, "writers failed");
    for s in &sessions {
        assert_eq!(assert_rev_matches_events(&env, s), 26);
    }
}
