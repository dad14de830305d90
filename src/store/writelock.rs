//! A kernel-queued writer lock that logbook writers take before
//! `BEGIN IMMEDIATE`.
//!
//! SQLite's write lock cannot be waited on: a writer that finds it taken
//! sleeps and polls (the busy handler). With dozens of writer processes on a
//! 2-core host, the pollers eat the CPU the lock holder needs, and throughput
//! collapses. So logbook writers first take an exclusive `flock` on a sidecar
//! file (`<db>-lock`, mode 0600): waiters sleep in the kernel and are woken
//! the moment the holder releases it. SQLite's own lock still guards
//! correctness against every other client (the `sqlite3` shell, Python); this
//! lock only orders logbook's writers.
//!
//! A contended writer first queues on its process's *lane*, a byte-range lock
//! on byte `1 + pid % 4` of the same file (`F_OFD_SETLKW`; such locks do not
//! interact with `flock`), so a release of the main lock wakes at most one
//! waiter per lane instead of every waiting process.
//!
//! **Turns.** A handle that has had to wait for the lock once, and now
//! writes back to back (the last [`STREAK`] writes each asked for the lock
//! within [`STREAM_GAP`] of the previous one's end), keeps the lock between its writes for a
//! *turn* of up to [`TURN`]. Releasing it after every write would wake a
//! waiter each time: on a small host that wake-up preempts the releasing
//! writer, and most of the time the woken waiter then finds the lock taken
//! again. At the end of a write past its turn the handle looks for waiters
//! (a lane held by another file description, `F_OFD_GETLK`): if there are
//! some, it releases the lock and lets [`YIELD`] pass before trying again, so
//! that a woken waiter takes the next turn; if not, a new turn begins. When
//! the writes stop, the handle's waiting thread releases the kept lock
//! [`IDLE`] after the last one (or at the end of the turn, if sooner), and
//! another handle of the same process that finds the lock kept releases it
//! at once (a process-wide list of handles per lock file). A handle
//! that has never waited (a CLI command, a lone writer) releases after every
//! write, as it has no waiting thread; so does one whose writes are further
//! apart than [`STREAM_GAP`].
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
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The longest a handle keeps the lock across consecutive writes while
/// writers of other processes wait.
pub const TURN: Duration = Duration::from_millis(5);
/// A handle keeps the lock only while its writes follow each other this
/// closely (from one write's end to the next one's request).
pub const STREAM_GAP: Duration = Duration::from_micros(100);
/// … and only after this many such writes in a row, so that a short burst
/// never keeps it idle after its last write.
pub const STREAK: u32 = 4;
/// A kept lock is released once this long has passed since the last write
/// (the waiting thread looks this often while its handle writes): as soon as
/// the writes stop following each other within [`STREAM_GAP`], give or take
/// the timer's slack.
pub const IDLE: Duration = STREAM_GAP;
/// After handing its turn over, a handle waits this long before it tries to
/// take the lock again, so that the waiter the release woke gets it.
pub const YIELD: Duration = Duration::from_micros(100);

/// The sidecar lock file of a database.
#[derive(Debug)]
pub struct WriterLock {
    path: PathBuf,
    /// A spare file description for the uncontended `try_lock`.
    file: Option<File>,
    waiter: Option<Arc<Waiter>>,
    /// When the turn of the lock this handle holds began.
    turn_start: Instant,
    /// When the current write asked for the lock, and when the previous
    /// write of this handle ended.
    asked: Instant,
    last_end: Option<Instant>,
    /// How many writes in a row asked within [`STREAM_GAP`] of the previous.
    streak: u32,
    /// When this handle last handed its turn over to a waiter.
    yielded: Option<Instant>,
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

/// What the writer and its waiting thread share.
#[derive(Debug)]
struct State {
    slot: Slot,
    /// The lock, held between two writes of one turn.
    kept: Option<File>,
    /// When the kept lock's turn began and when its last write ended.
    turn_start: Instant,
    last_end: Instant,
    /// The thread is in a timed wait for the kept lock's release time
    /// (otherwise a newly kept lock must wake it).
    armed: bool,
    /// This handle holds the lock (kept, or inside a write).
    holding: bool,
    /// The write waiting for a delivery will likely keep the lock (its
    /// handle is streaming), so the thread stays armed after delivering.
    stream_hint: bool,
    /// A file description the thread unlocked, for the next `try_lock`.
    spare: Option<File>,
}

impl State {
    /// Releases the lock kept between writes, if any (the one place that
    /// does); its file description stays as the spare. `true` if one was.
    fn release_kept(&mut self) -> bool {
        let Some(f) = self.kept.take() else {
            return false;
        };
        let _ = f.unlock();
        self.spare = Some(f);
        self.holding = false;
        true
    }
}

#[derive(Debug)]
struct Waiter {
    state: Mutex<State>,
    changed: Condvar,
}

fn thread_failed() -> std::io::Error {
    std::io::Error::other("writer lock thread failed")
}

impl Waiter {
    fn start() -> std::io::Result<Arc<Waiter>> {
        let now = Instant::now();
        let w = Arc::new(Waiter {
            state: Mutex::new(State {
                slot: Slot::Idle,
                kept: None,
                turn_start: now,
                last_end: now,
                armed: false,
                holding: false,
                stream_hint: false,
                spare: None,
            }),
            changed: Condvar::new(),
        });
        let thread_side = Arc::clone(&w);
        std::thread::Builder::new()
            .name("logbook-writer-lock".into())
            .spawn(move || thread_side.run())?;
        Ok(w)
    }

    fn lock(&self) -> std::io::Result<MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| thread_failed())
    }

    /// The thread: lock each file it is handed, in the kernel, then deliver
    /// it — or release it at once if the writer stopped waiting; and release
    /// a kept lock once its handle has stopped writing.
    fn run(&self) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        loop {
            match st.slot {
                Slot::Closed => {
                    st.release_kept();
                    return;
                }
                Slot::Asked(_) => {
                    let Slot::Asked(file) =
                        std::mem::replace(&mut st.slot, Slot::Waiting { abandoned: false })
                    else {
                        return;
                    };
                    drop(st);
                    // Queue first on this process's lane (a byte-range lock,
                    // which does not interact with `flock`), so that a
                    // release of the main lock wakes at most one waiter per
                    // lane instead of all of them.
                    let lane = lane_lock(&file);
                    let locked = file.lock().is_ok();
                    drop(lane);
                    st = match self.state.lock() {
                        Ok(s) => s,
                        Err(_) => return,
                    };
                    match st.slot {
                        Slot::Waiting { abandoned: false } if locked => {
                            st.slot = Slot::Delivered(file);
                            // A streaming writer holds it from now and will
                            // likely keep it: stay armed, so that keeping it
                            // after this write wakes nobody.
                            st.holding = st.stream_hint;
                        }
                        Slot::Closed => {
                            let _ = file.unlock();
                            continue;
                        }
                        _ => {
                            let _ = file.unlock();
                            st.slot = Slot::Idle;
                            st.spare = Some(file);
                        }
                    }
                    self.changed.notify_all();
                    continue;
                }
                _ => {}
            }
            // A kept lock goes once its handle has not written for IDLE or
            // its turn is over; while a write runs, look again after IDLE.
            let now = Instant::now();
            let due = if st.kept.is_some() {
                (st.turn_start + TURN).min(st.last_end + IDLE)
            } else if st.holding {
                now + IDLE
            } else {
                st = match self.changed.wait(st) {
                    Ok(s) => s,
                    Err(_) => return,
                };
                continue;
            };
            // Only a kept lock can be due (a write in progress looks again
            // after IDLE); releasing it also clears `holding`.
            if now >= due {
                st.release_kept();
                continue;
            }
            st.armed = true;
            st = match self.changed.wait_timeout(st, due - now) {
                Ok((s, _)) => s,
                Err(_) => return,
            };
            st.armed = false;
        }
    }
}

/// The waiting threads of this process's handles, by lock file, so that a
/// handle can release a lock another handle of the process keeps idle.
static KEEPERS: Mutex<Vec<(PathBuf, std::sync::Weak<Waiter>)>> = Mutex::new(Vec::new());

/// Releases every lock kept idle by another handle of this process on the
/// same lock file; `true` if one was.
fn release_kept_by_siblings(path: &Path, mine: Option<&Arc<Waiter>>) -> bool {
    let Ok(mut keepers) = KEEPERS.lock() else {
        return false;
    };
    keepers.retain(|(_, w)| w.strong_count() > 0);
    let mut released = false;
    for (p, w) in keepers.iter() {
        let Some(w) = w.upgrade() else { continue };
        if p != path || mine.is_some_and(|m| Arc::ptr_eq(m, &w)) {
            continue;
        }
        if let Ok(mut st) = w.state.lock() {
            released |= st.release_kept();
        };
    }
    released
}

/// Waiter lanes: a contended writer first takes byte `1 + pid % LANES` of the
/// lock file (an open-file-description byte-range lock), then the `flock`.
const LANES: u32 = 4;

/// A held lane; released on drop.
struct Lane<'f> {
    file: &'f File,
    at: i64,
}

fn byte_range(kind: nix::libc::c_short, at: i64, len: i64) -> nix::libc::flock {
    nix::libc::flock {
        l_type: kind,
        l_whence: nix::libc::SEEK_SET as nix::libc::c_short,
        l_start: at,
        l_len: len,
        l_pid: 0,
    }
}

/// Blocks until this process's lane is free, then holds it. `None` when
/// byte-range locks are unavailable (the `flock` alone still works).
fn lane_lock(file: &File) -> Option<Lane<'_>> {
    use nix::fcntl::{fcntl, FcntlArg};
    let at = 1 + i64::from(std::process::id() % LANES);
    let lock = byte_range(nix::libc::F_WRLCK as nix::libc::c_short, at, 1);
    fcntl(file, FcntlArg::F_OFD_SETLKW(&lock)).ok()?;
    Some(Lane { file, at })
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        use nix::fcntl::{fcntl, FcntlArg};
        let unlock = byte_range(nix::libc::F_UNLCK as nix::libc::c_short, self.at, 1);
        let _ = fcntl(self.file, FcntlArg::F_OFD_SETLK(&unlock));
    }
}

/// Whether a writer of another file description waits for the lock (holds a
/// lane). `None` when byte-range locks cannot be queried; then no turn is
/// kept, as waiters could not be seen.
fn others_waiting(file: &File) -> Option<bool> {
    use nix::fcntl::{fcntl, FcntlArg};
    let mut probe = byte_range(
        nix::libc::F_WRLCK as nix::libc::c_short,
        1,
        i64::from(LANES),
    );
    fcntl(file, FcntlArg::F_OFD_GETLK(&mut probe)).ok()?;
    Some(probe.l_type != nix::libc::F_UNLCK as nix::libc::c_short)
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
            turn_start: Instant::now(),
            asked: Instant::now(),
            last_end: None,
            streak: 0,
            yielded: None,
        }
    }

    /// Takes the lock, waiting until `deadline` at most. `Ok(None)` means the
    /// deadline passed (the caller reports STORE_BUSY); an I/O error means
    /// the lock file cannot be used, and the caller goes on without it.
    pub fn acquire(&mut self, deadline: Instant) -> std::io::Result<Option<Held>> {
        self.asked = Instant::now();
        if let Some(w) = &self.waiter {
            let mut st = w.lock()?;
            // Still this handle's turn: no system call at all.
            if let Some(f) = st.kept.take() {
                return Ok(Some(Held(Some(f))));
            }
            if self.file.is_none() {
                self.file = st.spare.take();
            }
        }
        if let Some(at) = self.yielded.take() {
            // Just handed the turn over: give the woken waiter its chance.
            // Yield the CPU rather than sleep: the release just woke that
            // waiter, most likely onto this CPU, where it then runs at once
            // instead of waiting for an idle CPU to wake up.
            let until = (at + YIELD).min(deadline);
            while Instant::now() < until {
                std::thread::yield_now();
            }
        }
        let file = match self.file.take() {
            Some(f) => f,
            None => open_lock_file(&self.path)?,
        };
        let mut sibling_checked = false;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    self.turn_start = Instant::now();
                    return Ok(Some(Held(Some(file))));
                }
                // Another handle of this process may keep it idle.
                Err(std::fs::TryLockError::WouldBlock) if !sibling_checked => {
                    sibling_checked = true;
                    if !release_kept_by_siblings(&self.path, self.waiter.as_ref()) {
                        break;
                    }
                }
                Err(std::fs::TryLockError::WouldBlock) => break,
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
        self.file = Some(file);
        // Contended: wait in the kernel, on the long-lived thread, with a
        // fresh file description (flock locks belong to one).
        let waiter = match &self.waiter {
            Some(w) => Arc::clone(w),
            None => {
                let w = Waiter::start()?;
                self.waiter = Some(Arc::clone(&w));
                if let Ok(mut keepers) = KEEPERS.lock() {
                    keepers.push((self.path.clone(), Arc::downgrade(&w)));
                }
                w
            }
        };
        let mut st = waiter.lock()?;
        st.stream_hint = self.streak + 1 >= STREAK;
        match &mut st.slot {
            Slot::Idle => {
                let f = match st.spare.take() {
                    Some(f) => f,
                    None => open_lock_file(&self.path)?,
                };
                st.slot = Slot::Asked(f);
                waiter.changed.notify_all();
            }
            // Still waiting for an earlier, abandoned turn: take it over.
            Slot::Waiting { abandoned } => *abandoned = false,
            Slot::Asked(_) | Slot::Delivered(_) | Slot::Closed => {}
        }
        loop {
            if let Slot::Delivered(_) = st.slot {
                if let Slot::Delivered(f) = std::mem::replace(&mut st.slot, Slot::Idle) {
                    self.turn_start = Instant::now();
                    return Ok(Some(Held(Some(f))));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                match &mut st.slot {
                    Slot::Waiting { abandoned } => *abandoned = true,
                    Slot::Asked(_) => st.slot = Slot::Idle,
                    _ => {}
                }
                return Ok(None);
            }
            st = match waiter.changed.wait_timeout(st, left) {
                Ok((s, _)) => s,
                Err(_) => return Err(thread_failed()),
            };
        }
    }

    /// Ends a write. The lock is kept for the next write when this handle
    /// is writing in a stream (this write and the [`STREAK`]` - 1` before it
    /// each asked for the lock within [`STREAM_GAP`]
    /// of the previous one's end) and has a waiting thread to release it
    /// later, and the turn is not over — or it is over and nobody waits, so
    /// a new one begins. Otherwise it is released now; when that ends a turn
    /// with writers waiting, the next `acquire` first pauses for [`YIELD`].
    pub fn release(&mut self, mut held: Held) {
        let Some(f) = held.0.take() else {
            return;
        };
        let now = Instant::now();
        let close = self
            .last_end
            .is_some_and(|e| self.asked.saturating_duration_since(e) < STREAM_GAP);
        self.streak = if close {
            self.streak.saturating_add(1)
        } else {
            0
        };
        let streaming = self.streak >= STREAK;
        self.last_end = Some(now);
        if let Some(w) = &self.waiter {
            if let Ok(mut st) = w.state.lock() {
                if streaming && matches!(st.slot, Slot::Idle) {
                    let keep = if now < self.turn_start + TURN {
                        true
                    } else {
                        match others_waiting(&f) {
                            Some(false) => {
                                self.turn_start = now;
                                true
                            }
                            Some(true) => {
                                self.yielded = Some(now);
                                false
                            }
                            // Waiters cannot be seen: end the turn, no pause.
                            None => false,
                        }
                    };
                    if keep {
                        st.kept = Some(f);
                        st.turn_start = self.turn_start;
                        st.last_end = now;
                        st.holding = true;
                        if !st.armed {
                            w.changed.notify_all();
                        }
                        return;
                    }
                }
                st.holding = false;
            }
        }
        let _ = f.unlock();
        if self.file.is_none() {
            self.file = Some(f);
        }
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        if let Some(w) = &self.waiter {
            if let Ok(mut st) = w.state.lock() {
                // A lock delivered to nobody, or kept, is released by the
                // thread as it ends.
                st.release_kept();
                st.slot = Slot::Closed;
                w.changed.notify_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    /// `a` waits for the lock `b` holds, so it gets its waiting thread; then
    /// it writes `STREAK` more times back to back, and keeps the lock after
    /// the last one (unless a slow machine spread the writes out).
    fn streaming_holder(db: &Path) -> (WriterLock, WriterLock) {
        let mut a = WriterLock::new(db);
        let mut b = WriterLock::new(db);
        let held = b.acquire(far()).unwrap().unwrap();
        let t = std::thread::spawn(move || {
            for _ in 0..=STREAK {
                let h = a.acquire(far()).unwrap().unwrap();
                a.release(h);
            }
            a
        });
        std::thread::sleep(Duration::from_millis(20));
        b.release(held);
        let a = t.join().unwrap();
        (a, b)
    }

    fn kept(l: &WriterLock) -> bool {
        l.waiter
            .as_ref()
            .is_some_and(|w| w.state.lock().unwrap().kept.is_some())
    }

    #[test]
    fn a_streaming_writer_keeps_the_lock_and_releases_it_when_idle() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("l.db");
        let (a, mut b) = streaming_holder(&db);
        let mut c = WriterLock::new(&db);
        // Kept between writes (or already released, on a slow machine): a
        // `try_lock` from another file description fails only while kept.
        let probe = open_lock_file(&b.path).unwrap();
        if kept(&a) {
            assert!(matches!(
                probe.try_lock(),
                Err(std::fs::TryLockError::WouldBlock)
            ));
        }
        // `a` writes no more: its waiting thread releases the lock.
        let got = b.acquire(far()).unwrap();
        assert!(got.is_some());
        assert!(!kept(&a));
        b.release(got.unwrap());
        drop(probe);
        // Dropping a handle that keeps the lock releases it at once.
        let (a, mut b) = streaming_holder(&db);
        let was_kept = kept(&a);
        drop(a);
        let now = c.acquire(Instant::now()).unwrap();
        assert!(now.is_some() || !was_kept);
        drop(now);
        drop(b.acquire(far()).unwrap());
    }

    #[test]
    fn a_handle_of_the_same_process_takes_a_kept_lock_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("l.db");
        let (a, _b) = streaming_holder(&db);
        // Make `a` keep the lock with its release an hour away, so that only
        // a sibling can free it.
        {
            let w = a.waiter.as_ref().unwrap();
            let mut st = w.state.lock().unwrap();
            let f = st.kept.take().unwrap_or_else(|| {
                let f = open_lock_file(&a.path).unwrap();
                f.lock().unwrap();
                f
            });
            let later = Instant::now() + Duration::from_secs(3600);
            st.kept = Some(f);
            st.holding = true;
            st.turn_start = later;
            st.last_end = later;
        }
        let probe = open_lock_file(&a.path).unwrap();
        assert!(matches!(
            probe.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        // A deadline already passed: only an immediate take can succeed.
        let mut c = WriterLock::new(&db);
        let got = c.acquire(Instant::now()).unwrap();
        assert!(got.is_some(), "a sibling's idle lock was not released");
        assert!(!kept(&a));
    }

    #[test]
    fn a_streaming_writer_hands_its_turn_to_a_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("l.db");
        let (a, mut b) = streaming_holder(&db);
        let done = Arc::new(AtomicBool::new(false));
        let writer_done = Arc::clone(&done);
        let mut a = a;
        let writer = std::thread::spawn(move || {
            let mut writes = 0u64;
            // Writes back to back until the waiter got a turn (or 10 s).
            let until = far();
            while !writer_done.load(Ordering::SeqCst) && Instant::now() < until {
                let h = a.acquire(far()).unwrap().unwrap();
                std::thread::sleep(Duration::from_micros(20));
                a.release(h);
                writes += 1;
            }
            writes
        });
        std::thread::sleep(Duration::from_millis(20));
        // `b` waits while `a` streams: a turn ends and `b` gets the lock long
        // before its deadline.
        let got = b.acquire(Instant::now() + Duration::from_secs(5)).unwrap();
        done.store(true, Ordering::SeqCst);
        assert!(got.is_some(), "the streaming writer never handed over");
        b.release(got.unwrap());
        assert!(writer.join().unwrap() > 0);
    }

    #[test]
    fn waiters_are_seen_through_their_lane() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("l.db");
        let mut a = WriterLock::new(&db);
        let mut b = WriterLock::new(&db);
        let held = a.acquire(far()).unwrap().unwrap();
        let probe = open_lock_file(&a.path).unwrap();
        assert_eq!(others_waiting(&probe), Some(false));
        let t = std::thread::spawn(move || {
            let h = b.acquire(far()).unwrap();
            (b, h.is_some())
        });
        let until = far();
        while others_waiting(&probe) != Some(true) {
            assert!(Instant::now() < until, "the waiter never took its lane");
            std::thread::sleep(Duration::from_millis(1));
        }
        a.release(held);
        let (_b, got) = t.join().unwrap();
        assert!(got);
        assert_eq!(others_waiting(&probe), Some(false));
    }
}
