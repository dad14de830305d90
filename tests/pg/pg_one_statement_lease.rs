//! Writes under a lease as one statement on a server (docs/postgres.md,
//! "One round trip per write"; docs/design.md, "Leases"): a keyed write
//! that presents the session's live lease token is one round trip, a
//! session write and a run verb alike, and so is one without a token past
//! an expired lease; a token that is not the lease's, an expired lease's
//! token, or no token while a live lease exists get the pipeline's answer
//! (LEASE_HELD, LEASE_NOT_FOUND), and a lock over a dead lease is the
//! pipeline's takeover.

use crate::common::*;
use crate::pg_one_statement::{keyed, round_trips, through_proxy};
use logbook::ledger::RunUsageDelta;
use logbook::{CreateRun, LockRequest, Mutation};

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
/// takeover, which the pipeline writes (`lease_taken_over`, naming the
/// previous owner).
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
    let taken = lg
        .lock(&id, &LockRequest::default(), &Mutation::default())
        .unwrap();
    let previous = taken.taken_over_from.expect("a takeover");
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
