//! The writer queue: an exclusive `flock` on `<db>-lock` (mode 0600), taken
//! just before `BEGIN IMMEDIATE` and released just after `COMMIT`/`ROLLBACK`,
//! never held between transactions. SQLite's write lock cannot be waited on
//! (waiters poll, and dozens of pollers eat the CPU the holder needs);
//! waiters on the `flock` sleep in the kernel instead. SQLite's lock still
//! guards correctness against every other client; this one only orders
//! logbook's writers. The file is named from the database's canonical path
//! (symlinks and `..` resolved, as SQLite names its `-wal`), so every
//! spelling of a path queues on one lock; like WAL, it needs a local file
//! system.
//!
//! A `flock` cannot time out, so a contended wait runs on a helper thread of
//! the handle (started at its first contended wait) on the handle's one file
//! description. The writer gives up at its deadline (STORE_BUSY); the helper
//! then releases the lock as soon as it gets it, unless the handle's next
//! write has taken that wait over.
//!
//! On Linux (unless the `portable-lock` feature is on) a waiter first queues
//! on its process's *lane*, an open-file-description byte-range lock on byte
//! `1 + pid % 4` (`F_OFD_SETLKW`, independent of `flock`), so a release wakes
//! at most one waiter per lane: with 32 writer processes this halves the
//! worst wait (BENCHMARKS.md, "A simpler writer queue").

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
            slot = (self.changed)
                .wait_while(slot, |s| !matches!(s, Slot::Asked | Slot::Closed))
                .unwrap_or_else(PoisonError::into_inner);
            if *slot == Slot::Closed {
                return;
            }
            *slot = Slot::Waiting { abandoned: false };
            drop(slot);
            let locked = {
                let _lane = lane::take(&self.file);
                self.file.lock().is_ok()
            };
            slot = self.slot();
            if locked && *slot == (Slot::Waiting { abandoned: false }) {
                *slot = Slot::Delivered;
            } else {
                let _ = self.file.unlock();
                if *slot == Slot::Closed {
                    return;
                }
                *slot = Slot::Idle;
            }
            self.changed.notify_all();
        }
    }
}

impl WriterLock {
    /// The lock for the database at `db`: `<canonical path>-lock` (the path
    /// as given if it cannot be resolved); the file is created at the first
    /// write.
    pub fn new(db: &Path) -> Self {
        let canonical = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf());
        let mut path = canonical.into_os_string();
        path.push("-lock");
        WriterLock {
            path: PathBuf::from(path),
            shared: None,
            helper: false,
        }
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
mod lane {
    use nix::fcntl::{fcntl, FcntlArg::F_OFD_SETLK, FcntlArg::F_OFD_SETLKW};
    use nix::libc::{c_short, flock, F_UNLCK, F_WRLCK, SEEK_SET};

    /// A held lane; released on drop.
    pub struct Lane<'f>(&'f std::fs::File, i64);

    fn byte(kind: i32, at: i64) -> flock {
        let (l_type, l_whence) = (kind as c_short, SEEK_SET as c_short);
        flock {
            l_type,
            l_whence,
            l_start: at,
            l_len: 1,
            l_pid: 0,
        }
    }

    /// Blocks until this process's lane is free, then holds it; `None` when
    /// byte-range locks are unavailable (the `flock` alone still works).
    pub fn take(file: &std::fs::File) -> Option<Lane<'_>> {
        let at = 1 + i64::from(std::process::id() % 4);
        fcntl(file, F_OFD_SETLKW(&byte(F_WRLCK, at))).ok()?;
        Some(Lane(file, at))
    }

    impl Drop for Lane<'_> {
        fn drop(&mut self) {
            let _ = fcntl(self.0, F_OFD_SETLK(&byte(F_UNLCK, self.1)));
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
mod tests;
