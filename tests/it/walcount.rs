//! WAL frames written per operation: deterministic (wal_autocheckpoint = 0,
//! frames counted from the `-wal` size). Shared by the write-path test and
//! the benchmark report (`benches/report.rs` includes this file).

use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation, SyncMode};
use std::path::Path;

/// Frames per op for create, checkpoint and complete.
#[derive(Debug, Clone, Copy)]
pub struct PagesPerOp {
    pub create: f64,
    pub checkpoint: f64,
    pub checkpoint_wide: f64,
    pub complete: f64,
}

fn wal_frames(db: &Path) -> u64 {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let size = std::fs::metadata(wal).map(|m| m.len()).unwrap_or(0);
    size.saturating_sub(32) / (4096 + 24)
}

fn truncate_wal(db: &Path) {
    let c = rusqlite::Connection::open(db).unwrap();
    let (busy, _, _): (i64, i64, i64) = c
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(busy, 0);
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self, max: u64) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % max) as usize
    }
}

/// Measures on a fresh DB at `db`: `sessions` sessions (the first `wide` of
/// them with a 64 KiB context), then `ops` operations of each kind.
pub fn measure(db: &Path, sessions: usize, wide: usize, ops: usize) -> PagesPerOp {
    let l = Ledger::open(LedgerOptions {
        sync: SyncMode::Normal,
        wal_autocheckpoint_pages: Some(0),
        ..LedgerOptions::at(db)
    })
    .unwrap();
    let big = serde_json::json!({ "blob": "c".repeat(64 * 1024 - 11) });
    let mut ids = Vec::with_capacity(sessions);
    for i in 0..sessions {
        let mut req = CreateSession {
            app: Some(format!("app{}", i % 7)),
            tags: vec!["t".into()],
            ..CreateSession::titled(format!("session {i}"))
        };
        if i < wide {
            req.context = Some(big.clone());
        }
        ids.push(l.create_session(req).unwrap().session_id.to_string());
    }
    let mut rng = Lcg(7);
    let per = |f: &mut dyn FnMut(usize)| -> f64 {
        truncate_wal(db);
        let before = wal_frames(db);
        for i in 0..ops {
            f(i);
        }
        (wal_frames(db) - before) as f64 / ops as f64
    };
    let step = |i: usize| CheckpointRequest {
        step: Some(format!("step {i}")),
        note: Some("a short note".into()),
        ..Default::default()
    };
    let checkpoint = per(&mut |i| {
        let id = &ids[wide + rng.next((sessions - wide) as u64)];
        l.checkpoint(id, step(i), &Mutation::default()).unwrap();
    });
    let checkpoint_wide = per(&mut |i| {
        let id = &ids[rng.next(wide as u64)];
        l.checkpoint(id, step(i), &Mutation::default()).unwrap();
    });
    let create = per(&mut |i| {
        l.create_session(CreateSession {
            app: Some("app1".into()),
            tags: vec!["t".into()],
            ..CreateSession::titled(format!("new {i}"))
        })
        .unwrap();
    });
    let mut next = wide;
    let complete = per(&mut |_| {
        l.complete(&ids[next], "done", &Mutation::default())
            .unwrap();
        next += 1;
    });
    PagesPerOp {
        create,
        checkpoint,
        checkpoint_wide,
        complete,
    }
}
