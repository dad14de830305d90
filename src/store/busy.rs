//! The busy handler: short, jittered sleeps until the operation's deadline.
//!
//! SQLite's built-in `busy_timeout` handler sleeps 1, 2, 5, 10 … 100 ms
//! between attempts, leaving the lock idle while every waiter sleeps. This
//! handler sleeps 50 µs growing to 2 ms, with jitter so waiters do not retry
//! in lock-step, and gives up (STORE_BUSY) at the deadline the current
//! operation set: its start plus the busy timeout. Writers between logbook
//! processes are mostly queued by `writelock.rs` before they get here; this
//! handler covers other clients (the `sqlite3` shell) and WAL recovery.

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    static DEADLINE: Cell<Option<Instant>> = const { Cell::new(None) };
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// Sets the deadline for the current operation on this thread: now plus
/// `timeout_ms`. Returns it.
pub fn start(timeout_ms: u64) -> Instant {
    let d = Instant::now() + Duration::from_millis(timeout_ms);
    DEADLINE.with(|c| c.set(Some(d)));
    d
}

fn jitter(max: u64) -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            x = (u64::from(std::process::id()) << 32) | 0x9E37_79B9;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r.set(x);
        x % max.max(1)
    })
}

/// The handler installed on every connection: `true` = try again.
pub fn handler(count: i32) -> bool {
    let now = Instant::now();
    let Some(deadline) = DEADLINE.with(Cell::get) else {
        return false;
    };
    if now >= deadline {
        return false;
    }
    let step = u64::try_from(count.max(0)).unwrap_or(0).min(40);
    let base_us = (50 + step * 50).min(2000);
    let sleep = Duration::from_micros(base_us / 2 + jitter(base_us));
    std::thread::sleep(sleep.min(deadline - now));
    true
}
