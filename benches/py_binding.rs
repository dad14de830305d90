//! The Python binding's own cost per call (BENCHMARKS.md, "Python
//! package"): the library's cheap reads timed from Rust, for
//! `python/benches/langgraph_saver.py` to set against the same calls made
//! through `logbook_ledger.Ledger` on the same database.
//!
//! `cargo bench --bench py_binding -- DB SESSION_ID CALLS` opens the ledger
//! at DB and prints one line per read, `NAME MICROSECONDS`: the median over
//! 5 batches of CALLS calls of the mean time per call. Without arguments it
//! makes a temporary ledger with one small session (a checkpoint with a
//! small state and an event) and times 20,000 calls of each.
//!
//! `cargo bench --bench py_binding -- checkpoint DB OPS SYNC` (SYNC `full` or
//! `normal`) is the library's side of the saver comparison ("the library
//! against `SqliteSaver.put`"): a fresh process opens a ledger at DB, creates
//! a session and records OPS checkpoints on it, each with what the saver's
//! `put` sends (a state of the saver's shape and a 416-byte payload, the
//! step `langgraph NSKEY ID_HEX`), and prints `checkpoint MICROSECONDS`, the
//! mean per checkpoint.

use logbook::{AppendEvent, CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    // `cargo bench` passes `--bench`; only positional arguments count.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if let [mode, db, ops, sync] = args.as_slice() {
        if mode == "checkpoint" {
            return checkpoints(db, ops.parse().unwrap_or(500), sync);
        }
    }
    let tmp;
    let (db, sid, calls) = if let [db, sid, calls] = args.as_slice() {
        (db.into(), sid.clone(), calls.parse().unwrap_or(20_000))
    } else {
        tmp = tempfile::tempdir().expect("a temporary folder");
        let db = tmp.path().join("b.db");
        let l = Ledger::open(LedgerOptions::at(&db)).expect("open");
        let s = l
            .create_session(CreateSession::titled("binding floor"))
            .expect("create");
        let sid = s.into_inner().session_id.to_string();
        let step = CheckpointRequest {
            step: Some("one".into()),
            state: Some(serde_json::json!({"k": "v"})),
            ..Default::default()
        };
        l.checkpoint(&sid, step, &Mutation::default())
            .expect("checkpoint");
        let ev = AppendEvent {
            event_type: "x.bench".into(),
            ..Default::default()
        };
        l.append_event(&sid, ev, &Mutation::default())
            .expect("event");
        (db, sid, 20_000usize)
    };
    let l = Ledger::open(LedgerOptions::at(db)).expect("open");
    let reads: [(&str, &dyn Fn()); 3] = [
        ("show_session", &|| {
            black_box(l.show_session(&sid).expect("show"));
        }),
        ("session_events", &|| {
            black_box(l.session_events(&sid, None, Some(1)).expect("events"));
        }),
        ("snapshot", &|| {
            black_box(l.snapshot(&sid, None).expect("snapshot"));
        }),
    ];
    for (name, read) in reads {
        for _ in 0..calls / 10 {
            read();
        }
        let mut per_call: Vec<f64> = (0..5)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..calls {
                    read();
                }
                t.elapsed().as_secs_f64() * 1e6 / calls as f64
            })
            .collect();
        per_call.sort_by(f64::total_cmp);
        println!("{name} {:.2}", per_call[2]);
    }
}

/// The library's side of the saver comparison (module docs).
fn checkpoints(db: &str, ops: usize, sync: &str) {
    let sync = match sync {
        "normal" => logbook::SyncMode::Normal,
        _ => logbook::SyncMode::Full,
    };
    let l = Ledger::open(LedgerOptions {
        sync,
        ..LedgerOptions::at(db)
    })
    .expect("open");
    let sid = l
        .create_session(CreateSession {
            app: Some("langgraph".into()),
            ..CreateSession::titled("LangGraph thread")
        })
        .expect("create")
        .into_inner()
        .session_id
        .to_string();
    let payload: Vec<u8> = (0..416u32).map(|i| (i * 37 % 251) as u8).collect();
    let t = Instant::now();
    for i in 0..ops {
        let id = format!("1f0c{i:028x}-0000-6000-8000-000000000000");
        let state = serde_json::json!({
            "v": 2, "checkpoint_ns": "", "checkpoint_id": id,
            "parent_checkpoint_id": null,
            "checkpoint": {"type": "msgpack", "bytes": 386},
            "metadata": {"type": "msgpack", "bytes": 30},
        });
        let req = CheckpointRequest {
            step: Some(format!("langgraph e3b0c44298fc1c14 {}", hex::encode(&id))),
            state: Some(state),
            payload: Some(payload.clone()),
            ..Default::default()
        };
        l.checkpoint(&sid, req, &Mutation::default())
            .expect("checkpoint");
    }
    println!(
        "checkpoint {:.2}",
        t.elapsed().as_secs_f64() * 1e6 / ops as f64
    );
}
