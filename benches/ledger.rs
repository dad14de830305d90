//! Criterion benches of the library API (file DBs, real pragmas, fixed seeds).
//!
//! `cargo bench --bench ledger`. The ratios against baselines that
//! BENCHMARKS.md reports come from `cargo bench --bench report`.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use logbook::{
    CheckpointRequest, CreateSession, Ledger, LedgerOptions, ListSessions, Mutation, SessionStatus,
    SyncMode,
};
use std::time::Duration;

fn ledger(dir: &tempfile::TempDir, sync: SyncMode, sessions: usize) -> (Ledger, Vec<String>) {
    let l = Ledger::open(LedgerOptions {
        sync,
        ..LedgerOptions::at(dir.path().join("b.db"))
    })
    .unwrap();
    let ids = (0..sessions)
        .map(|i| {
            let req = CreateSession {
                app: Some(format!("app{}", i % 7)),
                ..CreateSession::titled(format!("s{i}"))
            };
            l.create_session(req).unwrap().session_id.to_string()
        })
        .collect();
    (l, ids)
}

fn checkpoint(c: &mut Criterion) {
    let mut g = c.benchmark_group("checkpoint");
    g.measurement_time(Duration::from_secs(4)).sample_size(30);
    for (name, sync) in [("normal", SyncMode::Normal), ("full", SyncMode::Full)] {
        let dir = tempfile::tempdir().unwrap();
        let (l, ids) = ledger(&dir, sync, 1_000);
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("sync", name), |b| {
            b.iter(|| {
                i += 1;
                let req = CheckpointRequest {
                    step: Some(format!("step {i}")),
                    note: Some("a short note".into()),
                    ..Default::default()
                };
                l.checkpoint(&ids[(i * 7919) % ids.len()], req, &Mutation::default())
                    .unwrap()
            });
        });
    }
    g.finish();
}

fn create(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let (l, _) = ledger(&dir, SyncMode::Normal, 0);
    let mut g = c.benchmark_group("create");
    g.measurement_time(Duration::from_secs(3)).sample_size(30);
    g.bench_function("normal", |b| {
        b.iter(|| {
            l.create_session(CreateSession {
                app: Some("a".into()),
                tags: vec!["t".into()],
                ..CreateSession::titled("bench")
            })
            .unwrap()
        });
    });
    g.finish();
}

fn list_and_show(c: &mut Criterion) {
    let mut g = c.benchmark_group("read");
    g.measurement_time(Duration::from_secs(3)).sample_size(30);
    for n in [1_000usize, 20_000] {
        let dir = tempfile::tempdir().unwrap();
        let (l, ids) = ledger(&dir, SyncMode::Normal, n);
        let q = ListSessions {
            statuses: vec![SessionStatus::Active],
            app: Some("app3".into()),
            ..Default::default()
        };
        g.bench_function(BenchmarkId::new("list_status_app_limit20", n), |b| {
            b.iter(|| l.list_sessions(&q).unwrap());
        });
        for i in 0..100 {
            let req = CheckpointRequest {
                step: Some(format!("s{i}")),
                ..Default::default()
            };
            l.checkpoint(&ids[0], req, &Mutation::default()).unwrap();
        }
        g.bench_function(BenchmarkId::new("show_101_events", n), |b| {
            b.iter(|| l.show_session(&ids[0]).unwrap());
        });
    }
    g.finish();
}

fn open(c: &mut Criterion) {
    let mut g = c.benchmark_group("open");
    g.measurement_time(Duration::from_secs(3)).sample_size(20);
    g.bench_function("cold_create_and_migrate", |b| {
        b.iter_batched(
            || tempfile::tempdir().unwrap(),
            |dir| Ledger::open(LedgerOptions::at(dir.path().join("o.db"))).unwrap(),
            BatchSize::PerIteration,
        );
    });
    let dir = tempfile::tempdir().unwrap();
    drop(Ledger::open(LedgerOptions::at(dir.path().join("o.db"))).unwrap());
    g.bench_function("existing", |b| {
        b.iter(|| Ledger::open(LedgerOptions::at(dir.path().join("o.db"))).unwrap());
    });
    g.finish();
}

criterion_group!(benches, checkpoint, create, list_and_show, open);
criterion_main!(benches);
