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
//! The wait honours the busy timeout: a blocked `flock` runs on a helper
//! thread with its own file description, and if the deadline passes first
//! the caller gets STORE_BUSY; the helper then releases the lock the moment it
//! gets it (dropping the file closes the description).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

/// The sidecar lock file of a database.
#[derive(Debug)]
pub struct WriterLock {
    path: PathBuf,
    file: Option<File>,
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
        // Contended: block in the kernel on a fresh file description.
        let waiter = open_lock_file(&self.path)?;
        let (tx, rx) = mpsc::sync_channel::<File>(1);
        std::thread::Builder::new()
            .name("logbook-writer-lock".into())
            .spawn(move || {
                if waiter.lock().is_ok() {
                    // If the caller gave up, the send fails or the value is
                    // dropped with the channel: either way the file closes
                    // and the lock is released.
                    let _ = tx.send(waiter);
                }
            })?;
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(f) => Ok(Some(Held(Some(f)))),
            Err(_) => Ok(None),
        }
    }

    /// Releases a held lock, keeping its file open for the next write.
    pub fn release(&mut self, mut held: Held) {
        if let Some(f) = held.0.take() {
            let _ = f.unlock();
            if self.file.is_none() {
                self.file = Some(f);
            }
        }
    }
}
