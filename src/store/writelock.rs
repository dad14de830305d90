//! A kernel-queued writer lock that logbook writers take before
//! `BEGIN IMMEDIATE`.
//!
//! SQLite's write lock cannot be waited on: a writer that finds it taken
//! sleeps and polls (the busy handler). With dozens of writer processes on a
//! 2-core host, the pollers eat the CPU the lock holder needs, and throughput
//! collapses. So logbook writers first take an exclusive `flock` on a sidecar
//! file (`<db>-lock`, mode 0600): waiters sleep in the kernel and one is woken
//! the moment the holder releases it. SQLite's own lock still guards
//! correctness against every other client (the `sqlite3` shell, Python); this
//! lock only orders logbook's writers.
//!
//! A contended writer first queues on its process's *lane*, a byte-range lock
//! on byte `1 + pid % 4` of the same file (`F_OFD_SETLKW`; such locks do not
//! interact with `flock`), so a release of the main lock wakes at most one
//! waiter per lane instead of every waiting process.
//!
//! The wait honours the busy timeout: a blocked `flock` runs on one
//! long-lived helper thread per handle (spawned at the first contended wait,
//! reused after), on a file description of its own; if the deadline passes
//! first the caller gets STORE_BUSY, and the helper releases the lock the
//! moment it gets it — unless the next write has come along in the meantime,
//! which then takes that turn over.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// The sidecar lock file of a database.
#[derive(Debug)]
pub struct WriterLock {
    path: PathBuf,
    file: Option<File>,
    waiter: Option<Arc<Waiter>>,
}

/// A held lock; released on drop.
#[derive(Debug)]
pub struct Held(Option<File>);

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            let _ = f.unlock();
        }
    }
}

/// The hand-off between a writer and its long-lived waiting thread.
#[derive(Debug)]
enum Slot {
    /// Nothing asked.
    Idle,
    /// A file to lock, not yet picked up by the thread.
    Asked(File),
    /// The thread is blocked in `flock`; `abandoned` when the writer gave up.
    Waiting { abandoned: bool },
    /// The thread got the lock on this file.
    Delivered(File),
    /// The `WriterLock` is gone; the thread ends.
    Closed,
}

#[derive(Debug)]
struct Waiter {
    slot: Mutex<Slot>,
    changed: Condvar,
}

impl Waiter {
    fn start() -> std::io::Result<Arc<Waiter>> {
        let w = Arc::new(Waiter {
            slot: Mutex::new(Slot::Idle),
            changed: Condvar::new(),
        });
        let thread_side = Arc::clone(&w);
        std::thread::Builder::new()
            .name("logbook-writer-lock".into())
            .spawn(move || thread_side.run())?;
        Ok(w)
    }

    /// The thread: lock each file it is handed, in the kernel, then deliver
    /// it — or release it at once if the writer stopped waiting.
    fn run(&self) {
        loop {
            let file = {
                let Ok(mut slot) = self.slot.lock() else {
                    return;
                };
                loop {
                    match *slot {
                        Slot::Asked(_) => break,
                        Slot::Closed => return,
                        _ => {}
                    }
                    slot = match self.changed.wait(slot) {
                        Ok(s) => s,
                        Err(_) => return,
                    };
                }
                match std::mem::replace(&mut *slot, Slot::Waiting { abandoned: false }) {
                    Slot::Asked(f) => f,
                    _ => return,
                }
            };
            // Queue first on this process's lane (a byte-range lock, which
            // does not interact with `flock`), so that a release of the main
            // lock wakes at most one waiter per lane instead of all of them.
            let lane = lane_lock(&file);
            let locked = file.lock().is_ok();
            drop(lane);
            let Ok(mut slot) = self.slot.lock() else {
                return;
            };
            match *slot {
                Slot::Waiting { abandoned: false } if locked => *slot = Slot::Delivered(file),
                Slot::Closed => {
                    let _ = file.unlock();
                    return;
                }
                _ => {
                    let _ = file.unlock();
                    *slot = Slot::Idle;
                }
            }
            self.changed.notify_all();
        }
    }
}

/// Waiter lanes: a contended writer first takes byte `1 + pid % LANES` of the
/// lock file (an open-file-description byte-range lock), then the `flock`.
const LANES: u32 = 4;

/// A held lane; released on drop.
struct Lane<'f> {
    file: &'f File,
    at: i64,
}

fn byte_range(kind: nix::libc::c_short, at: i64) -> nix::libc::flock {
    nix::libc::flock {
        l_type: kind,
        l_whence: nix::libc::SEEK_SET as nix::libc::c_short,
        l_start: at,
        l_len: 1,
        l_pid: 0,
    }
}

/// Blocks until this process's lane is free, then holds it. `None` when
/// byte-range locks are unavailable (the `flock` alone still works).
fn lane_lock(file: &File) -> Option<Lane<'_>> {
    use nix::fcntl::{fcntl, FcntlArg};
    let at = 1 + i64::from(std::process::id() % LANES);
    let lock = byte_range(nix::libc::F_WRLCK as nix::libc::c_short, at);
    fcntl(file, FcntlArg::F_OFD_SETLKW(&lock)).ok()?;
    Some(Lane { file, at })
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        use nix::fcntl::{fcntl, FcntlArg};
        let unlock = byte_range(nix::libc::F_UNLCK as nix::libc::c_short, self.at);
        let _ = fcntl(self.file, FcntlArg::F_OFD_SETLK(&unlock));
    }
}

fn open_lock_file(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
}

impl WriterLock {
    /// The lock for the database at `db` (the file is created on first use).
    pub fn new(db: &Path) -> Self {
        let mut s = db.as_os_str().to_owned();
        s.push("-lock");
        WriterLock {
            path: PathBuf::from(s),
            file: None,
            waiter: None,
        }
    }

    /// Takes the lock, waiting until `deadline` at most. `Ok(None)` means the
    /// deadline passed (the caller reports STORE_BUSY); an I/O error means
    /// the lock file cannot be used, and the caller goes on without it.
    pub fn acquire(&mut self, deadline: Instant) -> std::io::Result<Option<Held>> {
        let file = match self.file.take() {
            Some(f) => f,
            None => open_lock_file(&self.path)?,
        };
        match file.try_lock() {
            Ok(()) => return Ok(Some(Held(Some(file)))),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
        self.file = Some(file);
        // Contended: wait in the kernel, on the long-lived thread, with a
        // fresh file description (flock locks belong to one).
        let waiter = match &self.waiter {
            Some(w) => Arc::clone(w),
            None => {
                let w = Waiter::start()?;
                self.waiter = Some(Arc::clone(&w));
                w
            }
        };
        let mut slot = waiter
            .slot
            .lock()
            .map_err(|_| std::io::Error::other("writer lock thread failed"))?;
        match &mut *slot {
            Slot::Idle => {
                *slot = Slot::Asked(open_lock_file(&self.path)?);
                waiter.changed.notify_all();
            }
            // Still waiting for an earlier, abandoned turn: take it over.
            Slot::Waiting { abandoned } => *abandoned = false,
            Slot::Asked(_) | Slot::Delivered(_) | Slot::Closed => {}
        }
        loop {
            if let Slot::Delivered(_) = *slot {
                if let Slot::Delivered(f) = std::mem::replace(&mut *slot, Slot::Idle) {
                    return Ok(Some(Held(Some(f))));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                match &mut *slot {
                    Slot::Waiting { abandoned } => *abandoned = true,
                    Slot::Asked(_) => *slot = Slot::Idle,
                    _ => {}
                }
                return Ok(None);
            }
            slot = match waiter.changed.wait_timeout(slot, left) {
                Ok((s, _)) => s,
                Err(_) => return Err(std::io::Error::other("writer lock thread failed")),
            };
        }
    }

    /// Releases a held lock, keeping one file open for the next write.
    pub fn release(&mut self, mut held: Held) {
        if let Some(f) = held.0.take() {
            let _ = f.unlock();
            if self.file.is_none() {
                self.file = Some(f);
            }
        }
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        if let Some(w) = &self.waiter {
            if let Ok(mut slot) = w.slot.lock() {
                // A lock delivered to nobody is released with its file.
                *slot = Slot::Closed;
                w.changed.notify_all();
            }
        }
    }
}
