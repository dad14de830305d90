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

use logbook::{AppendEvent, CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    // `cargo bench` passes `--bench`; only positional arguments count.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
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
