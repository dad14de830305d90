//! Library-level tests: the state machine against a model, idempotency, and
//! the list cursor under concurrent change (CASES C12), walked through the
//! library and through `session list`.

use crate::common::{lib_create, listed, TestEnv};
use logbook::*;
use proptest::prelude::*;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// A ledger on a fresh database of the binary's backend (the env keeps
/// it).
fn ledger() -> (TestEnv, Ledger) {
    crate::common::fresh_ledger()
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Start,
    Pause,
    Resume,
    Checkpoint,
    Complete,
    Fail,
    Cancel,
    Event,
    StaleCheckpoint,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Start),
        Just(Op::Pause),
        Just(Op::Resume),
        Just(Op::Checkpoint),
        Just(Op::Complete),
        Just(Op::Fail),
        Just(Op::Cancel),
        Just(Op::Event),
        Just(Op::StaleCheckpoint),
    ]
}

/// The model: status and rev; what each op should do.
fn model(status: SessionStatus, op: Op) -> Option<SessionStatus> {
    use SessionStatus::*;
    match (op, status) {
        (Op::Start, Pending) => Some(Active),
        (Op::Pause, Active) => Some(Paused),
        (Op::Resume, Paused) => Some(Active),
        (Op::Checkpoint, Active) => Some(Active),
        (Op::Complete, Active) => Some(Completed),
        (Op::Fail, Pending | Active | Paused) => Some(Failed),
        (Op::Cancel, Pending | Active | Paused) => Some(Cancelled),
        (Op::Event, Pending | Active | Paused) => Some(status),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn state_machine_matches_the_model(pending in any::<bool>(), ops in proptest::collection::vec(op(), 1..24)) {
        let (_d, l) = ledger();
        let s = l.create_session(CreateSession { pending, ..CreateSession::titled("t") }).unwrap();
        let id = s.session_id.to_string();
        let mut status = s.status;
        let mut rev = 1_i64;
        let mut types = vec!["created".to_owned()];
        let m = Mutation::default();
        for op in ops {
            let before = l.show_session(&id).unwrap();
            let res = match op {
                Op::Start => l.start(&id, None, &m),
                Op::Pause => l.pause(&id, Some("p".into()), &m),
                Op::Resume => l.resume(&id, None, &m),
                Op::Checkpoint => l.checkpoint(&id, CheckpointRequest { step: Some(format!("s{rev}")), ..Default::default() }, &Mutation { if_rev: Some(rev), ..Default::default() }),
                Op::StaleCheckpoint => l.checkpoint(&id, CheckpointRequest { step: Some("stale".into()), ..Default::default() }, &Mutation { if_rev: Some(rev + 1), ..Default::default() }),
                Op::Complete => l.complete(&id, "done", &m),
                Op::Fail => l.fail(&id, "bad", &m),
                Op::Cancel => l.cancel(&id, "stop", &m),
                Op::Event => l.append_event(&id, AppendEvent { event_type: "x.note".into(), ..Default::default() }, &m),
            };
            let expect = if matches!(op, Op::StaleCheckpoint) { None } else { model(status, op) };
            match (expect, res) {
                (Some(next), Ok(s)) => {
                    rev += 1;
                    status = next;
                    prop_assert_eq!(s.status, next);
                    prop_assert_eq!(s.rev, rev);
                    types.push(match op {
                        Op::Start => "started", Op::Pause => "paused", Op::Resume => "resumed",
                        Op::Checkpoint => "checkpoint", Op::Complete => "completed", Op::Fail => "failed",
                        Op::Cancel => "cancelled", Op::Event => "x.note", Op::StaleCheckpoint => unreachable!(),
                    }.to_owned());
                }
                (None, Err(e)) => {
                    let want = if matches!(op, Op::StaleCheckpoint) && status == SessionStatus::Active {
                        ErrorCode::SessionConflict
                    } else {
                        ErrorCode::SessionInvalidTransition
                    };
                    prop_assert_eq!(e.code(), want);
                    let after = l.show_session(&id).unwrap();
                    prop_assert_eq!(serde_json::to_string(&after).unwrap(), serde_json::to_string(&before).unwrap());
                }
                (want, got) => prop_assert!(false, "{:?} from {:?}: model {:?}, got {:?}", op, status, want, got.map(|s| s.status)),
            }
        }
        let view = l.show_session(&id).unwrap();
        let got: Vec<String> = view.events.iter().map(|e| e.event_type.clone()).collect();
        prop_assert_eq!(got, types);
        let seqs: Vec<i64> = view.events.iter().map(|e| e.seq).collect();
        prop_assert_eq!(seqs, (0..rev).collect::<Vec<_>>());
        prop_assert_eq!(view.session.ended_at_ms.is_some(), status.is_terminal());
    }
}

#[test]
fn retried_mutation_with_same_key_applies_once() {
    let (_d, l) = ledger();
    let id = l
        .create_session(CreateSession::titled("t"))
        .unwrap()
        .session_id
        .to_string();
    let m = Mutation {
        idempotency_key: Some("k-1".into()),
        ..Default::default()
    };
    let req = || CheckpointRequest {
        step: Some("s1".into()),
        note: Some("n".into()),
        ..Default::default()
    };
    let first = l.checkpoint(&id, req(), &m).unwrap();
    let again = l.checkpoint(&id, req(), &m).unwrap();
    assert_eq!((first.rev, again.rev), (2, 2));
    assert_eq!(l.show_session(&id).unwrap().events.len(), 2);
    // Same key, different arguments: refused, nothing applied.
    let other = CheckpointRequest {
        step: Some("s2".into()),
        ..Default::default()
    };
    let e = l.checkpoint(&id, other, &m).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    assert_eq!(l.get_session(&id).unwrap().rev, 2);
    // The same key on another verb is also different arguments.
    assert_eq!(
        l.complete(&id, "r", &m).unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    // Keys are per session: the same key elsewhere applies.
    let id2 = l
        .create_session(CreateSession::titled("u"))
        .unwrap()
        .session_id
        .to_string();
    assert_eq!(l.checkpoint(&id2, req(), &m).unwrap().rev, 2);
    // A retried complete returns the completed session, not an invalid transition.
    let mc = Mutation {
        idempotency_key: Some("done-1".into()),
        ..Default::default()
    };
    let c1 = l.complete(&id, "shipped", &mc).unwrap();
    let c2 = l.complete(&id, "shipped", &mc).unwrap();
    assert_eq!(
        (c1.rev, c2.rev, c2.status),
        (3, 3, SessionStatus::Completed)
    );
}

#[test]
fn retried_create_with_same_key_returns_the_first_session() {
    let (_d, l) = ledger();
    let req = || CreateSession {
        idempotency_key: Some("create-1".into()),
        app: Some("a".into()),
        ..CreateSession::titled("t")
    };
    let a = l.create_session(req()).unwrap();
    let b = l.create_session(req()).unwrap();
    assert_eq!(a.session_id, b.session_id);
    assert_eq!(
        l.list_sessions(&ListSessions::default())
            .unwrap()
            .sessions
            .len(),
        1
    );
    let e = l
        .create_session(CreateSession {
            idempotency_key: Some("create-1".into()),
            ..CreateSession::titled("other")
        })
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
}

/// C12: a cursor walk returns every session that existed at its start exactly
/// once, while others are inserted and updated between pages.
#[test]
fn cursor_walk_is_exact_under_inserts_and_updates() {
    let (_d, l) = ledger();
    let mut original = Vec::new();
    for i in 0..30 {
        let s = l
            .create_session(CreateSession {
                app: Some("a".into()),
                ..CreateSession::titled(format!("s{i}"))
            })
            .unwrap();
        original.push(s.session_id.to_string());
    }
    let q = |cursor: Option<String>| ListSessions {
        statuses: vec![SessionStatus::Active],
        app: Some("a".into()),
        limit: Some(7),
        cursor,
        ..Default::default()
    };
    let mut seen: Vec<String> = Vec::new();
    let mut cursor = None;
    let mut page = 0;
    loop {
        let p = l.list_sessions(&q(cursor.clone())).unwrap();
        seen.extend(p.sessions.iter().map(|s| s.session_id.to_string()));
        page += 1;
        // Between pages: new sessions, and updates to sessions not yet seen
        // and already seen.
        for j in 0..3 {
            l.create_session(CreateSession {
                app: Some("a".into()),
                ..CreateSession::titled(format!("new{page}.{j}"))
            })
            .unwrap();
        }
        for id in original.iter().step_by(5) {
            let _ = l.checkpoint(
                id,
                CheckpointRequest {
                    step: Some("touch".into()),
                    ..Default::default()
                },
                &Mutation::default(),
            );
        }
        match p.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    for id in &original {
        assert_eq!(seen.iter().filter(|s| *s == id).count(), 1, "{id}");
    }
    let mut dedup = seen.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), seen.len(), "a session was returned twice");
    // Newer sessions are never returned by this walk (it moves strictly down).
    assert_eq!(seen.len(), 30);
}

/// `--order updated`: the documented rule is that a session updated during a
/// walk moves to the top and may be missed; sessions not updated are returned
/// exactly once and in updated order.
#[test]
fn updated_order_walk_follows_its_documented_rule() {
    let (d, _l) = ledger();
    let (clock, now) = Clock::fixed(1_000);
    let l2 = Ledger::open(LedgerOptions {
        clock,
        ..LedgerOptions::at(d.path())
    })
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..10 {
        now.store(1_000 + i, std::sync::atomic::Ordering::SeqCst);
        ids.push(
            l2.create_session(CreateSession::titled(format!("s{i}")))
                .unwrap()
                .session_id
                .to_string(),
        );
    }
    let p1 = l2
        .list_sessions(&ListSessions {
            order_updated: true,
            limit: Some(4),
            ..Default::default()
        })
        .unwrap();
    let first: Vec<String> = p1
        .sessions
        .iter()
        .map(|s| s.session_id.to_string())
        .collect();
    assert_eq!(first, ids.iter().rev().take(4).cloned().collect::<Vec<_>>());
    // Update one session that page 1 did not return: it moves to the top.
    now.store(5_000, std::sync::atomic::Ordering::SeqCst);
    l2.checkpoint(
        &ids[2],
        CheckpointRequest {
            step: Some("x".into()),
            ..Default::default()
        },
        &Mutation::default(),
    )
    .unwrap();
    let mut rest = Vec::new();
    let mut cursor = p1.next_cursor;
    while let Some(c) = cursor {
        let p = l2
            .list_sessions(&ListSessions {
                order_updated: true,
                limit: Some(4),
                cursor: Some(c),
                ..Default::default()
            })
            .unwrap();
        rest.extend(p.sessions.iter().map(|s| s.session_id.to_string()));
        cursor = p.next_cursor;
    }
    let expect: Vec<String> = ids
        .iter()
        .rev()
        .skip(4)
        .filter(|id| **id != ids[2])
        .cloned()
        .collect();
    assert_eq!(rest, expect);
}

fn list_page(env: &TestEnv, order: &str, cursor: Option<&str>) -> Value {
    let mut a = vec![
        "session", "list", "--status", "active", "--app", "a", "--limit", "10", "--order", order,
    ];
    if let Some(c) = cursor {
        a.extend(["--cursor", c]);
    }
    env.json(&a).data()
}

/// Walks the remaining pages after `cursor`.
fn walk_rest(env: &TestEnv, order: &str, mut cursor: String, seen: &mut Vec<String>) {
    for _ in 0..100 {
        let p = list_page(env, order, Some(&cursor));
        seen.extend(listed(&p));
        match p["next_cursor"].as_str() {
            Some(c) => cursor = c.to_owned(),
            None => return,
        }
    }
    panic!("the walk did not end");
}

/// C12: the default (created) order walks every session that existed when
/// the walk began exactly once, whatever is inserted or updated meanwhile.
#[test]
fn c12_created_order_walk_survives_inserts_and_updates() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let originals: Vec<String> = (0..30)
        .map(|i| lib_create(&lg, &format!("o{i}"), "a"))
        .collect();
    let newest_first: Vec<String> = originals.iter().rev().cloned().collect();
    let p1 = list_page(&env, "created", None);
    let mut seen = listed(&p1);
    assert_eq!(seen, newest_first[..10].to_vec());
    let cursor = p1["next_cursor"].as_str().expect("a cursor").to_owned();
    assert!(
        !originals.iter().any(|id| cursor.contains(&id[4..])),
        "cursor leaks ids"
    );

    let new: HashSet<String> = (0..5).map(|i| env.create(&format!("new{i}"))).collect();
    let touched = newest_first[20].clone(); // not on page 1
    env.checkpoint(&touched, "mid-walk");
    walk_rest(&env, "created", cursor, &mut seen);

    let mut counts: HashMap<&str, usize> = HashMap::new();
    for id in &seen {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    assert!(
        counts.values().all(|&c| c == 1),
        "a session repeated: {seen:?}"
    );
    let old: Vec<String> = seen
        .iter()
        .filter(|id| !new.contains(*id))
        .cloned()
        .collect();
    assert_eq!(
        old, newest_first,
        "each original exactly once, newest first"
    );
}

/// C12 with `--order updated`: as documented, a session updated during the
/// walk moves to the top and may be missed; every other session comes back
/// exactly once and nothing repeats.
#[test]
fn c12_updated_order_walk_follows_its_documented_rule() {
    let env = TestEnv::new();
    let lg = env.ledger();
    for i in 0..30 {
        lib_create(&lg, &format!("o{i}"), "a");
    }
    let all = env
        .json(&[
            "session", "list", "--status", "active", "--app", "a", "--order", "updated", "--limit",
            "1000",
        ])
        .data();
    let order = listed(&all);
    assert_eq!(order.len(), 30);
    let p1 = list_page(&env, "updated", None);
    let mut seen = listed(&p1);
    assert_eq!(seen, order[..10].to_vec());
    let cursor = p1["next_cursor"].as_str().unwrap().to_owned();
    let (ahead, behind) = (order[20].clone(), order[3].clone());
    for id in [&ahead, &behind] {
        env.checkpoint(id, "mid-walk");
    }
    walk_rest(&env, "updated", cursor, &mut seen);
    let count = |id: &str| seen.iter().filter(|s| *s == id).count();
    for id in &order {
        if *id == ahead {
            assert!(count(id) <= 1, "{id} repeated");
        } else {
            assert_eq!(count(id), 1, "{id} (behind: {})", *id == behind);
        }
    }
}

/// docs/design.md, "Event order": every change of a session's status leaves the event of that
/// status, last, in the same transaction, whatever verb caused it: the
/// session verbs, gate opening / approval / rejection / abort, and budget
/// policies. A feed reader that follows statuses by event type sees every
/// change and every ending.
#[test]
fn every_status_change_leaves_the_event_of_that_status_last() {
    let (_d, lg) = ledger();
    let m = Mutation::default();
    let pending = || {
        lg.create_session(CreateSession {
            pending: true,
            ..CreateSession::titled("t")
        })
        .unwrap()
        .session_id
        .to_string()
    };
    let active = || {
        lg.create_session(CreateSession::titled("t"))
            .unwrap()
            .session_id
            .to_string()
    };
    let gated = || {
        let id = active();
        lg.open_gate(&id, "g", GateKind::UserApproval, &m).unwrap();
        id
    };
    let budgeted = |policy: OnExceed| {
        let id = active();
        let b = SetBudget {
            max_tokens: Some(10),
            on_exceed: Some(policy),
            ..SetBudget::default()
        };
        lg.set_budget(&id, b, &m).unwrap();
        id
    };
    let over = RecordUsage {
        input_tokens: Some(11),
        ..RecordUsage::default()
    };
    type Verb<'a> = Box<dyn Fn(&str) -> Written<Session> + 'a>;
    let paths: Vec<(&str, String, Verb<'_>)> = vec![
        (
            "start",
            pending(),
            Box::new(|id| lg.start(id, None, &m).unwrap()),
        ),
        (
            "pause",
            active(),
            Box::new(|id| lg.pause(id, None, &m).unwrap()),
        ),
        (
            "complete",
            active(),
            Box::new(|id| lg.complete(id, "r", &m).unwrap()),
        ),
        (
            "fail",
            active(),
            Box::new(|id| lg.fail(id, "r", &m).unwrap()),
        ),
        (
            "cancel",
            pending(),
            Box::new(|id| lg.cancel(id, "r", &m).unwrap()),
        ),
        (
            "gate open",
            active(),
            Box::new(|id| lg.open_gate(id, "g", GateKind::StepConfirm, &m).unwrap()),
        ),
        (
            "gate approve",
            gated(),
            Box::new(|id| lg.approve_gate(id, "g", None, &m).unwrap()),
        ),
        (
            "gate reject",
            gated(),
            Box::new(|id| lg.reject_gate(id, "g", "no", false, &m).unwrap()),
        ),
        (
            "gate abort",
            gated(),
            Box::new(|id| lg.reject_gate(id, "g", "no", true, &m).unwrap()),
        ),
        (
            "budget pause",
            budgeted(OnExceed::Pause),
            Box::new(|id| lg.record_usage(id, over, &m).unwrap()),
        ),
        (
            "budget fail",
            budgeted(OnExceed::Fail),
            Box::new(|id| lg.record_usage(id, over, &m).unwrap()),
        ),
    ];
    // Resume separately: it needs a paused session.
    let resumable = active();
    lg.pause(&resumable, None, &m).unwrap();
    let mut all = paths;
    all.push((
        "resume",
        resumable,
        Box::new(|id| lg.resume(id, None, &m).unwrap()),
    ));
    for (what, id, verb) in &all {
        let before = lg.show_session(id).unwrap();
        let after = verb(id);
        assert_ne!(after.status, before.session.status, "{what}");
        let events = lg.show_session(id).unwrap().events;
        let new = &events[before.events.len()..];
        let want = match after.status {
            SessionStatus::Active if before.session.status == SessionStatus::Paused => "resumed",
            SessionStatus::Active => "started",
            other => other.as_str(),
        };
        let of_status: Vec<&str> = new
            .iter()
            .map(|e| e.event_type.as_str())
            .filter(|t| *t == want)
            .collect();
        assert_eq!(of_status, [want], "{what}: {new:?}");
        assert_eq!(new.last().unwrap().event_type, want, "{what}");
        assert_eq!(after.rev, before.session.rev + 1, "{what}");
    }
}

/// A server URL whose user or password cannot be read without guessing is
/// INVALID_ARGUMENT from `Ledger::open`, before any lookup, and neither the
/// error nor the options' `Debug` shows any piece of the password.
#[test]
fn a_postgres_url_with_an_unencoded_at_slash_or_percent_in_its_userinfo_is_refused_by_open() {
    for (url, pieces) in [
        (
            "postgres://owner:Own3r-p@ss/w:rd%@127.0.0.1:5432/lb",
            &["Own3r", "w:rd", "@ss"][..],
        ),
        ("postgres://ow/ner:Pw0rd-9@127.0.0.1:5432/lb", &["Pw0rd"]),
        ("postgres://owner:Pw0rd%g1@127.0.0.1:5432/lb", &["Pw0rd"]),
        ("postgres://owner:Pw0rd%@127.0.0.1:5432/lb", &["Pw0rd"]),
    ] {
        let opts = LedgerOptions::at(url);
        let debug = format!("{opts:?}");
        let e = Ledger::open(opts).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{url}: {e}");
        assert_eq!(e.details()["field"], "db");
        let shown = format!("{e} | {e:?} | {} | {debug}", e.details());
        for piece in pieces {
            assert!(!shown.contains(piece), "{url}: `{piece}` in {shown}");
        }
    }
}
