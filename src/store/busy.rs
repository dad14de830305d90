//! The busy handler: short, jittered sleeps up to the busy timeout.
//!
//! SQLite's built-in `busy_timeout` handler sleeps 1, 2, 5, 10 … 100 ms
//! between attempts. With dozens of writer processes the lock is often free
//! while every waiter sleeps, and single waits grow long. This handler sleeps
//! 50 µs growing to 2 ms, with jitter so waiters do not retry in lock-step,
//! and gives up (STORE_BUSY) once the timeout has passed since the first
//! attempt of this wait.

use std::cell::Cell;
use std::time::{Duration, Instant};

thread_local! {
    static TIMEOUT_MS: Cell<u64> = const { Cell::new(5000) };
    static WAIT_START: Cell<Option<Instant>> = const { Cell::new(None) };
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// Sets the busy timeout used by connections on this thread, in ms.
pub fn set_timeout_ms(ms: u64) {
    TIMEOUT_MS.with(|t| t.set(ms));
}

fn jitter(max: u64) -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        if x == 0 {
            x = u64::from(std::process::id()) << 32 | 0x9E37_79B9;
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
    let start = WAIT_START.with(|s| {
        if count == 0 || s.get().is_none() {
            s.set(Some(now));
        }
        s.get().unwrap_or(now)
    });
    let timeout = Duration::from_millis(TIMEOUT_MS.with(Cell::get));
    if now.duration_since(start) >= timeout {
        return false;
    }
    let step = u64::try_from(count.max(0)).unwrap_or(0).min(40);
    let base_us = (50 + step * 50).min(2000);
    let sleep = Duration::from_micros(base_us / 2 + jitter(base_us));
    let left = timeout.saturating_sub(now.duration_since(start));
    std::thread::sleep(sleep.min(left));
    true
}
