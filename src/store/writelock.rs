//! The writer queue: a kernel lock that logbook writers take before
//! `BEGIN IMMEDIATE` and release after `COMMIT`/`ROLLBACK`.
//!
//! SQLite's write lock cannot be waited on: a writer that finds it taken
//! sleeps and polls (the busy handler), and with dozens of writer processes
//! on a small host the pollers eat the CPU the holder needs. So each write
//! first takes an exclusive `flock` on a sidecar file, `<db>-lock` (mode
//! 0600), named from the database's canonical path (symlinks and `..`
//! resolved, as SQLite names its `-wal`), so that every spelling of one
//! database queues on one lock. Waiters sleep in the kernel and are woken
//! when the holder releases it. The lock is held for one transaction only,
//! never between two. SQLite's own lock still guards correctness against
//! every other client; this one only orders logbook's writers. `flock`
//! assumes a local file system, as SQLite's WAL does.
//!
//! A `flock` cannot time out, so a contended wait runs on a helper thread of
//! the handle (started at its first contended wait, reused after), on the
//! handle's one file description; the caller waits for it until its
//! deadline, then gives up (STORE_BUSY), and the helper releases the lock
//! the moment it gets it, unless the handle's next write has come along
//! meanwhile and takes that wait over.
//!
//! On Linux (unless the `portable-lock` feature is on), a waiter first
//! queues on its process's *lane*, an open-file-description byte-range lock
//! on byte `1 + pid % 4` of the same file (`F_OFD_SETLKW`, which does not
//! interact with `flock`), so a release wakes at most one waiter per lane
//! instead of every waiting process; this halves the worst wait with 32
//! writer processes (BENCHMARKS.md, "A simpler writer queue").

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

/// The writer lock of one database, for one handle.
#[derive(Debug)]
pub struct WriterLock {
    path: PathBuf,
    /// Opened at the first write (never for a handle that only reads).
    shared: Option<Arc<Shared>>,
    /// The helper thread has been started.
    helper: bool,
}

/// A held lock; released when dropped.
#[derive(Debug)]
pub struct Held(Arc<Shared>);

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.0.file.unlock();
    }
}

/// Where a contended wait is, shared by the writer and its helper thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// No wait.
    Idle,
    /// A wait is asked for; the helper has not started it.
    Asked,
    /// The helper is blocked in the lock; `abandoned` once the writer gave up.
    Waiting { abandoned: bool },
    /// The helper got the lock for the writer.
    Delivered,
    /// The handle is gone: the helper ends.
    Closed,
}

#[derive(Debug)]
struct Shared {
    file: File,
    slot: Mutex<Slot>,
    changed: Condvar,
}

impl Shared {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        // Nothing is left half-done under this mutex.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The helper thread: takes the lock each time it is asked to, then
    /// hands it to the writer, or releases it if the writer stopped waiting.
    fn run(&self) {
        let mut slot = self.slot();
        loop {
            match *slot {
                Slot::Closed => return,
                Slot::Asked => {}
                _ => {
                    slot = self
                        .changed
                        .wait(slot)
                        .unwrap_or_else(PoisonError::into_inner);
                    continue;
                }
            }
            *slot = Slot::Waiting { abandoned: false };
            drop(slot);
            let locked = {
                let _lane = lane::take(&self.file);
                self.file.lock().is_ok()
            };
            slot = self.slot();
            match *slot {
                Slot::Waiting { abandoned: false } if locked => *slot = Slot::Delivered,
                Slot::Closed => {
                    let _ = self.file.unlock();
                    return;
                }
                _ => {
                    let _ = self.file.unlock();
                    *slot = Slot::Idle;
                }
            }
            self.changed.notify_all();
        }
    }
}

/// The lock file of the database at `db`: `<canonical path>-lock`, or the
/// path as given if it cannot be resolved (then opening it fails too).
fn lock_path(db: &Path) -> PathBuf {
    let mut s = std::fs::canonicalize(db)
        .unwrap_or_else(|_| db.to_path_buf())
        .into_os_string();
    s.push("-lock");
    PathBuf::from(s)
}

impl WriterLock {
    /// The lock for the database at `db`; the file is created at the first
    /// write.
    pub fn new(db: &Path) -> Self {
        WriterLock {
            path: lock_path(db),
            shared: None,
            helper: false,
        }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the lock, waiting until `deadline` at most. `Ok(None)` means
    /// the deadline passed (the caller reports STORE_BUSY); an I/O error
    /// means the lock file cannot be used, and the caller goes on with
    /// SQLite's own locking alone.
    pub fn acquire(&mut self, deadline: Instant) -> std::io::Result<Option<Held>> {
        let shared = match &self.shared {
            Some(s) => Arc::clone(s),
            None => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .mode(0o600)
                    .open(&self.path)?;
                let s = Arc::new(Shared {
                    file,
                    slot: Mutex::new(Slot::Idle),
                    changed: Condvar::new(),
                });
                self.shared = Some(Arc::clone(&s));
                s
            }
        };
        let mut slot = shared.slot();
        match *slot {
            Slot::Idle => match shared.file.try_lock() {
                Ok(()) => return Ok(Some(Held(Arc::clone(&shared)))),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            },
            // An earlier write's wait is still under way: take it over.
            Slot::Waiting { .. } => *slot = Slot::Waiting { abandoned: false },
            Slot::Asked | Slot::Delivered | Slot::Closed => {}
        }
        if Instant::now() >= deadline && *slot == Slot::Idle {
            return Ok(None);
        }
        if !self.helper {
            let thread_side = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("logbook-writer-lock".into())
                .spawn(move || thread_side.run())?;
            self.helper = true;
        }
        if *slot == Slot::Idle {
            *slot = Slot::Asked;
            shared.changed.notify_all();
        }
        loop {
            match *slot {
                Slot::Delivered => {
                    *slot = Slot::Idle;
                    return Ok(Some(Held(Arc::clone(&shared))));
                }
                // The helper's `flock` failed: go on without the lock.
                Slot::Idle => return Err(std::io::Error::other("the writer lock wait failed")),
                _ => {}
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                *slot = match *slot {
                    Slot::Waiting { .. } => Slot::Waiting { abandoned: true },
                    _ => Slot::Idle,
                };
                return Ok(None);
            }
            slot = shared
                .changed
                .wait_timeout(slot, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        if let Some(s) = &self.shared {
            // A wait still under way ends when the helper gets the lock,
            // which it then releases.
            *s.slot() = Slot::Closed;
            s.changed.notify_all();
        }
    }
}

/// Waiter lanes: byte `1 + pid % 4` of the lock file, held while waiting.
#[cfg(all(target_os = "linux", not(feature = "portable-lock")))]
pub(crate) mod lane {
    use nix::fcntl::{fcntl, FcntlArg};
    use nix::libc::{c_short, flock, F_UNLCK, F_WRLCK, SEEK_SET};
    use std::fs::File;

    /// A held lane; released on drop.
    pub struct Lane<'f>(&'f File, i64);

    pub(crate) fn range(kind: c_short, at: i64) -> flock {
        flock {
            l_type: kind,
            l_whence: SEEK_SET as c_short,
            l_start: at,
            l_len: 1,
            l_pid: 0,
        }
    }

    /// Blocks until this process's lane is free, then holds it; `None` when
    /// byte-range locks are unavailable (the `flock` alone still works).
    pub fn take(file: &File) -> Option<Lane<'_>> {
        let at = 1 + i64::from(std::process::id() % 4);
        fcntl(file, FcntlArg::F_OFD_SETLKW(&range(F_WRLCK as c_short, at))).ok()?;
        Some(Lane(file, at))
    }

    impl Drop for Lane<'_> {
        fn drop(&mut self) {
            let _ = fcntl(
                self.0,
                FcntlArg::F_OFD_SETLK(&range(F_UNLCK as c_short, self.1)),
            );
        }
    }
}

/// The portable path: no lanes, every waiter on the `flock` itself.
#[cfg(not(all(target_os = "linux", not(feature = "portable-lock"))))]
mod lane {
    pub fn take(_: &std::fs::File) -> Option<()> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    /// Another holder of the lock: a file description of its own.
    fn holder(l: &WriterLock) -> File {
        let f = OpenOptions::new().write(true).open(l.path()).unwrap();
        f.lock().unwrap();
        f
    }

    fn is_free(l: &WriterLock) -> bool {
        let probe = OpenOptions::new().write(true).open(l.path()).unwrap();
        probe.try_lock().is_ok()
    }

    /// Polls an immediate take until it succeeds (or 10 s).
    fn eventually_takes(l: &mut WriterLock) -> Option<Held> {
        let until = far();
        while Instant::now() < until {
            if let Some(h) = l.acquire(Instant::now()).unwrap() {
                return Some(h);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        None
    }

    #[test]
    fn the_lock_is_never_kept_between_writes() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = WriterLock::new(&dir.path().join("l.db"));
        drop(a.acquire(far()).unwrap().unwrap());
        // `a` has to wait once (it gets its helper thread), then writes back
        // to back: after every write the lock is free for anyone.
        let other = holder(&a);
        let t = std::thread::spawn(move || {
            let held = a.acquire(far()).unwrap().unwrap();
            (a, held)
        });
        std::thread::sleep(Duration::from_millis(20));
        drop(other);
        let (mut a, held) = t.join().unwrap();
        assert!(!is_free(&a), "a delivered lock is held");
        drop(held);
        for i in 0..50 {
            assert!(is_free(&a), "kept after write {i}");
            let held = a.acquire(Instant::now()).unwrap();
            assert!(held.is_some(), "write {i}");
            assert!(!is_free(&a), "not held during write {i}");
        }
        assert!(is_free(&a));
    }

    #[test]
    fn a_wait_past_its_deadline_is_abandoned_and_its_lock_released() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = WriterLock::new(&dir.path().join("l.db"));
        drop(a.acquire(far()).unwrap().unwrap());
        let other = holder(&a);
        let t = Instant::now();
        assert!(a
            .acquire(Instant::now() + Duration::from_millis(30))
            .unwrap()
            .is_none());
        assert!(t.elapsed() >= Duration::from_millis(30));
        // The helper gets the lock once `other` lets go, and releases it.
        drop(other);
        let shared = Arc::clone(a.shared.as_ref().unwrap());
        let until = far();
        while *shared.slot() != Slot::Idle {
            assert!(Instant::now() < until, "the abandoned wait never ended");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(is_free(&a), "the abandoned wait kept the lock");
        // A deadline already passed: only an immediate take can succeed.
        assert!(a.acquire(Instant::now()).unwrap().is_some());
    }

    #[test]
    fn the_next_write_takes_an_abandoned_wait_over() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = WriterLock::new(&dir.path().join("l.db"));
        drop(a.acquire(far()).unwrap().unwrap());
        let other = holder(&a);
        assert!(a.acquire(Instant::now()).unwrap().is_none());
        assert!(a
            .acquire(Instant::now() + Duration::from_millis(20))
            .unwrap()
            .is_none());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(other);
        });
        let held = a.acquire(far()).unwrap();
        assert!(held.is_some());
        assert!(!is_free(&a));
        t.join().unwrap();
        drop(held);
        assert!(is_free(&a));
    }

    #[test]
    fn dropping_a_waiting_handle_leaves_no_lock_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = WriterLock::new(&dir.path().join("l.db"));
        drop(a.acquire(far()).unwrap().unwrap());
        let other = holder(&a);
        assert!(a
            .acquire(Instant::now() + Duration::from_millis(20))
            .unwrap()
            .is_none());
        let mut b = WriterLock::new(&dir.path().join("l.db"));
        // `a`'s helper is still blocked in the lock; it ends once it gets it.
        drop(a);
        drop(other);
        let held = eventually_takes(&mut b);
        assert!(held.is_some(), "the dropped handle's helper kept the lock");
        drop(held);
        assert!(is_free(&b));
    }

    #[test]
    fn the_lock_file_is_named_from_the_canonical_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::write(root.join("real/l.db"), b"").unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        std::os::unix::fs::symlink("real/l.db", root.join("l.db")).unwrap();
        let want = root.join("real/l.db-lock");
        for p in ["real/l.db", "link/l.db", "l.db", "real/../link/./l.db"] {
            assert_eq!(WriterLock::new(&root.join(p)).path(), want, "{p}");
        }
    }

    /// Whether any lane byte of the lock file is held (by another file
    /// description than the probe's).
    #[cfg(target_os = "linux")]
    fn a_lane_is_held(lock_file: &Path) -> bool {
        use nix::fcntl::{fcntl, FcntlArg};
        use nix::libc::{c_short, F_UNLCK, F_WRLCK, SEEK_SET};
        let probe = OpenOptions::new().write(true).open(lock_file).unwrap();
        let mut range = nix::libc::flock {
            l_type: F_WRLCK as c_short,
            l_whence: SEEK_SET as c_short,
            l_start: 1,
            l_len: 4,
            l_pid: 0,
        };
        fcntl(&probe, FcntlArg::F_OFD_GETLK(&mut range)).unwrap();
        range.l_type != F_UNLCK as c_short
    }

    /// On Linux a waiter holds its lane while it waits, unless the
    /// `portable-lock` feature forces the portable path.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_waiter_holds_a_lane_only_off_the_portable_path() {
        let lanes = !cfg!(feature = "portable-lock");
        let dir = tempfile::tempdir().unwrap();
        let mut a = WriterLock::new(&dir.path().join("l.db"));
        drop(a.acquire(far()).unwrap().unwrap());
        let (other, path) = (holder(&a), a.path().to_path_buf());
        let t = std::thread::spawn(move || {
            let got = a.acquire(far()).unwrap().is_some();
            (a, got)
        });
        // With lanes, wait until the waiter holds its lane; without, give it
        // time enough to have taken one.
        std::thread::sleep(Duration::from_millis(50));
        let until = far();
        while lanes && !a_lane_is_held(&path) {
            assert!(Instant::now() < until, "the waiter never took its lane");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(a_lane_is_held(&path), lanes);
        drop(other);
        let (_a, got) = t.join().unwrap();
        assert!(got);
        assert!(!a_lane_is_held(&path));
    }
}
