//! Writes under a lease as one statement on a server (docs/postgres.md,
//! "One round trip per write"; docs/design.md, "Leases"): a keyed write
//! that presents the session's live lease token is one round trip, a
//! session write and a run verb alike, and so is one without a token past
//! an expired lease; a token that is not the lease's, an expired lease's
//! token, or no token while a live lease exists get the pipeline's answer
//! (LEASE_HELD, LEASE_NOT_FOUND). A lock over an expired lease is a
//! takeover in one statement, naming the previous owner as the pipeline
//! does; over a live lease whose owner's process is gone it is the
//! pipeline's.

use crate::common::*;
use crate::pg_one_statement::{
    cuts, differential, events_without_ids, keyed, round_trips, server_port, through_proxy, via,
};
use crate::proxy::Proxy;
use logbook::ledger::RunUsageDelta;
use logbook::{CreateRun, LockRequest, Mutation};
use serde_json::json;
use std::path::Path;

fn with_lease(key: &str, token: &str) -> Mutation {
    Mutation {
        lease: Some(token.to_owned()),
        ..keyed(key)
    }
}

#[test]
fn pg_a_keyed_write_with_the_lease_token_is_one_round_trip() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    let id = lib_create(&lg, "leased", "a");
    let lease = lg
        .lock(
            &id,
            &LockRequest {
                ttl_ms: Some(600_000),
                ..LockRequest::default()
            },
            &Mutation::default(),
        )
        .unwrap();
    let t = lease.token.as_str();
    // The first of each statement prepares it (one round trip more).
    lg.checkpoint(&id, cp("w", None), &with_lease("w-c", t))
        .unwrap();
    let warm = lg
        .create_run(&id, CreateRun::default(), &with_lease("w-n", t))
        .unwrap();
    lg.start_run(warm.run_id.as_str(), &with_lease("w-s", t))
        .unwrap();
    let usage = RunUsageDelta {
        input_tokens: Some(5),
        ..RunUsageDelta::default()
    };
    lg.record_run_usage(warm.run_id.as_str(), usage, &with_lease("w-u", t))
        .unwrap();
    assert_eq!(
        count(&mut || {
            lg.checkpoint(&id, cp("one", None), &with_lease("c1", t))
                .unwrap();
        }),
        1,
        "keyed checkpoint with the lease token"
    );
    assert_eq!(
        count(&mut || {
            lg.record_run_usage(warm.run_id.as_str(), usage, &with_lease("u1", t))
                .unwrap();
        }),
        1,
        "keyed run usage with the lease token"
    );
    // Without the token, or with another: refused while the lease lives.
    let code = |m: &Mutation| {
        lg.checkpoint(&id, cp("x", None), m)
            .unwrap_err()
            .code()
            .as_str()
            .to_owned()
    };
    assert_eq!(code(&keyed("x1")), "LEASE_HELD");
    let other = format!("lease_{}", "0".repeat(64));
    assert_eq!(code(&with_lease("x2", &other)), "LEASE_HELD");
    let e = lg
        .record_run_usage(warm.run_id.as_str(), usage, &keyed("x3"))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "LEASE_HELD");
    let run = lg.get_run(warm.run_id.as_str()).unwrap();
    assert_eq!(run.usage.input_tokens, 10, "refused usage recorded nothing");
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// An expired lease is dead, whoever owns it: a keyed write without a
/// token applies past it in one statement, a session write and a run verb
/// alike, and leaves the dead lease's row as the pipeline does; its token
/// no longer counts (LEASE_NOT_FOUND, nothing written); `lock` over it is a
/// takeover (`lease_taken_over`, naming the previous owner), one round trip
/// too.
#[test]
fn pg_a_keyed_write_past_an_expired_lease_is_one_round_trip() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let count = |f: &mut dyn FnMut()| round_trips(&proxy, f);
    let id = lib_create(&lg, "expiring", "a");
    let run = lg
        .create_run(&id, CreateRun::default(), &keyed("n0"))
        .unwrap();
    lg.start_run(run.run_id.as_str(), &keyed("s0")).unwrap();
    // The first of each statement prepares it (one round trip more).
    lg.checkpoint(&id, cp("warm", None), &keyed("w0")).unwrap();
    let usage = RunUsageDelta {
        input_tokens: Some(5),
        ..RunUsageDelta::default()
    };
    lg.record_run_usage(run.run_id.as_str(), usage, &keyed("w1"))
        .unwrap();
    let lease = lg
        .lock(
            &id,
            &LockRequest {
                ttl_ms: Some(1),
                ..LockRequest::default()
            },
            &Mutation::default(),
        )
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let lease_row = || {
        env.scalar(&format!(
            "SELECT count(*) FROM session_leases WHERE session_id = '{id}' \
             AND expires_at_ms = {}",
            lease.expires_at_ms
        ))
    };
    // Its token no longer counts: LEASE_NOT_FOUND, nothing written.
    let e = lg
        .checkpoint(&id, cp("late", None), &with_lease("k1", &lease.token))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "LEASE_NOT_FOUND");
    // Without a token the dead lease blocks nobody.
    assert_eq!(
        count(&mut || {
            let w = lg.checkpoint(&id, cp("free", None), &keyed("k2")).unwrap();
            assert_eq!(w.checkpoint.as_ref().unwrap().step.as_deref(), Some("free"));
        }),
        1,
        "keyed checkpoint past an expired lease"
    );
    assert_eq!(
        count(&mut || {
            lg.record_run_usage(run.run_id.as_str(), usage, &keyed("u1"))
                .unwrap();
        }),
        1,
        "keyed run usage past an expired lease"
    );
    assert_eq!(lease_row(), 1, "the dead lease's row stays");
    let mut taken = None;
    assert_eq!(
        count(&mut || {
            taken = Some(
                lg.lock(&id, &LockRequest::default(), &Mutation::default())
                    .unwrap(),
            );
        }),
        1,
        "lock over an expired lease"
    );
    let previous = taken.unwrap().taken_over_from.expect("a takeover");
    assert_eq!(
        (previous.reason, previous.expires_at_ms),
        ("expired", lease.expires_at_ms)
    );
    assert_eq!(lease_row(), 0);
    let types = event_types(&env, &id);
    assert_eq!(
        types,
        [
            "created",
            "run_created",
            "run_started",
            "checkpoint",
            "run_usage",
            "lease_acquired",
            "checkpoint",
            "run_usage",
            "lease_taken_over"
        ]
    );
    assert_eq!(
        lg.get_run(run.run_id.as_str()).unwrap().usage.input_tokens,
        10
    );
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// A takeover of an expired lease through the statement (on the server),
/// through the pipeline on the server (`--if-rev`, which the statement
/// leaves to it) and through the pipeline on SQLite, at the same times:
/// the same answers (the previous owner), the same session and events
/// (the takeover's data built by the server in the same bytes), every hash
/// the library's.
#[test]
fn pg_a_takeover_statement_leaves_what_the_pipeline_leaves() {
    let env = TestEnv::new();
    differential(&env, 1_782_060_000_000, |lg, st| {
        let id = lg
            .create_session(logbook::ledger::CreateSession::titled("taken over"))
            .unwrap()
            .session_id
            .to_string();
        // The ledger without keys sends `--if-rev`: the pipeline's lock.
        let pipeline = st.m("k").idempotency_key.is_none();
        let m = |token: Option<&str>| Mutation {
            lease: token.map(str::to_owned),
            if_rev: pipeline.then(|| lg.get_session(&id).unwrap().rev),
            ..Mutation::default()
        };
        let req = |ttl_ms, owner_pid| LockRequest {
            ttl_ms: Some(ttl_ms),
            owner_pid,
        };
        let answer = |l: &logbook::Lease| {
            let mut s = serde_json::to_value(&l.session).unwrap();
            s.as_object_mut().unwrap().remove("session_id");
            json!([
                l.pid,
                l.acquired_at_ms,
                l.expires_at_ms,
                l.renewed,
                serde_json::to_value(&l.taken_over_from).unwrap(),
                s
            ])
        };
        st.tick();
        let first = lg.lock(&id, &req(1_500, Some(4_242)), &m(None)).unwrap();
        st.tick();
        st.tick();
        let taken = lg.lock(&id, &req(30_000, None), &m(None)).unwrap();
        st.tick();
        let renewed = lg
            .lock(&id, &req(60_000, None), &m(Some(&taken.token)))
            .unwrap();
        st.tick();
        lg.unlock(&id, &taken.token, &st.m("u1")).unwrap();
        assert_eq!(
            taken.taken_over_from.as_ref().map(|p| (p.pid, p.reason)),
            Some((4_242, "expired"))
        );
        assert_eq!(lg.verify(std::slice::from_ref(&id)).unwrap().events, 5);
        json!([
            answer(&first),
            answer(&taken),
            answer(&renewed),
            events_without_ids(lg, &id)
        ])
    });
}

/// A takeover whose reply was lost is answered by the lease it wrote, with
/// the previous owner its event names, and is applied once.
#[test]
fn pg_a_takeover_whose_reply_was_lost_names_the_previous_owner_once() {
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let lg = open_ledger(Path::new(&via(&env, &proxy, "&statement_cache_size=0")));
    let id = lib_create(&lg, "lost takeover", "a");
    let short = LockRequest {
        ttl_ms: Some(1),
        owner_pid: Some(4_242),
    };
    let first = lg.lock(&id, &short, &Mutation::default()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    proxy.cut_after_next(b"session_leases");
    let taken = lg
        .lock(&id, &LockRequest::default(), &Mutation::default())
        .unwrap();
    assert_eq!(cuts(&proxy, 1), 1, "the statement's reply was cut");
    let previous = taken.taken_over_from.expect("a takeover");
    assert_eq!(
        (previous.pid, previous.expires_at_ms, previous.reason),
        (4_242, first.expires_at_ms, "expired")
    );
    assert_eq!(
        event_types(&env, &id),
        ["created", "lease_acquired", "lease_taken_over"]
    );
    assert_eq!(taken.session.rev, 3);
    // The token answered is the lease's.
    lg.unlock(&id, &taken.token, &keyed("u1")).unwrap();
    assert_eq!(env.json(&["verify"]).code, 0);
}

/// A live lease whose owner's process is gone (on this host) is judged in
/// Rust: the statement leaves it, and the pipeline takes it over with
/// reason `owner_gone`.
#[test]
fn pg_a_live_lease_of_a_gone_owner_is_the_pipelines_takeover() {
    let env = TestEnv::new();
    let (proxy, lg) = through_proxy(&env);
    let id = lib_create(&lg, "owner gone", "a");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    let held = LockRequest {
        ttl_ms: Some(600_000),
        owner_pid: Some(gone),
    };
    let first = lg.lock(&id, &held, &Mutation::default()).unwrap();
    let mut taken = None;
    let trips = round_trips(&proxy, || {
        taken = Some(
            lg.lock(&id, &LockRequest::default(), &Mutation::default())
                .unwrap(),
        );
    });
    assert!(trips > 1, "the pipeline's transaction, not one statement");
    let previous = taken.unwrap().taken_over_from.expect("a takeover");
    assert_eq!(
        (previous.pid, previous.expires_at_ms, previous.reason),
        (i64::from(gone), first.expires_at_ms, "owner_gone")
    );
    assert_eq!(
        event_types(&env, &id),
        ["created", "lease_acquired", "lease_taken_over"]
    );
}
