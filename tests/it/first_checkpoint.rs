//! A session created with its first checkpoint (`CreateSession::checkpoint`):
//! one transaction that leaves exactly what a create and then a checkpoint
//! leave, on either backend; refused inputs change nothing.

use crate::common::fresh_ledger;
use logbook::*;
use serde_json::{json, Value};

fn first() -> CheckpointRequest {
    CheckpointRequest {
        step: Some("plan".into()),
        note: Some("first".into()),
        plan_ids: vec!["p-1".into()],
        state: Some(json!({"k": [1, 2], "bytes": "00ff"})),
        ..Default::default()
    }
}

fn req(checkpoint: Option<CheckpointRequest>) -> CreateSession {
    CreateSession {
        app: Some("a".into()),
        tags: vec!["t1".into()],
        checkpoint,
        ..CreateSession::titled("with a first checkpoint")
    }
}

/// The session and its events as JSON, without what differs between two
/// sessions written the same way (ids and times).
fn shape(l: &Ledger, id: &str) -> (Value, Vec<Value>) {
    let s = untimed(serde_json::to_value(l.get_session(id).unwrap()).unwrap());
    let events = l
        .session_events(id, None, None)
        .unwrap()
        .events
        .iter()
        .map(|e| {
            json!([
                e.seq,
                e.event_type,
                e.detail,
                e.data.as_ref().map(|d| d.get())
            ])
        })
        .collect();
    (s, events)
}

/// `v` without its id and its times, at any depth.
fn untimed(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.retain(|k, _| k != "session_id" && !k.ends_with("_ms"));
        for x in o.values_mut() {
            *x = untimed(x.take());
        }
    }
    v
}

#[test]
fn a_create_with_a_first_checkpoint_leaves_what_create_then_checkpoint_leave() {
    let (_d, l) = fresh_ledger();
    let one = l.create_session(req(Some(first()))).unwrap();
    assert!(one.replayed.is_none());
    let one = one.into_inner();
    assert_eq!(one.rev, 2);
    assert_eq!(one.checkpoint.as_ref().map(|c| c.seq), Some(1));

    let two = l.create_session(req(None)).unwrap().into_inner();
    let id2 = two.session_id.to_string();
    l.checkpoint(&id2, first(), &Mutation::default()).unwrap();

    let id1 = one.session_id.to_string();
    let (s1, e1) = shape(&l, &id1);
    let (s2, e2) = shape(&l, &id2);
    assert_eq!(s1, s2);
    assert_eq!(e1, e2);
    let types: Vec<&str> = e1.iter().map(|e| e[1].as_str().unwrap()).collect();
    assert_eq!(types, ["created", "checkpoint"]);
    // The returned session is the stored one.
    assert_eq!(untimed(serde_json::to_value(&one).unwrap()), s1);

    let snap = l.snapshot(&id1, Some(1)).unwrap();
    assert_eq!(snap.state, json!({"k": [1, 2], "bytes": "00ff"}));
    assert_eq!(snap.step.as_deref(), Some("plan"));
    let report = l.verify(&[id1.clone(), id2.clone()]).unwrap();
    assert_eq!((report.sessions, report.events), (2, 4));
}

#[test]
fn refused_first_checkpoints_create_nothing() {
    let (_d, l) = fresh_ledger();
    let cases = [
        (
            CreateSession {
                pending: true,
                ..req(Some(first()))
            },
            "checkpoint",
        ),
        (req(Some(CheckpointRequest::default())), "checkpoint"),
        (
            req(Some(CheckpointRequest {
                step: Some(" ".into()),
                ..Default::default()
            })),
            "step",
        ),
        (
            req(Some(CheckpointRequest {
                state: Some(json!([1])),
                ..Default::default()
            })),
            "state",
        ),
    ];
    for (r, field) in cases {
        let e = l.create_session(r).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e}");
        assert_eq!(e.details()["field"], field, "{e}");
    }
    let page = l.list_sessions(&ListSessions::default()).unwrap();
    assert_eq!(page.sessions.len(), 0);
}

#[test]
fn a_keyed_create_with_a_first_checkpoint_replays_and_its_key_covers_the_checkpoint() {
    let (_d, l) = fresh_ledger();
    let keyed = |cp: CheckpointRequest| CreateSession {
        idempotency_key: Some("thread-1".into()),
        ..req(Some(cp))
    };
    let a = l.create_session(keyed(first())).unwrap().into_inner();
    let b = l.create_session(keyed(first())).unwrap();
    // The replay names what the first attempt left: rev 2, seq 1.
    let r = b.replayed.as_ref().unwrap();
    assert_eq!((r.rev, r.seq), (Some(2), 1));
    assert_eq!(b.into_inner().session_id, a.session_id);
    // Another first checkpoint under the same key is another request.
    let other = CheckpointRequest {
        step: Some("other".into()),
        ..first()
    };
    let e = l.create_session(keyed(other)).unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    // So is the same create without it.
    let e = l
        .create_session(CreateSession {
            idempotency_key: Some("thread-1".into()),
            ..req(None)
        })
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let page = l.list_sessions(&ListSessions::default()).unwrap();
    assert_eq!(page.sessions.len(), 1);
    let events = l.session_events(a.session_id.as_str(), None, None).unwrap();
    assert_eq!(events.events.len(), 2);
}

/// The commits in a SQLite WAL: frames whose header gives the database's
/// size after the commit (non-zero only on a transaction's last frame).
fn wal_commits(db: &std::path::Path) -> usize {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let bytes = std::fs::read(wal).unwrap_or_default();
    bytes
        .get(32..)
        .unwrap_or_default()
        .chunks(4096 + 24)
        .filter(|f| f.len() == 4096 + 24 && f[4..8] != [0, 0, 0, 0])
        .count()
}

/// On SQLite the pair is one commit (one fsync at FULL), where a create
/// and a checkpoint are two: counted in the WAL.
#[test]
fn on_sqlite_a_create_with_a_first_checkpoint_is_one_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("commits.db");
    let l = Ledger::open(LedgerOptions {
        wal_autocheckpoint_pages: Some(0),
        ..LedgerOptions::at(&db)
    })
    .unwrap();
    // Only the page size is asked: it must be the 4 KiB the count assumes.
    let c = rusqlite::Connection::open(&db).unwrap();
    let page: i64 = c.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
    assert_eq!(page, 4096);
    let base = wal_commits(&db);
    l.create_session(req(Some(first()))).unwrap();
    assert_eq!(wal_commits(&db) - base, 1);
    let s = l.create_session(req(None)).unwrap().into_inner();
    l.checkpoint(s.session_id.as_str(), first(), &Mutation::default())
        .unwrap();
    assert_eq!(wal_commits(&db) - base, 3);
}
