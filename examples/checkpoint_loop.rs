//! Profiling aid: runs N library checkpoints, a random session each, for
//! `perf` or `valgrind --tool=callgrind` (BENCHMARKS.md, "Where a
//! checkpoint's time goes").
//!
//! `cargo run --release --example checkpoint_loop -- DB N [SESSIONS] [normal|full] [AUTOCHECKPOINT_PAGES]`
//!
//! Defaults: 1,000 sessions, `synchronous=NORMAL`, the library's default
//! `wal_autocheckpoint`. DB (and its `-wal`/`-shm`) is replaced. Prints µs
//! per checkpoint, timed after the sessions are created; with
//! `LOGBOOK_LOOP_PAUSE_MS` set it sleeps that long between setup and the
//! loop, so a profiler can be started (`perf record -D`) after setup.
use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation, SyncMode};

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: checkpoint_loop DB N [SESSIONS] [normal|full] [AUTOCHECKPOINT_PAGES]";
    let db = args.next().expect(usage);
    let n: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let sessions: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let sync = match args.next().as_deref() {
        None | Some("normal") => SyncMode::Normal,
        Some("full") => SyncMode::Full,
        Some(_) => panic!("{usage}"),
    };
    // Default: by the sync mode (see `LedgerOptions::wal_autocheckpoint_pages`).
    let autocheckpoint: Option<u32> = args.next().map(|v| v.parse().expect(usage));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{db}{suffix}"));
    }
    let l = Ledger::open(LedgerOptions {
        sync,
        wal_autocheckpoint_pages: autocheckpoint,
        ..LedgerOptions::at(&db)
    })
    .expect("open");
    let ids: Vec<String> = (0..sessions)
        .map(|i| {
            l.create_session(CreateSession::titled(format!("s{i}")))
                .expect("create")
                .session_id
                .to_string()
        })
        .collect();
    if let Some(ms) = std::env::var("LOGBOOK_LOOP_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let mut x: u64 = 11;
    let t = std::time::Instant::now();
    for i in 0..n {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let req = CheckpointRequest {
            step: Some(format!("step {i}")),
            note: Some("a short note".into()),
            ..Default::default()
        };
        l.checkpoint(
            &ids[((x >> 33) as usize) % ids.len()],
            req,
            &Mutation::default(),
        )
        .expect("checkpoint");
    }
    println!("{:.1} µs/op", t.elapsed().as_secs_f64() * 1e6 / n as f64);
}
