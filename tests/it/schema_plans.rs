//! Query plans as a public interface: every `session list` filter, in both
//! orders, and every one-session read walks an index with no sort and no
//! temp B-tree, so its cost does not grow with the database.

use crate::common::*;
use logbook::{ListSessions, SessionStatus};

/// Every list filter, in both orders, walks an index with no temp B-tree.
#[test]
fn every_list_filter_uses_an_index_and_no_sort() {
    let env = TestEnv::new();
    let parent = env.create("p");
    let l = env.ledger();
    let cursor = {
        // A real cursor of each order, so the keyset condition is planned too.
        for i in 0..3 {
            env.create(&format!("s{i}"));
        }
        let c = |updated: bool| {
            l.list_sessions(&ListSessions {
                limit: Some(1),
                order_updated: updated,
                ..Default::default()
            })
            .unwrap()
            .next_cursor
            .unwrap()
        };
        [c(false), c(true)]
    };
    let base = ListSessions {
        limit: Some(20),
        ..Default::default()
    };
    let filters: Vec<(&str, ListSessions)> = vec![
        ("none", base.clone()),
        (
            "status",
            ListSessions {
                statuses: vec![SessionStatus::Active],
                ..base.clone()
            },
        ),
        (
            "statuses",
            ListSessions {
                statuses: vec![SessionStatus::Active, SessionStatus::Paused],
                ..base.clone()
            },
        ),
        (
            "app",
            ListSessions {
                app: Some("a".into()),
                ..base.clone()
            },
        ),
        (
            "agent",
            ListSessions {
                agent_id: Some("ag".into()),
                ..base.clone()
            },
        ),
        (
            "tag",
            ListSessions {
                tag: Some("t".into()),
                ..base.clone()
            },
        ),
        (
            "parent",
            ListSessions {
                parent: Some(parent.clone()),
                ..base.clone()
            },
        ),
        (
            "since_until",
            ListSessions {
                since_ms: Some(1),
                until_ms: Some(i64::MAX),
                ..base.clone()
            },
        ),
        (
            "all",
            ListSessions {
                statuses: vec![SessionStatus::Active],
                app: Some("a".into()),
                agent_id: Some("g".into()),
                tag: Some("t".into()),
                parent: Some(parent.clone()),
                since_ms: Some(1),
                until_ms: Some(i64::MAX),
                ..base.clone()
            },
        ),
    ];
    for (name, f) in filters {
        for (i, updated) in [false, true].into_iter().enumerate() {
            for with_cursor in [false, true] {
                let q = ListSessions {
                    order_updated: updated,
                    cursor: with_cursor.then(|| cursor[i].clone()),
                    ..f.clone()
                };
                let plan = l.explain_list(&q).unwrap();
                let text = plan.join(" | ");
                assert!(
                    !text.contains("TEMP B-TREE"),
                    "{name} updated={updated}: {text}"
                );
                let first = &plan[0];
                assert!(
                    first.contains("USING INDEX")
                        || first.contains("USING COVERING INDEX")
                        || first.contains("USING PRIMARY KEY"),
                    "{name} updated={updated}: {text}"
                );
                assert!(
                    !text.contains("SCAN s\n")
                        && !plan.iter().any(|p| p == "SCAN s" || p == "SCAN t"),
                    "{name}: {text}"
                );
                if updated {
                    assert!(first.contains("sessions_by_updated"), "{name}: {text}");
                }
            }
        }
    }
}

/// Every statement that reads one session's rows finds them through an index
/// and sorts nothing: a temp B-tree costs its own page cache (~20 page
/// faults per CLI process, the `session show` target), and a scan
/// grows with the database.
#[test]
fn one_session_reads_use_an_index_and_no_temp_btree() {
    let env = TestEnv::new();
    env.create("t");
    let c = env.sql();
    use logbook::store::sqlite::sql::{
        events as e, retention as t, runs as r, sessions as s, workflow as w,
    };
    for sql in [
        t::PURGED_CHILDREN,
        w::SELECT_SNAPSHOT_RECORD,
        s::SELECT_SESSION,
        s::SELECT_SESSION_DATA,
        s::SELECT_CHECKPOINT,
        s::SELECT_STATUS_REV,
        s::SELECT_REFS,
        e::SELECT_EVENTS,
        e::SELECT_LATEST_EVENT,
        e::SELECT_NEXT_EVENT,
        w::SELECT_PENDING_GATE,
        w::SELECT_LATEST_GATE,
        w::SELECT_GATES,
        w::SELECT_LEASE,
        w::SELECT_CHILDREN,
        w::SELECT_SNAPSHOTS,
        w::SELECT_SNAPSHOT,
        w::SELECT_LATEST_SNAPSHOT,
        r::SELECT_RUN,
        r::SELECT_RUNS_OF_SESSION,
        r::SELECT_RUNNING_RUN,
        r::SELECT_OPEN_RUNS_OF_SESSION,
    ] {
        let plan = query_plan(&c, sql);
        let text = plan.join(" | ");
        assert!(!text.contains("TEMP B-TREE"), "{sql}\n{text}");
        // The list of ids given (json_each of a parameter) is no table.
        assert!(
            plan.iter()
                .all(|p| !p.starts_with("SCAN ") || p.starts_with("SCAN json_each")),
            "{sql}\n{text}"
        );
    }
}

/// No write statement opens an ephemeral table (a temporary B-tree): an
/// `INSERT … SELECT` into a table with triggers buffers its rows through
/// one on every call, with its own page cache (as a checkpoint's snapshot
/// insert did). Checked on the compiled program (`EXPLAIN`), opcode by
/// opcode.
#[test]
fn write_statements_open_no_ephemeral_table() {
    let env = TestEnv::new();
    env.create("t");
    let c = env.sql();
    use logbook::store::sqlite::sql::{
        budgets as b, events as e, runs as r, sessions as s, transfer as x, workflow as w,
    };
    // Every verb's statements; not a purge's, whose triggers delete a
    // session's rows through ephemeral tables by design (a rare, bulk
    // write).
    for sql in [
        b::INSERT_BUDGET,
        b::UPDATE_BUDGET_LIMITS,
        b::UPDATE_BUDGET_EXCEEDED,
        b::UPDATE_BUDGET_RESET,
        s::INSERT_SESSION,
        s::INSERT_SESSION_DATA,
        s::INSERT_TAG,
        s::INSERT_REF,
        e::INSERT_EVENT,
        e::INSERT_KEY,
        r::INSERT_RUN,
        r::UPDATE_RUN_START,
        r::UPDATE_RUN_USAGE,
        r::UPDATE_RUN_TURN,
        r::UPDATE_RUN_COMPLETE,
        r::UPDATE_RUN_FAIL,
        r::UPDATE_RUN_CANCEL,
        r::UPDATE_RUN_TIMEOUT,
        w::UPDATE_CONTEXT,
        w::SELECT_SNAPSHOT_CONTEXT,
        w::INSERT_SNAPSHOT,
        w::INSERT_GATE,
        w::UPDATE_GATE_DECIDE,
        w::DELETE_LEASE,
        x::INSERT_SNAPSHOT_IMPORT,
    ] {
        let mut st = c.prepare(&format!("EXPLAIN {sql}")).unwrap();
        let nulls = vec![rusqlite::types::Value::Null; st.parameter_count()];
        let ops: Vec<String> = st
            .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(1))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(!ops.is_empty(), "{sql}");
        assert!(
            !ops.iter().any(|o| o == "OpenEphemeral"),
            "{sql}\n{}",
            ops.join(" ")
        );
    }
}
