//! Unit tests of the writer queue (`super`): never held between writes,
//! abandoned waits, lanes only off the portable path.

use super::*;
use std::time::Duration;

fn far() -> Instant {
    Instant::now() + Duration::from_secs(10)
}

/// Another holder of the lock: a file description of its own.
fn holder(l: &WriterLock) -> File {
    let f = OpenOptions::new().write(true).open(&l.path).unwrap();
    f.lock().unwrap();
    f
}

fn is_free(l: &WriterLock) -> bool {
    let probe = OpenOptions::new().write(true).open(&l.path).unwrap();
    probe.try_lock().is_ok()
}

/// Polls until no one holds the lock (or 10 s): a helper thread of an
/// earlier timed-out take may hold it for an instant before it lets go.
fn eventually_free(l: &WriterLock) -> bool {
    let until = far();
    while Instant::now() < until {
        if is_free(l) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
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
    assert!(eventually_free(&b), "a helper kept the lock");
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
        assert_eq!(WriterLock::new(&root.join(p)).path, want, "{p}");
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
    let (other, path) = (holder(&a), a.path.clone());
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
