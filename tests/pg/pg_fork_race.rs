//! `fork` beside writers of its source on a server (docs/design.md,
//! "Snapshots"): the fork locks the source's row before it reads the
//! source and its snapshot, so a writer queued before it is what it
//! follows. Each test queues two writers behind a held lock
//! (`pg_one_statement::queued`; no assertion on time) and releases it.

use crate::common::*;
use crate::pg_one_statement::queued;
use logbook::{CheckpointRequest, ForkRequest, Ledger, Mutation, Session};
use serde_json::{json, Value};

fn fork(lg: &Ledger, id: &str) -> logbook::Result<Session> {
    lg.fork(
        id,
        &ForkRequest {
            checkpoint: None,
            title: None,
        },
        &Mutation::default(),
    )
    .map(|w| w.value)
}

fn with_state(n: i64) -> CheckpointRequest {
    CheckpointRequest {
        step: Some(format!("s{n}")),
        state: Some(json!({ "n": n })),
        ..CheckpointRequest::default()
    }
}

/// The `forked` events' data of a session, in seq order.
fn forked_data(env: &TestEnv, id: &str) -> Vec<Value> {
    env.rows(
        "SELECT data FROM events WHERE session_id = $1 AND type = 'forked' ORDER BY seq",
        &[id],
    )
    .into_iter()
    .map(|r| serde_json::from_str(r[0].as_str().unwrap()).unwrap())
    .collect()
}

/// A fork with no `checkpoint` queued behind a checkpoint with state copies
/// that checkpoint's snapshot (the newest when the fork applies), and the
/// source's `forked` event names its seq.
#[test]
fn pg_a_fork_queued_behind_a_checkpoint_copies_that_checkpoints_snapshot() {
    for keyed in [false, true] {
        let env = TestEnv::new();
        let lg = env.ledger();
        let id = lib_create(&lg, "fork race", "a");
        lg.checkpoint(&id, with_state(1), &Mutation::default())
            .unwrap();
        let (written, child) = queued(
            &env,
            &id,
            {
                let id = id.clone();
                move |lg| {
                    let m = Mutation {
                        idempotency_key: keyed.then(|| "k".to_owned()),
                        ..Mutation::default()
                    };
                    lg.checkpoint(&id, with_state(2), &m).unwrap().value
                }
            },
            {
                let id = id.clone();
                move |lg| fork(lg, &id)
            },
        );
        let seq = written.checkpoint.unwrap().seq;
        let child = child.unwrap();
        assert_eq!(seq, 2, "keyed {keyed}");
        assert_eq!(child.context.get(), r#"{"n":2}"#, "keyed {keyed}");
        assert_eq!(
            forked_data(&env, &id),
            [json!({"child_session_id": child.session_id.to_string(), "checkpoint_seq": 2})],
            "keyed {keyed}"
        );
        assert_eq!(
            event_types(&env, &id),
            ["created", "checkpoint", "checkpoint", "forked"]
        );
    }
}

/// A fork queued behind the source's end succeeds: a terminal source is
/// frozen, so the fork is recorded on the child only.
#[test]
fn pg_a_fork_queued_behind_its_sources_end_is_recorded_on_the_child() {
    let env = TestEnv::new();
    let lg = env.ledger();
    let id = lib_create(&lg, "fork race", "a");
    lg.checkpoint(&id, with_state(1), &Mutation::default())
        .unwrap();
    let ((), child) = queued(
        &env,
        &id,
        {
            let id = id.clone();
            move |lg| drop(lg.complete(&id, "done", &Mutation::default()).unwrap())
        },
        {
            let id = id.clone();
            move |lg| fork(lg, &id)
        },
    );
    let child = child.unwrap();
    assert_eq!(child.context.get(), r#"{"n":1}"#);
    assert_eq!(
        event_types(&env, &id),
        ["created", "checkpoint", "completed"]
    );
    assert_eq!(
        forked_data(&env, &child.session_id.to_string()),
        [json!({"parent_session_id": id, "checkpoint_seq": 1})]
    );
}
