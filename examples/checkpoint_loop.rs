//! Profiling aid: `cargo run --release --example checkpoint_loop -- DB N`
//! runs N library checkpoints (synchronous=NORMAL) on 1,000 sessions, for
//! `perf` or `valgrind --tool=callgrind`.
use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation, SyncMode};

fn main() {
    let mut args = std::env::args().skip(1);
    let db = args.next().expect("usage: checkpoint_loop DB N");
    let n: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let _ = std::fs::remove_file(&db);
    let l = Ledger::open(LedgerOptions {
        sync: SyncMode::Normal,
        ..LedgerOptions::at(&db)
    })
    .expect("open");
    let ids: Vec<String> = (0..1000)
        .map(|i| {
            l.create_session(CreateSession::titled(format!("s{i}")))
                .expect("create")
                .session_id
                .to_string()
        })
        .collect();
    let t = std::time::Instant::now();
    for i in 0..n {
        let req = CheckpointRequest {
            step: Some(format!("step {i}")),
            note: Some("a short note".into()),
            ..Default::default()
        };
        l.checkpoint(&ids[(i * 7919) % ids.len()], req, &Mutation::default())
            .expect("checkpoint");
    }
    println!("{:.1} µs/op", t.elapsed().as_secs_f64() * 1e6 / n as f64);
}
