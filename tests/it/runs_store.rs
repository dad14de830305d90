//! Runs below the CLI: the library round-trips runs through their JSON
//! maps, every run and budget statement prepares and the hot ones are never
//! re-prepared, and a V2 database upgrades to runs with its rows intact
//! (CASES C25 for V3).

use crate::common::*;
use crate::runs::create_run;
use serde_json::json;

#[test]
fn library_round_trips_runs_through_json_maps() {
    use logbook::{CreateRun, Mutation, Run, RunStatus, RunUsageDelta};
    let env = TestEnv::new();
    let l = env.ledger();
    let s = l
        .create_session(logbook::CreateSession::titled("lib"))
        .unwrap();
    let id = s.session_id.to_string();
    let m = Mutation::default();
    let req = CreateRun {
        input: Some(json!({"messages": [{"role": "user", "content": "token=abcdef123456"}]})),
        metadata: None,
    };
    let run = l.create_run(&id, req, &m).unwrap();
    assert!(run.input.as_ref().unwrap().get().contains("[REDACTED]"));
    let rid = run.run_id.to_string();
    l.start_run(&rid, &m).unwrap();
    let delta = RunUsageDelta {
        input_tokens: Some(100),
        output_tokens: Some(50),
        api_calls: None,
    };
    l.record_run_usage(&rid, delta, &m).unwrap();
    let run = l.increment_turn(&rid, &m).unwrap();
    let text = run.to_json().unwrap();
    assert_eq!(Run::from_json(&text).unwrap().to_json().unwrap(), text);
    assert_eq!(l.active_run(&id).unwrap().unwrap().run_id, run.run_id);
    assert_eq!(l.list_runs(&id, &[RunStatus::Running]).unwrap().len(), 1);
    assert!(l
        .list_runs(&id, &[RunStatus::Completed])
        .unwrap()
        .is_empty());
    let e = l.start_run("run_0123456789abcdef", &m).unwrap_err();
    assert_eq!(e.code(), logbook::ErrorCode::RunNotFound);
    assert_eq!(l.get_session(&id).unwrap().usage.output_tokens, 50);
}

// rusqlite's statement cache, and a V2 SQLite file.
sqlite_only! {
/// Every runs/budgets SQL const prepares, and the hot ones stay prepared
/// across changing bindings (see `hot_statements_are_never_reprepared`).
#[test]
fn run_statements_prepare_and_are_never_reprepared() {
    use logbook::store::sqlite::sql::{budgets as b, runs as r};
    use rusqlite::{params, StatementStatus};
    let env = TestEnv::new();
    let s = env.create("a");
    let runs: Vec<String> = (0..3).map(|_| create_run(&env, &s, &[])).collect();
    let c = env.sql();
    for sql in r::ALL.iter().chain(b::ALL) {
        c.prepare(sql).unwrap_or_else(|e| panic!("{e}: {sql}"));
    }
    for sql in [
        r::SELECT_RUN,
        r::SELECT_RUNNING_RUN,
        r::SELECT_RUNS_OF_SESSION,
        r::SELECT_OPEN_RUNS_OF_SESSION,
        b::SELECT_SESSION_STATE,
        b::SELECT_BUDGET,
    ] {
        for i in 0..6 {
            let key = if sql.contains("run_id = ?1") {
                runs[i % 3].clone()
            } else {
                s.clone()
            };
            let mut st = c.prepare_cached(sql).unwrap();
            let mut rows = st.query(params![key]).unwrap();
            while rows.next().unwrap().is_some() {}
        }
        let st = c.prepare_cached(sql).unwrap();
        assert_eq!(
            st.get_status(StatementStatus::RePrepare),
            0,
            "re-prepared: {sql}"
        );
    }
    for sql in [
        r::UPDATE_RUN_START,
        r::UPDATE_RUN_TURN,
        r::UPDATE_RUN_CANCEL,
        r::UPDATE_RUN_TIMEOUT,
    ] {
        for i in 0..5 {
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            c.prepare_cached(sql)
                .unwrap()
                .execute(params![runs[i % 3], 1_000 + i as i64])
                .unwrap();
            c.execute_batch("ROLLBACK").unwrap();
        }
        let st = c.prepare_cached(sql).unwrap();
        assert_eq!(
            st.get_status(StatementStatus::RePrepare),
            0,
            "re-prepared: {sql}"
        );
    }
}

/// C25 for V3: a V2 database upgrades with its rows intact; runs then work
/// on its sessions and their chains continue.
#[test]
fn a_v2_database_upgrades_to_runs_and_keeps_its_rows() {
    let env = TestEnv::new();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v2.db"),
        env.path(),
    )
    .unwrap();
    let dump = |c: &rusqlite::Connection| -> String {
        let mut st = c
            .prepare("SELECT session_id || status || rev || updated_at_ms FROM sessions ORDER BY insert_seq")
            .unwrap();
        let mut v: Vec<String> = st
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut st = c
            .prepare("SELECT event_id || session_id || seq || type || hex(hash) FROM events ORDER BY event_id")
            .unwrap();
        v.extend(
            st.query_map([], |r| r.get::<_, String>(0))
                .unwrap()
                .map(Result::unwrap),
        );
        v.join("\n")
    };
    let before = dump(&env.sql());
    assert!(!before.is_empty());
    assert_eq!(env.json(&["verify"]).code, 0);
    let c = env.sql();
    assert_eq!(dump(&c), before);
    let (ver, hist, ic): (i64, i64, String) = c
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT max(version) FROM refinery_schema_history),
                    (SELECT integrity_check FROM pragma_integrity_check)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert_eq!(
        (ver, hist, ic.as_str()),
        (
            logbook::store::LATEST_VERSION,
            logbook::store::LATEST_VERSION,
            "ok"
        )
    );
    let active: String = c
        .query_row(
            "SELECT session_id FROM sessions WHERE status = 'paused' LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    // Runs live in any non-terminal session, paused included.
    let r = create_run(&env, &active, &[]);
    env.json(&["run", "start", &r]).data();
    env.json(&["run", "usage", &r, "--input-tokens", "5"])
        .data();
    env.json(&["run", "complete", &r]).data();
    env.json(&["session", "budget", &active, "--max-tokens", "100"])
        .data();
    let done: String = c
        .query_row(
            "SELECT session_id FROM sessions WHERE status = 'completed'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_error(
        &env.json(&["run", "create", &done]),
        "SESSION_INVALID_TRANSITION",
        5,
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}
}
