//! Busy timeouts: how long a connection waits for SQLite's own locks.
//!
//! Every connection has SQLite's `busy_timeout` set to the handle's busy
//! timeout ([`set_timeout`], at open), for reads, opens and maintenance. A
//! write waits first for the writer queue (`writelock.rs`), then for
//! SQLite's write lock in [`begin_immediate`], until the write's deadline:
//! one busy timeout bounds both. The deadline is a parameter; nothing is
//! kept per thread. There, SQLite's own handler is off and `BEGIN IMMEDIATE`
//! is retried after short, jittered sleeps (50 µs growing to 2 ms), because
//! SQLite's handler sleeps 1, 2, 5 … 100 ms and leaves the lock idle while
//! every waiter sleeps: with the lock file unusable (SQLite's locking alone)
//! 32 writer processes measured 10% slower with it, their worst wait 5×
//! longer (BENCHMARKS.md, "A simpler writer queue"). Logbook writers mostly
//! meet each other in the queue; this covers other clients (the `sqlite3`
//! shell), WAL recovery, and writers whose lock file cannot be used.

use crate::store::sqlite::txn::Txn;
use rusqlite::Connection;
use std::time::{Duration, Instant};

/// SQLite takes a busy timeout in ms as a C `int`.
const MAX_MS: u64 = i32::MAX as u64;

/// The deadline of an operation that starts now: now plus `timeout_ms`
/// (at most ≈ 24.8 days, SQLite's own limit).
pub fn deadline(timeout_ms: u64) -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_millis(timeout_ms.min(MAX_MS)))
        .unwrap_or(now)
}

/// Lets `conn` wait for SQLite's locks `timeout_ms` at most, per wait
/// (SQLite's own handler; 0 turns it off).
///
/// # Errors
/// SQLite's, if it refuses the setting.
pub fn set_timeout(conn: &Connection, timeout_ms: u64) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_millis(timeout_ms.min(MAX_MS)))
}

/// `BEGIN IMMEDIATE` on `conn`, retried while SQLite reports the database
/// busy, until `deadline` at most (one try once it has passed); then the
/// connection's own timeout is `timeout_ms` again.
///
/// # Errors
/// SQLite's: SQLITE_BUSY when the deadline passed first.
pub fn begin_immediate(
    conn: &Connection,
    deadline: Instant,
    timeout_ms: u64,
) -> rusqlite::Result<Txn<'_>> {
    let tx = set_timeout(conn, 0).and_then(|()| {
        let mut rng = u64::from(std::process::id()) << 32 | u64::from(nanos()) | 1;
        let mut tries = 0u64;
        loop {
            match Txn::immediate(conn) {
                Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(e);
                    }
                    // xorshift: waiters do not retry in lock-step.
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let base_us = (50 + tries * 50).min(2000);
                    let pause = Duration::from_micros(base_us / 2 + rng % base_us);
                    std::thread::sleep(pause.min(left));
                    tries += 1;
                }
                other => return other,
            }
        }
    });
    // If this fails, a transaction begun is rolled back as `tx` drops.
    set_timeout(conn, timeout_ms).and(tx)
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout_of(c: &Connection) -> i64 {
        c.pragma_query_value(None, "busy_timeout", |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn begin_immediate_waits_for_sqlites_lock_until_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.db");
        let other = Connection::open(&path).unwrap();
        other.pragma_update(None, "journal_mode", "WAL").unwrap();
        let c = Connection::open(&path).unwrap();
        set_timeout(&c, 5000).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        // Held all along: busy at the deadline, the timeout set back.
        let t = Instant::now();
        let e = begin_immediate(&c, Instant::now() + Duration::from_millis(100), 5000)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(
            e.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy)
        );
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert_eq!(timeout_of(&c), 5000);
        assert!(c.is_autocommit());
        // A deadline already passed: one try.
        assert!(begin_immediate(&c, Instant::now(), 5000).is_err());
        // Released while it waits: it gets the lock.
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.execute_batch("COMMIT").unwrap();
        });
        let tx = begin_immediate(&c, Instant::now() + Duration::from_secs(10), 700).unwrap();
        assert!(!c.is_autocommit());
        tx.commit().unwrap();
        release.join().unwrap();
        assert_eq!(timeout_of(&c), 700);
    }

    #[test]
    fn timeouts_beyond_sqlites_int_are_capped_not_a_panic() {
        let c = Connection::open_in_memory().unwrap();
        set_timeout(&c, u64::MAX).unwrap();
        assert_eq!(timeout_of(&c), i64::from(i32::MAX));
        assert!(deadline(u64::MAX) > Instant::now() + Duration::from_secs(86_400));
    }
}
