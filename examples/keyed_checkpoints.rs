//! Benchmark aid: N checkpoints of one session, each with an idempotency
//! key of its own, through one `Ledger` (on a server each is one statement
//! on one connection; BENCHMARKS.md, "A quiet sitting, and where the floor
//! is", run by `benches/pg_floor.sh`).
//!
//! `cargo run --release --example keyed_checkpoints -- DB SESSION_ID N`
use logbook::{CheckpointRequest, Ledger, LedgerOptions, Mutation};

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: keyed_checkpoints DB SESSION_ID N";
    let db = args.next().expect(usage);
    let id = args.next().expect(usage);
    let n: usize = args.next().and_then(|v| v.parse().ok()).expect(usage);
    let l = Ledger::open(LedgerOptions::at(std::path::Path::new(&db))).expect("open");
    let pid = std::process::id();
    for i in 0..n {
        let req = CheckpointRequest {
            step: Some(format!("s{i}")),
            ..CheckpointRequest::default()
        };
        let m = Mutation {
            idempotency_key: Some(format!("floor-{pid}-{i}")),
            ..Mutation::default()
        };
        l.checkpoint(&id, req, &m).expect("checkpoint");
    }
}
