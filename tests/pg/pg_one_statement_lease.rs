//! Writes under a lease as one statement on a server (docs/postgres.md,
//! "One round trip per write"; docs/design.md, "Leases"): a keyed write
//! that presents the session's live lease token is one round trip, a
//! session write and a run verb alike; a token that is not the lease's, an
//! expired lease, or no token while a lease exists get the pipeline's
//! answer (LEASE_HELD, LEASE_NOT_FOUND, or the write applied past a dead
//! lease).

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

#[test]
fn pg_an_expired_lease_gets_the_pipelines_answer() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "expiring", "a");
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
    // Its token no longer counts: LEASE_NOT_FOUND, nothing written.
    let e = lg
        .checkpoint(&id, cp("late", None), &with_lease("k1", &lease.token))
        .unwrap_err();
    assert_eq!(e.code().as_str(), "LEASE_NOT_FOUND");
    // Without a token the dead lease blocks nobody: the pipeline applies.
    let w = lg.checkpoint(&id, cp("free", None), &keyed("k2")).unwrap();
    assert_eq!(w.checkpoint.as_ref().unwrap().step.as_deref(), Some("free"));
    let types = event_types(&env, &id);
    assert_eq!(types, ["created", "lease_acquired", "checkpoint"]);
    assert_eq!(env.json(&["verify"]).code, 0);
}
