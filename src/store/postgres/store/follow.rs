//! Followers of the feed on a server (docs/postgres.md, "The global feed on
//! a server", "Followers poll"): one prepared probe, a change counter the
//! follower reads before each read of the feed, and the idle back-off.

use super::super::tx::PgTx;
use super::PgStore;
use crate::error::{Error, Result};
use postgres::types::Type;
use std::time::Duration;

impl PgStore {
    /// A counter of the changes seen by [`PgStore::probe`] (a follower
    /// reads it before each read of the feed).
    ///
    /// # Errors
    /// STORE_UNAVAILABLE when the server cannot be reached.
    pub fn change_mark(&self) -> Result<i64> {
        self.probe()?;
        Ok(self.changes.get())
    }

    /// Sleeps, then probes the feed; whether it changed since the mark
    /// `seen`.
    ///
    /// The sleep is `poll` while events are written, and doubles with each
    /// probe that finds no new event (none readable, and no newer event_id
    /// committed: while an open writer holds the horizon back, the others'
    /// commits keep it at `poll`), up to [`IDLE_POLL_MAX`] (20 ms; `poll`
    /// if that is longer); the first probe that finds one brings it back
    /// to `poll`. So an idle follower probes 50 times a second rather than
    /// 200, and an event written after a quiet spell is seen within 20 ms
    /// plus a read (BENCHMARKS.md, "PostgreSQL", "An idle follower").
    ///
    /// Followers poll rather than LISTEN: a NOTIFY takes a lock that
    /// serializes the commits of every notifying transaction, which halved
    /// the throughput of 8 writers (BENCHMARKS.md, "PostgreSQL").
    ///
    /// # Errors
    /// STORE_UNAVAILABLE when the server cannot be reached.
    pub fn wait_for_change(&self, seen: i64, poll: Duration) -> Result<bool> {
        let idle = self.idle_probes.get();
        std::thread::sleep(idle_sleep(poll, idle));
        let written = self.probe()?;
        let changed = self.changes.get() != seen;
        self.idle_probes.set(if changed || written {
            0
        } else {
            idle.saturating_add(1)
        });
        Ok(changed)
    }

    /// Reads the oldest running transaction's id (the feed's horizon),
    /// whether an event's transaction lies between the horizon the last
    /// probe read and this one, and the newest event_id ([`PROBE`], two
    /// index probes, prepared once per connection unless
    /// `statement_cache_size=0`); counts a change when an event's
    /// transaction does, and returns whether anything was written (that,
    /// or a newer event_id) since the last probe. An event becomes readable in the feed exactly when
    /// the horizon passes its transaction (docs/postgres.md, "The global
    /// feed on a server"), and consecutive probes' ranges cover every
    /// transaction, so no event is missed; the horizon moving past other
    /// databases' or read-only work alone is not a change, so a follower
    /// on a busy shared server stays idle. The first probe, a lost
    /// connection and a prepared probe a migration made stale each count as
    /// a change (the read that follows reconnects or fails with its code).
    fn probe(&self) -> Result<bool> {
        let since = self.last_horizon.get();
        let since_text = since.unwrap_or(0).to_string();
        let seen = self.with_conn(|conn, place| {
            let mut tx = PgTx::new(&mut conn.client, false)
                .with_cache(&mut conn.cache)
                .with_location(place);
            let row = tx.one(PROBE, &[(&since_text, Type::TEXT)])?;
            match (
                row.try_get::<_, i64>(0),
                row.try_get::<_, bool>(1),
                row.try_get::<_, i64>(2),
            ) {
                (Ok(horizon), Ok(passed), Ok(newest)) => Ok((horizon, passed, newest)),
                _ => Err(Error::internal("the feed probe returned no numbers")),
            }
        });
        let (changed, written) = match seen {
            Ok((horizon, passed, newest)) => {
                self.last_horizon.set(Some(horizon));
                let newer = self.last_newest.replace(Some(newest)) != Some(newest);
                let changed = passed || since.is_none();
                (changed, changed || newer)
            }
            Err(Error::Unavailable { .. } | Error::Busy { .. }) => {
                self.last_horizon.set(None);
                self.last_newest.set(None);
                (true, true)
            }
            Err(e) => return Err(e),
        };
        if changed {
            self.changes.set(self.changes.get() + 1);
        }
        Ok(written)
    }
}

/// The feed probe of followers: the horizon, whether an event's
/// transaction lies at or above the previous horizon ($1, as text) and
/// below this one (index `events_by_tx`), and the newest event_id.
const PROBE: &str = "SELECT s.h::text::bigint, EXISTS (SELECT 1 FROM events e \
     WHERE e.tx_id >= $1::text::xid8 AND e.tx_id < s.h), \
     COALESCE((SELECT max(event_id) FROM events), 0) \
     FROM (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS h) s";

/// The longest an idle follower sleeps between two probes of the feed:
/// 20 ms: an event written after a quiet spell is seen within 20 ms plus a
/// read, inside the p99 follow latency BENCHMARKS.md states for a server
/// beside 8 writers (24 ms), at a fifth of the probes of an idle follower
/// that kept probing every 5 ms.
pub const IDLE_POLL_MAX: Duration = Duration::from_millis(20);

/// The sleep before a follower's next probe after `idle` probes in a row
/// found nothing new: `poll` doubled `idle` times, at most
/// [`IDLE_POLL_MAX`] (or `poll`, when that is longer).
fn idle_sleep(poll: Duration, idle: u32) -> Duration {
    let cap = IDLE_POLL_MAX.max(poll);
    poll.checked_mul(1 << idle.min(16))
        .map_or(cap, |d| d.min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_follower_doubles_its_sleep_up_to_20_ms() {
        let ms = |n: u64| Duration::from_millis(n);
        let five: Vec<Duration> = (0..7).map(|i| idle_sleep(ms(5), i)).collect();
        assert_eq!(
            five,
            [ms(5), ms(10), ms(20), ms(20), ms(20), ms(20), ms(20)]
        );
        assert_eq!(idle_sleep(ms(5), u32::MAX), ms(20));
        // A poll longer than the cap is kept as it is.
        assert_eq!(idle_sleep(ms(100), 0), ms(100));
        assert_eq!(idle_sleep(ms(100), 9), ms(100));
        assert_eq!(idle_sleep(Duration::ZERO, 3), Duration::ZERO);
    }
}
