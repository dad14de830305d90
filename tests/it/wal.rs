//! The WAL stays bounded (CASES C14): a reader that pins a snapshot lets it
//! grow, and once the reader ends the next writes bring it back under the
//! documented `journal_size_limit`; idle handles never pin it at all. (The
//! MCP server's share of C14 is in `mcp_server.rs`.)

use crate::common::*;
use logbook::store::sqlite::open::JOURNAL_SIZE_LIMIT_BYTES;
use logbook::{Ledger, LedgerOptions, ListSessions, Mutation};
use std::fs;
use std::path::Path;

/// A handle at synchronous=NORMAL, for tests that write a lot.
fn open_normal(path: &Path) -> Ledger {
    Ledger::open(LedgerOptions {
        sync: logbook::SyncMode::Normal,
        ..LedgerOptions::at(path)
    })
    .expect("open ledger")
}

fn wal_len(db: &Path) -> u64 {
    fs::metadata(companion(db, "-wal")).map_or(0, |m| m.len())
}

/// C14: while a reader pins a snapshot the WAL grows; once it ends, the WAL
/// drops back under the documented journal_size_limit (64 MiB). Checkpoints
/// with 1 KiB notes through the library (synchronous=NORMAL, for speed)
/// until the pinned WAL is past the limit, then 100 more.
#[test]
fn c14_wal_shrinks_back_once_a_pinning_reader_ends() {
    let env = TestEnv::new();
    let lg = open_normal(env.path());
    let idle = env.ledger();
    let id = lib_create(&lg, "t", "a");
    idle.show_session(&id).unwrap();
    idle.list_sessions(&ListSessions::default()).unwrap();
    let limit = u64::try_from(JOURNAL_SIZE_LIMIT_BYTES).unwrap();

    let reader = env.sql();
    reader.execute_batch("BEGIN").unwrap();
    let n: i64 = reader
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    let mut written = 0;
    while wal_len(env.path()) <= limit && written < 60_000 {
        lg.checkpoint(&id, cp("k", Some(&kib_note(written))), &Mutation::default())
            .unwrap();
        written += 1;
    }
    let pinned = wal_len(env.path());
    assert!(
        pinned > limit,
        "the reader should pin the WAL past the limit: {pinned}"
    );
    // doctor reports the WAL's size (under 2 × the limit it is not yet a
    // problem).
    let d = env.json(&["doctor"]).data();
    assert_eq!(d["wal_bytes"].as_u64(), Some(pinned));
    let n: i64 = reader
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "the reader keeps its snapshot");
    reader.execute_batch("COMMIT").unwrap();

    for i in 0..100 {
        lg.checkpoint(&id, cp("k", Some(&kib_note(i))), &Mutation::default())
            .unwrap();
    }
    let after = wal_len(env.path());
    assert!(
        after <= limit,
        "-wal is {after} bytes after the reader left (was {pinned})"
    );
    assert_eq!(
        env.json(&["doctor"]).data()["wal_bytes"].as_u64(),
        Some(after)
    );
    assert_eq!(
        assert_rev_matches_events(&env, &id),
        1 + written as i64 + 100
    );
    drop(idle);
}

/// C14 with only idle handles attached: they hold no read transaction or
/// unfinished statement between calls, so the WAL stays bounded throughout
/// (written past the checkpoint size twice over): at NORMAL the helper
/// thread checkpoints from 5,000 pages while the writer goes on, and the
/// writer checkpoints inline at 2 × that if the helper falls behind.
#[test]
fn c14_idle_handles_never_pin_the_wal() {
    let env = TestEnv::new();
    let lg = open_normal(env.path());
    let idle = env.ledger();
    let id = lib_create(&lg, "t", "a");
    idle.show_session(&id).unwrap();
    idle.session_events(&id, None, Some(5)).unwrap();
    idle.list_sessions(&ListSessions::default()).unwrap();
    let limit = u64::try_from(JOURNAL_SIZE_LIMIT_BYTES).unwrap();
    let pages = u64::from(logbook::ledger::WAL_CHECKPOINT_PAGES_NORMAL);
    let mut max = 0;
    let mut frames_written = 0u64;
    let mut i = 0;
    // Write at least twice the autocheckpoint size in frames.
    while frames_written < 2 * pages {
        let before = wal_len(env.path());
        lg.checkpoint(&id, cp("k", Some(&kib_note(i))), &Mutation::default())
            .unwrap();
        let after = wal_len(env.path());
        frames_written += after.saturating_sub(before).max(4096 + 24) / (4096 + 24);
        max = max.max(after);
        i += 1;
    }
    // At most 2 × `pages` frames (4096 + 24 bytes each), and one more
    // commit's worth of frames beyond it.
    let near = (pages * 2 + 64) * (4096 + 24) + 32;
    assert!(
        max < limit && max <= near,
        "-wal reached {max} bytes with only idle handles attached (autocheckpoint size ~{near})"
    );
    assert_eq!(assert_rev_matches_events(&env, &id), 1 + i as i64);
    drop(idle);
}
