//! Gate, lease and budget verbs as one statement on a server
//! (docs/postgres.md, "One round trip per write"): keyed `gate` open,
//! approve and reject, a new budget within its limits, `lock` (taking a
//! free lease, taking an expired one over or renewing one's own, no key:
//! the token tells a lost reply) and keyed `unlock` are one round trip
//! each; they leave the rows, events and hashes the pipeline leaves on the
//! server and on SQLite; what the statement cannot decide gets the
//! pipeline's answer.

use crate::common::*;
use crate::pg_one_statement::{
    cuts, differential, events_without_ids, keyed, round_trips, server_port, through_proxy, via,
};
use crate::proxy::Proxy;
use logbook::{CreateRun, GateKind, LockRequest, Mutation, OnExceed, SetBudget};
use serde_json::{json, Value};
use std::path::Path;

fn lock_req(ttl_ms: i64) -> LockRequest {
    LockRequest {
        ttl_ms: Some(ttl_ms),
        owner_pid: None,
    }
}

fn tokens(limit: i64) -> SetBudget {
    SetBudget {
        max_tokens: Some(limit),
        ..SetBudget::default()
    }
}

#[test]
fn pg_keyed_gate_budget_and_lease_verbs_are_one_round_trip_each() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    // The first of each statement prepares it (one round trip more).
    let warm = lib_create(&lg, "warm", "a");
    lg.open_gate(&warm, "g", GateKind::UserApproval, &keyed("w1"))
        .unwrap();
    lg.approve_gate(&warm, "g", None, &keyed("w2")).unwrap();
    lg.open_gate(&warm, "a", GateKind::Auto, &keyed("w3"))
        .unwrap();
    lg.set_budget(&warm, tokens(100), &keyed("w4")).unwrap();
    let l = lg
        .lock(&warm, &lock_req(60_000), &Mutation::default())
        .unwrap();
    let renew = Mutation {
        lease: Some(l.token.clone()),
        ..Mutation::default()
    };
    lg.lock(&warm, &lock_req(60_000), &renew).unwrap();
    lg.unlock(&warm, &l.token, &keyed("w5")).unwrap();
    lg.open_gate(&warm, "g", GateKind::StepConfirm, &keyed("w6"))
        .unwrap();
    lg.reject_gate(&warm, "g", "no", true, &keyed("w7"))
        .unwrap();

    let id = lib_create(&lg, "one", "a");
    let one = |what: &str, f: &mut dyn FnMut()| assert_eq!(count(f), 1, "{what}");
    one("gate open, blocking", &mut || {
        let s = lg
            .open_gate(&id, "deploy", GateKind::UserApproval, &keyed("g1"))
            .unwrap();
        assert_eq!(s.value.status.as_str(), "paused");
    });
    one("gate approve", &mut || {
        let s = lg
            .approve_gate(&id, "deploy", Some("ok".into()), &keyed("g2"))
            .unwrap();
        assert_eq!(s.value.status.as_str(), "active");
    });
    one("gate open, auto", &mut || {
        lg.open_gate(&id, "lint", GateKind::Auto, &keyed("g3"))
            .unwrap();
    });
    one("new budget", &mut || {
        let b = lg.set_budget(&id, tokens(1000), &keyed("b1")).unwrap();
        assert_eq!(b.value.max_tokens, Some(1000));
        assert_eq!(b.value.on_exceed, Some(OnExceed::Pause));
    });
    let mut token = String::new();
    one("lock", &mut || {
        let l = lg
            .lock(&id, &lock_req(60_000), &Mutation::default())
            .unwrap();
        assert!(!l.renewed);
        token = l.token;
    });
    one("lock renewed", &mut || {
        let m = Mutation {
            lease: Some(token.clone()),
            ..Mutation::default()
        };
        let l = lg.lock(&id, &lock_req(120_000), &m).unwrap();
        assert!(l.renewed);
        assert_eq!(l.token, token);
    });
    one("unlock", &mut || {
        lg.unlock(&id, &token, &keyed("u1")).unwrap();
    });
    lg.open_gate(&id, "deploy", GateKind::StepConfirm, &keyed("g4"))
        .unwrap();
    one("gate reject", &mut || {
        let s = lg
            .reject_gate(&id, "deploy", "too risky", true, &keyed("g5"))
            .unwrap();
        assert_eq!(s.value.status.as_str(), "cancelled");
        assert_eq!(s.value.end_reason.as_deref(), Some("too risky"));
    });
    assert_eq!(
        event_types(&env, &id),
        [
            "created",
            "gate_opened",
            "paused",
            "gate_approved",
            "resumed",
            "gate_approved",
            "budget_set",
            "lease_acquired",
            "lease_acquired",
            "lease_released",
            "gate_opened",
            "paused",
            "gate_rejected",
            "cancelled",
        ]
    );
    let s = lg.get_session(&id).unwrap();
    assert_eq!(s.rev, 10, "one rev per write");
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// The same gate, budget and lease writes through the one-statement path
/// (keyed, on the server), the pipeline on the server (no keys) and the
/// pipeline on SQLite, at the same times: the same answers, sessions,
/// gates, budget and events (their data built by the server in the same
/// bytes), every hash the library's.
#[test]
fn pg_gate_budget_and_lease_statements_leave_the_rows_the_pipeline_leaves() {
    let env = TestEnv::new();
    differential(&env, 1_782_050_000_000, |lg, st| {
        let (tick, m) = (|| st.tick(), |k: &str| st.m(k));
        let id = lg
            .create_session(logbook::ledger::CreateSession::titled("gates"))
            .unwrap()
            .session_id
            .to_string();
        let mut seen: Vec<Value> = Vec::new();
        let mut push = |v: Value| {
            let mut v = v;
            if let Some(o) = v.as_object_mut() {
                o.remove("session_id");
            }
            seen.push(v);
        };
        let sv = |s: &logbook::Session| {
            let mut v = serde_json::to_value(s).unwrap();
            v.as_object_mut().unwrap().remove("session_id");
            v
        };
        tick();
        push(sv(&lg
            .open_gate(
                &id,
                "deploy \"prod\" \\ ç",
                GateKind::UserApproval,
                &m("g1"),
            )
            .unwrap()));
        tick();
        push(sv(&lg
            .approve_gate(&id, "deploy \"prod\" \\ ç", Some("fine ç".into()), &m("g2"))
            .unwrap()));
        tick();
        push(sv(&lg
            .open_gate(&id, "deploy \"prod\" \\ ç", GateKind::StepConfirm, &m("g3"))
            .unwrap()));
        tick();
        push(sv(&lg
            .approve_gate(&id, "deploy \"prod\" \\ ç", None, &m("g4"))
            .unwrap()));
        tick();
        push(sv(&lg
            .open_gate(&id, "lint", GateKind::Auto, &m("g5"))
            .unwrap()));
        tick();
        let b = lg
            .set_budget(
                &id,
                SetBudget {
                    max_tokens: Some(500),
                    max_duration_ms: Some(9_000),
                    on_exceed: Some(OnExceed::Warn),
                    ..SetBudget::default()
                },
                &m("b1"),
            )
            .unwrap();
        push(serde_json::to_value(&*b).unwrap());
        tick();
        let l = lg
            .lock(&id, &lock_req(30_000), &Mutation::default())
            .unwrap();
        let lease = |l: &logbook::Lease| {
            json!([
                l.pid,
                l.hostname,
                l.acquired_at_ms,
                l.expires_at_ms,
                l.renewed,
                sv(&l.session)
            ])
        };
        push(lease(&l));
        tick();
        let renew = Mutation {
            lease: Some(l.token.clone()),
            ..Mutation::default()
        };
        push(lease(&lg.lock(&id, &lock_req(90_000), &renew).unwrap()));
        tick();
        push(sv(&lg.unlock(&id, &l.token, &m("u1")).unwrap()));
        tick();
        lg.open_gate(&id, "ship", GateKind::UserApproval, &m("g6"))
            .unwrap();
        tick();
        push(sv(&lg
            .reject_gate(&id, "ship", "not today", false, &m("g7"))
            .unwrap()));
        let gates = serde_json::to_value(lg.list_gates(&id).unwrap().gates).unwrap();
        let mut budget = serde_json::to_value(lg.check_budget(&id).unwrap()).unwrap();
        budget.as_object_mut().unwrap().remove("session_id");
        let report = lg.verify(std::slice::from_ref(&id)).unwrap();
        assert_eq!(report.events, 18);
        json!([seen, gates, budget, events_without_ids(lg, &id)])
    });
}

/// What the statement leaves to the pipeline gets the pipeline's answer,
/// with a key as without.
#[test]
fn pg_what_a_gate_budget_or_lease_statement_cannot_decide_gets_the_pipelines_answer() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "rules", "a");
    let code = |r: logbook::Result<logbook::Written<logbook::Session>>| {
        r.unwrap_err().code().as_str().to_owned()
    };
    assert_eq!(
        code(lg.approve_gate(&id, "none", None, &keyed("a0"))),
        "GATE_NOT_FOUND"
    );
    lg.open_gate(&id, "deploy", GateKind::UserApproval, &keyed("o1"))
        .unwrap();
    // The gate paused the session: no gate opens until it is decided.
    assert_eq!(
        code(lg.open_gate(&id, "deploy", GateKind::UserApproval, &keyed("o2"))),
        "SESSION_INVALID_TRANSITION"
    );
    lg.approve_gate(&id, "deploy", None, &keyed("a1")).unwrap();
    assert_eq!(
        code(lg.approve_gate(&id, "deploy", None, &keyed("a2"))),
        "GATE_ALREADY_DECIDED"
    );
    // A replay answers as a replay and writes nothing.
    let again = lg.approve_gate(&id, "deploy", None, &keyed("a1")).unwrap();
    assert!(again.replayed.is_some());
    // A second round of the name: round 2 in the gate and its data.
    lg.open_gate(&id, "deploy", GateKind::Auto, &keyed("o3"))
        .unwrap();
    let rounds: Vec<i64> = lg
        .list_gates(&id)
        .unwrap()
        .gates
        .iter()
        .map(|g| g.round)
        .collect();
    assert_eq!(rounds, [1, 2]);
    // A budget set again merges with the one there (the pipeline).
    lg.set_budget(&id, tokens(1000), &keyed("b1")).unwrap();
    let b = lg
        .set_budget(
            &id,
            SetBudget {
                max_api_calls: Some(3),
                ..SetBudget::default()
            },
            &keyed("b2"),
        )
        .unwrap();
    assert_eq!(
        (b.value.max_tokens, b.value.max_api_calls),
        (Some(1000), Some(3))
    );
    // A new budget that usage is already over: the crossing and its policy.
    let over = lib_create(&lg, "over", "a");
    lg.record_usage(
        &over,
        logbook::RecordUsage {
            input_tokens: Some(50),
            ..logbook::RecordUsage::default()
        },
        &keyed("u1"),
    )
    .unwrap();
    let b = lg.set_budget(&over, tokens(10), &keyed("b3")).unwrap();
    assert!(b.value.exceeded);
    assert_eq!(b.value.session_status, "paused");
    assert_eq!(
        &event_types(&env, &over)[2..],
        ["budget_set", "budget_exceeded", "paused"]
    );
    // A rejection with a run open: the run ends first, with its event.
    let run = lg
        .create_run(&id, CreateRun::default(), &keyed("r1"))
        .unwrap();
    lg.open_gate(&id, "ship", GateKind::UserApproval, &keyed("o4"))
        .unwrap();
    lg.reject_gate(&id, "ship", "no", false, &keyed("x1"))
        .unwrap();
    assert_eq!(
        lg.get_run(run.run_id.as_str()).unwrap().status.as_str(),
        "cancelled"
    );
    let types = event_types(&env, &id);
    assert_eq!(
        &types[types.len() - 3..],
        ["run_cancelled", "gate_rejected", "failed"]
    );
    // Leases: held by another, the wrong token, an expired one to renew.
    let s = lib_create(&lg, "leased", "a");
    let l = lg
        .lock(&s, &lock_req(60_000), &Mutation::default())
        .unwrap();
    let e = lg
        .lock(&s, &lock_req(60_000), &Mutation::default())
        .unwrap_err();
    assert_eq!(e.code().as_str(), "LEASE_HELD");
    let wrong = format!("lease_{}", "1".repeat(64));
    assert_eq!(code(lg.unlock(&s, &wrong, &keyed("k1"))), "LEASE_HELD");
    lg.unlock(&s, &l.token, &keyed("k2")).unwrap();
    assert_eq!(
        code(lg.unlock(&s, &l.token, &keyed("k3"))),
        "LEASE_NOT_FOUND"
    );
    let short = lg.lock(&s, &lock_req(1), &Mutation::default()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let late = Mutation {
        lease: Some(short.token.clone()),
        ..Mutation::default()
    };
    let e = lg.lock(&s, &lock_req(60_000), &late).unwrap_err();
    assert_eq!(e.code().as_str(), "LEASE_NOT_FOUND");
    // A dead lease is taken over (the pipeline names its owner).
    let t = lg
        .lock(&s, &lock_req(60_000), &Mutation::default())
        .unwrap();
    assert_eq!(t.taken_over_from.map(|p| p.reason), Some("expired"));
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// `lock` sends no key: when its reply is lost, the pipeline finds the
/// lease the statement wrote (its token, time and expiry) and answers
/// with it, writing nothing again.
#[test]
fn pg_a_lock_whose_reply_was_lost_is_answered_by_its_lease_and_applied_once() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let id = lib_create(&lg, "lost", "a");
    proxy.cut_after_next(b"session_leases");
    let l = lg
        .lock(&id, &lock_req(60_000), &Mutation::default())
        .unwrap();
    assert_eq!(cuts(&proxy, 1), 1, "the statement's reply was cut");
    assert_eq!(event_types(&env, &id), ["created", "lease_acquired"]);
    assert_eq!(l.session.rev, 2);
    // The token answered is the lease's: it renews and releases.
    let renew = Mutation {
        lease: Some(l.token.clone()),
        ..Mutation::default()
    };
    proxy.cut_after_next(b"session_leases");
    let r = lg.lock(&id, &lock_req(90_000), &renew).unwrap();
    assert_eq!(cuts(&proxy, 2), 2);
    assert!(r.renewed);
    assert_eq!(r.expires_at_ms, r.acquired_at_ms + 90_000);
    lg.unlock(&id, &l.token, &keyed("u1")).unwrap();
    assert_eq!(
        event_types(&env, &id),
        [
            "created",
            "lease_acquired",
            "lease_acquired",
            "lease_released"
        ]
    );
    assert_eq!(lg.get_session(&id).unwrap().rev, 4, "each write once");
}

/// A lock whose reply was lost, and whose lease, expired, another process
/// took over before the retry could look: whether it was applied cannot be
/// told, so the answer is an unknown outcome (STORE_UNAVAILABLE, `outcome`
/// `unknown`), and nothing is written again.
#[test]
fn pg_a_lost_lock_reply_after_a_takeover_is_an_unknown_outcome() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let id = lib_create(&lg, "taken", "a");
    let other = env.ledger();
    proxy.cut_after_next(b"session_leases");
    // The retry's new connection waits while the other process takes over.
    proxy.delay_new(std::time::Duration::from_secs(3));
    let (e, took) = std::thread::scope(|s| {
        let (proxy, id) = (&proxy, &id);
        let taker = s.spawn(move || {
            // Once the lock was applied (its reply cut) and its lease (1 ms)
            // has expired: a takeover.
            assert_eq!(cuts(proxy, 1), 1, "the statement's reply was cut");
            std::thread::sleep(std::time::Duration::from_millis(20));
            other.lock(id, &lock_req(60_000), &Mutation::default())
        });
        let e = lg.lock(id, &lock_req(1), &Mutation::default());
        (e, taker.join().unwrap())
    });
    let e = e.unwrap_err();
    assert_eq!(e.code().as_str(), "STORE_UNAVAILABLE", "{e}");
    assert_eq!(e.details()["outcome"], "unknown", "{e}");
    let took = took.unwrap();
    assert_eq!(took.taken_over_from.map(|p| p.reason), Some("expired"));
    assert_eq!(
        event_types(&env, &id),
        ["created", "lease_acquired", "lease_taken_over"]
    );
}
