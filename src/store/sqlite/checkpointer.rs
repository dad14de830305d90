//! WAL checkpoints outside the callers' COMMITs (docs/design.md, "WAL checkpoints"), for
//! `synchronous=NORMAL`.
//!
//! SQLite's `wal_autocheckpoint` runs a checkpoint inside the COMMIT that
//! takes the WAL past its threshold, so one unlucky caller waits for the
//! whole copy (≈ 37 ms at 10,000 pages). At NORMAL a large threshold is
//! also what makes the steady state fast (each hot page is copied once per
//! thousands of WAL pages instead of many times), so instead of a smaller
//! threshold the checkpoint moves off the caller's path: a WAL hook on the
//! writer's connection replaces the autocheckpoint, and once the WAL holds
//! [`threshold`](Checkpointer::attach) pages it wakes a helper thread that
//! runs `PRAGMA wal_checkpoint(PASSIVE)` on a connection of its own.
//! A PASSIVE checkpoint never waits for readers or writers, and the next
//! writer restarts the WAL from its start once the copy is complete, so the
//! file is overwritten in place rather than grown.
//!
//! The thread starts at the first checkpoint that is due (a one-command CLI
//! process rarely gets there) and stops when the handle is dropped, after
//! its current checkpoint. Should the helper fall behind — the WAL at
//! [`INLINE_AFTER`] times the threshold — the writer checkpoints inline
//! once, as SQLite would, so the WAL stays bounded.
//!
//! At `synchronous=FULL` SQLite's own autocheckpoint stays (at 1,000
//! pages): a helper's fsyncs of the database file would queue with every
//! commit's fsync of the WAL (BENCHMARKS.md, "Checkpoint stalls").

use rusqlite::Connection;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// The writer checkpoints inline once the WAL holds this multiple of the
/// threshold (the helper has fallen behind; while it syncs a large copy the
/// WAL cannot restart): 2 × 5,000 pages, the ≈ 40 MiB that SQLite's own
/// autocheckpoint let it reach before, under the 64 MiB
/// `journal_size_limit`.
pub const INLINE_AFTER: (i32, i32) = (2, 1);

#[derive(Debug, Default)]
struct State {
    /// A checkpoint is due.
    due: bool,
    /// The handle is gone: stop after the current checkpoint.
    stop: bool,
    /// The helper thread, once started.
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// The WAL size, in pages, at which the hook next wakes the helper: the
    /// threshold in a new WAL; after a checkpoint of this one, an eighth of
    /// the threshold more than it held then, so a WAL that cannot restart
    /// yet (a reader's snapshot) does not wake the helper at every commit.
    next_at: AtomicI32,
    threshold: i32,
    /// Checkpoints the helper has run (diagnostics and tests).
    runs: std::sync::atomic::AtomicU64,
    /// Checkpoints the writer ran inside a COMMIT (the helper was behind).
    inline_runs: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in the helper leaves nothing half-done here.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The background checkpointer of one writer connection.
#[derive(Debug)]
pub struct Checkpointer {
    shared: Arc<Shared>,
}

impl Checkpointer {
    /// How many checkpoints the helper thread has run so far.
    pub fn runs(&self) -> u64 {
        self.shared.runs.load(Ordering::Relaxed)
    }

    /// How many checkpoints a COMMIT of the writer ran itself, because the
    /// helper had fallen behind.
    pub fn inline_runs(&self) -> u64 {
        self.shared.inline_runs.load(Ordering::Relaxed)
    }

    /// Replaces `conn`'s autocheckpoint with a hook that wakes the helper
    /// thread once the WAL holds `threshold` pages (1 or more).
    ///
    /// # Errors
    /// The driver's, when the hook cannot be installed.
    pub fn attach(conn: &mut Connection, path: &Path, threshold: u32) -> rusqlite::Result<Self> {
        let threshold = i32::try_from(threshold.max(1)).unwrap_or(i32::MAX);
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            next_at: AtomicI32::new(threshold),
            threshold,
            runs: std::sync::atomic::AtomicU64::new(0),
            inline_runs: std::sync::atomic::AtomicU64::new(0),
        });
        let hook_shared = shared.clone();
        let path = path.to_path_buf();
        let inline_at = threshold.saturating_mul(INLINE_AFTER.0) / INLINE_AFTER.1;
        let mut last = 0;
        conn.wal_hook(Some(move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
            if pages < last {
                // The WAL restarted from its beginning: a new cycle.
                hook_shared
                    .next_at
                    .store(hook_shared.threshold, Ordering::Relaxed);
            }
            last = pages;
            if pages >= inline_at {
                // Behind: as SQLite's autocheckpoint does, in this COMMIT.
                hook_shared.inline_runs.fetch_add(1, Ordering::Relaxed);
                let _ = wal.checkpoint();
            } else if pages >= hook_shared.next_at.load(Ordering::Relaxed) {
                wake(&hook_shared, &path);
            }
            Ok(())
        }))?;
        Ok(Checkpointer { shared })
    }
}

/// Marks a checkpoint due and wakes (or first starts) the helper.
fn wake(shared: &Arc<Shared>, path: &Path) {
    let mut st = shared.lock();
    st.due = true;
    if st.thread.is_none() && !st.stop {
        let s = shared.clone();
        let p = path.to_path_buf();
        // Without a thread the writer checkpoints inline once the WAL is
        // past INLINE_AFTER, and its close checkpoints: nothing is lost if
        // this fails.
        st.thread = std::thread::Builder::new()
            .name("logbook-checkpoint".into())
            .spawn(move || run(&s, &p))
            .ok();
    }
    drop(st);
    shared.wake.notify_one();
}

fn run(shared: &Shared, path: &Path) {
    let Ok(conn) = crate::store::sqlite::open::open_checkpointer(path) else {
        return;
    };
    loop {
        let mut st = shared.lock();
        while !st.due && !st.stop {
            st = shared.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        if st.stop {
            return;
        }
        st.due = false;
        drop(st);
        // The WAL's size in pages when it ran. Another connection already
        // checkpointing (the row says -1) or an error count as the size it
        // was woken at: either way the next wake waits for more pages.
        let woken_at = shared.next_at.load(Ordering::Relaxed);
        let log = conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1))
            .ok()
            .filter(|log| *log >= 0)
            .map_or(woken_at, |log| i32::try_from(log).unwrap_or(i32::MAX));
        shared.next_at.store(
            log.max(woken_at).saturating_add(shared.threshold / 8),
            Ordering::Relaxed,
        );
        shared.runs.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let thread = {
            let mut st = self.shared.lock();
            st.stop = true;
            st.thread.take()
        };
        self.shared.wake.notify_one();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{open, StoreConfig, SyncMode};
    use std::path::PathBuf;
    use std::time::{Duration, Instant};

    fn normal_db(dir: &Path) -> (Connection, PathBuf) {
        let path = dir.join("c.db");
        let conn = open(&StoreConfig {
            path: path.clone(),
            busy_timeout_ms: 1000,
            sync: SyncMode::Normal,
            wal_autocheckpoint_pages: 0,
            page_cache_kib: 2000,
            create: true,
        })
        .unwrap();
        conn.execute_batch("CREATE TABLE t (x BLOB)").unwrap();
        (conn, path)
    }

    fn wal_pages(path: &Path) -> u64 {
        let mut w = path.as_os_str().to_owned();
        w.push("-wal");
        std::fs::metadata(w).map_or(0, |m| m.len()) / 4120
    }

    /// Past the threshold the helper (not the writer) checkpoints, and the
    /// next writes restart the WAL from its start: the file stops growing.
    #[test]
    fn the_helper_checkpoints_past_the_threshold_and_the_wal_wraps() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, path) = normal_db(dir.path());
        let c = Checkpointer::attach(&mut conn, &path, 100).unwrap();
        let write = |n: usize| {
            for _ in 0..n {
                conn.execute("INSERT INTO t VALUES (zeroblob(3000))", [])
                    .unwrap();
            }
        };
        while wal_pages(&path) < 90 {
            write(1);
        }
        assert_eq!(c.runs(), 0, "no checkpoint below the threshold");
        // Up to the threshold and no further: a commit made while the
        // helper copies would be past the copy's end, and the WAL could not
        // restart (what the next assertion checks) until a later copy.
        while wal_pages(&path) < 100 {
            write(1);
        }
        let until = Instant::now() + Duration::from_secs(30);
        while c.runs() == 0 {
            assert!(Instant::now() < until, "the helper never checkpointed");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The copy is complete (nothing else writes), so writing goes on
        // from the WAL's start and its file does not grow past what it was.
        let size = wal_pages(&path);
        write(10);
        assert!(wal_pages(&path) <= size, "{} > {size}", wal_pages(&path));
    }

    /// Dropped, the checkpointer stops its thread and closes its connection
    /// first, so the writer's connection is the last: its close checkpoints
    /// and removes the WAL.
    #[test]
    fn dropping_it_stops_the_helper_before_the_writer_closes() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, path) = normal_db(dir.path());
        let c = Checkpointer::attach(&mut conn, &path, 10).unwrap();
        for _ in 0..20 {
            conn.execute("INSERT INTO t VALUES (zeroblob(3000))", [])
                .unwrap();
        }
        drop(c);
        drop(conn);
        assert_eq!(wal_pages(&path), 0);
        let mut w = path.as_os_str().to_owned();
        w.push("-wal");
        assert!(!Path::new(&w).exists(), "the last close removes the WAL");
    }
}
