//! A fresh process's first checkpoints, and the longest wait for a WAL
//! checkpoint (docs/design.md, "WAL checkpoints").
//!
//! Both databases hold 10,000 sessions and were closed (so the last close
//! checkpointed and removed the WAL, as after any CLI command): a new
//! handle's first writes grow a new `-wal`. The naive baseline and
//! `Ledger::checkpoint` run in alternating blocks of 100 ops from the first
//! op on, each op timed.

use super::{naive_checkpoint, naive_open, pct, Lcg};
use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation, SyncMode};
use rusqlite::Connection;
use std::path::Path;
use std::time::Instant;

/// Ops per process in this section.
const OPS: usize = 4_000;
/// Ops per alternating block.
const BLOCK: usize = 100;
/// The first ops of a process, reported on their own.
const FIRST: usize = 1_800;

/// A `Ledger`'s options for the bench: the defaults, or
/// `LOGBOOK_BENCH_AUTOCKPT` pages of `wal_autocheckpoint` (for sweeps).
pub fn lib_options(path: &Path, sync: SyncMode) -> LedgerOptions {
    let mut o = LedgerOptions {
        sync,
        ..LedgerOptions::at(path)
    };
    if let Some(p) = std::env::var("LOGBOOK_BENCH_AUTOCKPT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        o.wal_autocheckpoint_pages = Some(p);
    }
    o
}

fn wal_bytes(path: &Path) -> u64 {
    let mut w = path.as_os_str().to_owned();
    w.push("-wal");
    std::fs::metadata(w).map_or(0, |m| m.len())
}

/// Builds both databases and closes them; returns the sessions' ids.
fn build(dir: &Path, sync: SyncMode) -> Vec<String> {
    drop(naive_open(&dir.join("naive.db"), sync, 1000));
    let l = Ledger::open(lib_options(&dir.join("lib.db"), sync)).unwrap();
    let ids = (0..10_000)
        .map(|i| {
            let req = CreateSession {
                app: Some(format!("app{}", i % 7)),
                ..CreateSession::titled(format!("session {i}"))
            };
            l.create_session(req).unwrap().session_id.to_string()
        })
        .collect();
    drop(l);
    ids
}

struct Times {
    naive: Vec<f64>,
    lib: Vec<f64>,
    /// The handle's (background, inline) checkpoints.
    checkpoints: (u64, u64),
}

fn run(dir: &Path, sync: SyncMode, ids: &[String]) -> Times {
    let naive_path = dir.join("naive.db");
    let lib_path = dir.join("lib.db");
    assert_eq!(
        (wal_bytes(&naive_path), wal_bytes(&lib_path)),
        (0, 0),
        "a closed database keeps no WAL"
    );
    let naive = Connection::open(&naive_path).unwrap();
    naive
        .pragma_update(
            None,
            "synchronous",
            if sync == SyncMode::Full {
                "FULL"
            } else {
                "NORMAL"
            },
        )
        .unwrap();
    naive
        .pragma_update(None, "wal_autocheckpoint", 1000)
        .unwrap();
    let lib = Ledger::open(lib_options(&lib_path, sync)).unwrap();
    let mut rng = Lcg(23);
    let mut t = Times {
        naive: Vec::with_capacity(OPS),
        lib: Vec::with_capacity(OPS),
        checkpoints: (0, 0),
    };
    let mut n = 0;
    while t.lib.len() < OPS {
        for _ in 0..BLOCK {
            n += 1;
            let t0 = Instant::now();
            naive_checkpoint(&naive, &format!("ses_{:016x}", rng.next(10_000)), n);
            t.naive.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        for _ in 0..BLOCK {
            n += 1;
            let id = &ids[rng.next(ids.len())];
            let req = CheckpointRequest {
                step: Some(format!("step {n}")),
                note: Some("a short note".into()),
                ..Default::default()
            };
            let t0 = Instant::now();
            lib.checkpoint(id, req, &Mutation::default()).unwrap();
            t.lib.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    t.checkpoints = lib.wal_checkpoints();
    t
}

fn rate(us: &[f64]) -> f64 {
    us.len() as f64 / (us.iter().sum::<f64>() / 1e6)
}

/// Prints the section.
pub fn section(dir: &Path) {
    println!("## A fresh process's first checkpoints, and checkpoint stalls\n");
    println!(
        "10,000 sessions, database closed before (no WAL); a new handle runs {OPS} checkpoints \
         in alternating blocks of {BLOCK} with the naive baseline's, each op timed. Ratio = \
         logbook ops/s ÷ naive ops/s over the same op range.\n"
    );
    println!("| synchronous | ops 1–{FIRST} | ops {}–{OPS} | logbook max | logbook ops > 10 ms | checkpoints in a logbook COMMIT / on its helper | naive max |", FIRST + 1);
    println!("|---|---|---|---|---|---|---|");
    for sync in [SyncMode::Full, SyncMode::Normal] {
        let d = tempfile::tempdir_in(dir).unwrap();
        let ids = build(d.path(), sync);
        let mut t = run(d.path(), sync, &ids);
        let first = rate(&t.lib[..FIRST]) / rate(&t.naive[..FIRST]);
        let rest = rate(&t.lib[FIRST..]) / rate(&t.naive[FIRST..]);
        let slow = t.lib.iter().filter(|us| **us > 10_000.0).count();
        let (helper, inline) = t.checkpoints;
        let name = if sync == SyncMode::Full {
            "FULL"
        } else {
            "NORMAL"
        };
        let in_commit = if sync == SyncMode::Full {
            "all (SQLite's autocheckpoint)".to_owned()
        } else {
            format!("{inline} / {helper}")
        };
        println!(
            "| {name} | {first:.2} | {rest:.2} | {:.1} ms | {slow} | {in_commit} | {:.1} ms |",
            pct(&mut t.lib, 1.0) / 1e3,
            pct(&mut t.naive, 1.0) / 1e3,
        );
    }
    println!();
}
