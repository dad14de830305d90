//! `session show` on a server is one statement (docs/postgres.md, "Reads"):
//! one round trip, no BEGIN and COMMIT, and the view it reads is the one
//! the separate reads give: events (with runs, data and details), the
//! parent's state, children by status, children a purge removed, the gate
//! the session waits on and its lease.

use crate::common::*;
use crate::pg_one_statement::{keyed, round_trips, through_proxy};
use logbook::ledger::CreateSession;
use logbook::{AppendEvent, CreateRun, GateKind, LockRequest, Mutation};
use serde_json::{json, Value};

fn child(lg: &logbook::Ledger, parent: &str, title: &str) -> String {
    lg.create_session(CreateSession {
        parent_session_id: Some(parent.to_owned()),
        ..CreateSession::titled(title)
    })
    .unwrap()
    .session_id
    .to_string()
}

fn events_json(events: &[logbook::Event]) -> Value {
    serde_json::to_value(events).unwrap()
}

#[test]
fn pg_show_is_one_round_trip_and_reads_every_part() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let parent = lib_create(&lg, "parent", "a");
    let id = child(&lg, &parent, "shown");
    let run = lg
        .create_run(&id, CreateRun::default(), &keyed("r1"))
        .unwrap();
    lg.start_run(run.run_id.as_str(), &Mutation::default())
        .unwrap();
    lg.checkpoint(
        &id,
        cp("step one", Some("a \"note\" ç")),
        &Mutation::default(),
    )
    .unwrap();
    let ev = AppendEvent {
        event_type: "x.tool".to_owned(),
        detail: None,
        data: Some(json!({"k": [1, null, "é"]})),
    };
    lg.append_event(&id, ev, &Mutation::default()).unwrap();
    // Children: one completed, one active, one purged.
    let done = child(&lg, &id, "done");
    lg.complete(&done, "ok", &Mutation::default()).unwrap();
    child(&lg, &id, "working");
    let gone = child(&lg, &id, "gone");
    lg.cancel(&gone, "not needed", &Mutation::default())
        .unwrap();
    env.json(&["purge", "--session", &gone, "--yes"]).data();
    let lease = lg
        .lock(&id, &LockRequest::default(), &Mutation::default())
        .unwrap();
    let holder = Mutation {
        lease: Some(lease.token.clone()),
        ..Mutation::default()
    };
    lg.open_gate(&id, "deploy", GateKind::UserApproval, &holder)
        .unwrap();

    // The first of the statement prepares it (one round trip more).
    lg.show_session(&id).unwrap();
    let mut view = None;
    assert_eq!(
        round_trips(&proxy, || view = Some(lg.show_session(&id).unwrap())),
        1,
        "show"
    );
    let view = view.unwrap();
    assert_eq!(view.session.session_id.as_str(), id);
    assert_eq!(view.session.status.as_str(), "paused", "the gate pauses it");
    assert_eq!(
        events_json(&view.events),
        events_json(&lg.session_events(&id, None, None).unwrap().events)
    );
    let types: Vec<&str> = view.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "created",
            "run_created",
            "run_started",
            "checkpoint",
            "x.tool",
            "lease_acquired",
            "gate_opened",
            "paused"
        ]
    );
    assert_eq!(view.events[1].run_id.as_deref(), Some(run.run_id.as_str()));
    let resolved = serde_json::to_value(&view.resolved).unwrap();
    assert_eq!(
        resolved,
        json!([{"kind": "session", "id": parent, "state": "present"}])
    );
    let children = serde_json::to_value(view.children).unwrap();
    assert_eq!(
        children,
        json!({"total": 2, "pending": 0, "active": 1, "paused": 0, "completed": 1,
               "failed": 0, "cancelled": 0})
    );
    assert_eq!(view.purged_children.total, 1);
    assert_eq!(view.purged_children.purges.len(), 1);
    let gate = view.blocking_gate.expect("the pending gate");
    assert_eq!((gate.name.as_str(), gate.round), ("deploy", 1));
    let l = view.lease.expect("the lease");
    assert_eq!(
        (l.pid, l.expires_at_ms, l.live),
        (lease.pid, lease.expires_at_ms, true)
    );

    // A session with no parent, child, gate or lease.
    let bare = lib_create(&lg, "bare", "a");
    let v = lg.show_session(&bare).unwrap();
    assert!(v.resolved.is_empty() && v.blocking_gate.is_none() && v.lease.is_none());
    assert_eq!((v.children.total, v.purged_children.total), (0, 0));
    assert_eq!(v.events.len(), 1);

    // A terminal session has no blocking gate (its gate row stays).
    lg.cancel(&id, "stop", &holder).unwrap();
    assert!(lg.show_session(&id).unwrap().blocking_gate.is_none());
    // A missing session: SESSION_NOT_FOUND, and a purged one says so.
    let e = lg.show_session("ses_0000000000000000").unwrap_err();
    assert_eq!(e.code().as_str(), "SESSION_NOT_FOUND");
    let e = lg.show_session(&gone).unwrap_err();
    assert_eq!(e.code().as_str(), "SESSION_NOT_FOUND");
    assert!(e.to_string().contains("purge"), "{e}");
}

/// The session's part of `show`'s statement is computed once, not once
/// per event: the plan scans its CTE, and the session's row is read by one
/// index scan however long the timeline.
#[test]
fn pg_show_reads_the_session_once_however_many_events() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "long", "a");
    for i in 0..40 {
        lg.checkpoint(&id, cp(&format!("s{i}"), None), &Mutation::default())
            .unwrap();
    }
    let sql = format!(
        "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) {}",
        logbook::store::postgres::sql::show::SELECT_SHOW
    );
    let mut c = env.pg_client();
    let plan: Vec<String> = c
        .query(sql.as_str(), &[&id])
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let text = plan.join("\n");
    assert!(text.contains("CTE Scan on x"), "{text}");
    let sessions_scan = plan
        .iter()
        .find(|l| l.contains("on sessions s"))
        .expect("the session's scan");
    assert!(sessions_scan.contains("loops=1)"), "{text}");
    assert_eq!(lg.show_session(&id).unwrap().events.len(), 41);
}
