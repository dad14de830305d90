//! The global event feed across sessions, and following it as it grows
//! (issue 3 §1).
//!
//! Order and exactly-once: `event_id` is the events table's rowid, given to
//! each event inside its `BEGIN IMMEDIATE` write transaction as the current
//! maximum + 1. SQLite lets one writer commit at a time, so a transaction
//! that takes id N commits before any transaction can take N + 1: ids become
//! visible strictly in order, and a reader's snapshot always holds every id
//! up to its maximum. (Rolled-back transactions leave no gap either: without
//! `AUTOINCREMENT` the next writer takes the same id.) So a cursor that is
//! simply "the last event_id seen" never skips an event that commits later,
//! and never repeats one. `tests/it/feed.rs` races writer processes against
//! a follower to hold this to account.

use super::request::parse_session_id;
use super::Ledger;
use crate::error::{Error, Result};
use crate::model::Event;
use serde::Serialize;
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::Duration;

/// Default page size of the feed.
pub const FEED_LIMIT_DEFAULT: i64 = 100;
/// Largest page size of the feed.
pub const FEED_LIMIT_MAX: i64 = 1000;
/// Most rows one unfiltered-by-session feed call examines when a type filter
/// matches little; the page then holds fewer events and `next_cursor` tells
/// where to go on.
const FEED_MAX_SCAN: usize = 50_000;

/// A feed request: `logbook events`.
#[derive(Debug, Clone, Default)]
pub struct FeedQuery {
    /// Cursor: the `event_id` of the last event already seen, in decimal
    /// (`"0"` or `None`: from the first event).
    pub after: Option<String>,
    /// Only these sessions (any of them); empty: all.
    pub sessions: Vec<String>,
    /// Only these event types (any of them); empty: all.
    pub types: Vec<String>,
    /// Page size, 1..=1000, default 100.
    pub limit: Option<i64>,
}

/// One page of the feed.
#[derive(Debug, Clone, Serialize)]
pub struct FeedPage {
    /// Events by `event_id`.
    pub events: Vec<Event>,
    /// Pass as `after` to continue. Never null: the feed has no end, and an
    /// empty page returns the cursor it was given (or one further on, past
    /// events the filters skipped).
    pub next_cursor: String,
}

/// A validated feed request.
#[derive(Debug, Clone)]
struct Plan {
    after: i64,
    sessions: Vec<String>,
    types: BTreeSet<String>,
    limit: usize,
}

fn plan(q: &FeedQuery) -> Result<Plan> {
    let after =
        match q.after.as_deref() {
            None => 0,
            Some(c) => c.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                Error::invalid("after", "must be a cursor: an event_id, 0 or more")
            })?,
        };
    let limit = q.limit.unwrap_or(FEED_LIMIT_DEFAULT);
    if !(1..=FEED_LIMIT_MAX).contains(&limit) {
        return Err(Error::invalid(
            "limit",
            format!("must be from 1 to {FEED_LIMIT_MAX}"),
        ));
    }
    let mut sessions = Vec::new();
    for s in &q.sessions {
        parse_session_id(s)?;
        if !sessions.contains(s) {
            sessions.push(s.clone());
        }
    }
    let mut types = BTreeSet::new();
    for t in &q.types {
        let ok = (1..=64).contains(&t.len())
            && t.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
        if !ok {
            return Err(Error::invalid(
                "type",
                "must be an event type: 1 to 64 of a-z, 0-9, `_`, `.`, `-`",
            ));
        }
        types.insert(t.clone());
    }
    Ok(Plan {
        after,
        sessions,
        types,
        limit: usize::try_from(limit).unwrap_or(1),
    })
}

/// A cursor past the newest event was never handed out by this database
/// (another file, or an older copy of this one): continuing from it would
/// silently skip every event up to it once they are written.
fn check_cursor(after: i64, newest: i64) -> Result<()> {
    if after > newest {
        return Err(Error::invalid(
            "after",
            format!(
                "is past the newest event ({newest}): pass a next_cursor this database returned"
            ),
        ));
    }
    Ok(())
}

impl Ledger {
    /// One page of the global feed: events of all sessions (or of the given
    /// ones) after the cursor, in `event_id` order, in one read snapshot.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (cursor — malformed, or past the newest event —,
    /// limit, type, malformed id); SESSION_NOT_FOUND for a `sessions` entry
    /// that does not exist.
    pub fn feed(&self, q: &FeedQuery) -> Result<FeedPage> {
        let p = plan(q)?;
        self.feed_page(&p).map(|(page, _)| page)
    }

    /// A page and whether more events may be waiting right now.
    fn feed_page(&self, p: &Plan) -> Result<(FeedPage, bool)> {
        let mut keep = |e: &Event| p.types.is_empty() || p.types.contains(&e.event_type);
        self.read(|tx| {
            if p.sessions.is_empty() {
                let (events, last, at_end) =
                    tx.scan_feed(p.after, p.limit, FEED_MAX_SCAN, &mut keep)?;
                if last == p.after {
                    // Nothing after the cursor: it must not be past the end.
                    check_cursor(p.after, tx.newest_event_id()?)?;
                }
                // A full page, or a scan cut short by FEED_MAX_SCAN: more
                // may be waiting. (A full page that ended exactly at the
                // table's end costs one more, empty, read.)
                let more = !at_end;
                let next = if events.len() == p.limit {
                    events.last().map_or(last, |e| e.event_id)
                } else {
                    last
                };
                return Ok((
                    FeedPage {
                        events,
                        next_cursor: next.to_string(),
                    },
                    more,
                ));
            }
            let mut all = Vec::new();
            for s in &p.sessions {
                if !tx.session_exists(s)? {
                    return Err(Error::SessionNotFound { id: s.clone() });
                }
                all.extend(tx.scan_feed_session(s, p.after, p.limit, &mut keep)?);
            }
            all.sort_by_key(|e| e.event_id);
            let full = all.len() >= p.limit;
            all.truncate(p.limit);
            // Not full: every matching event of this snapshot is here, and
            // any later one gets a larger id than the snapshot's newest.
            let next = if full {
                all.last().map_or(p.after, |e| e.event_id)
            } else {
                let newest = tx.newest_event_id()?;
                check_cursor(p.after, newest)?;
                all.last()
                    .map_or(p.after, |e| e.event_id)
                    .max(p.after)
                    .max(newest)
            };
            Ok((
                FeedPage {
                    events: all,
                    next_cursor: next.to_string(),
                },
                full,
            ))
        })
        .map_err(|e| self.fill_path(e))
    }

    /// Follows the feed: calls `sink` with every event after the cursor, in
    /// `event_id` order, as they commit, until `sink` breaks or `stop`
    /// returns true. Returns the cursor reached.
    ///
    /// Between reads it holds no transaction: it waits for
    /// `PRAGMA data_version` to change (any other connection's commit),
    /// checking every `poll`, and calls `stop` at each check.
    ///
    /// # Errors
    /// As [`Ledger::feed`]; STORE_IO ([`Error::StoreFile`]) as soon as the
    /// database file is replaced or removed under the handle
    /// ([`Ledger::check_file`]), instead of waiting for commits that can no
    /// longer come.
    pub fn follow(
        &self,
        q: &FeedQuery,
        poll: Duration,
        mut sink: impl FnMut(&Event) -> ControlFlow<()>,
        mut stop: impl FnMut() -> bool,
    ) -> Result<String> {
        let mut p = plan(q)?;
        p.limit = usize::try_from(FEED_LIMIT_MAX).unwrap_or(1000);
        loop {
            if stop() {
                return Ok(p.after.to_string());
            }
            // Read the counter before the snapshot: a commit after this
            // point either is in the snapshot or changes the counter.
            let seen = self.data_version()?;
            let (page, more) = self.feed_page(&p)?;
            for e in &page.events {
                p.after = e.event_id;
                if sink(e).is_break() {
                    return Ok(p.after.to_string());
                }
            }
            p.after = page.next_cursor.parse().unwrap_or(p.after);
            if more {
                continue;
            }
            loop {
                if stop() {
                    return Ok(p.after.to_string());
                }
                std::thread::sleep(poll);
                // A replaced file gets no more commits through this
                // connection's file: without this the follow would go
                // silent instead of failing.
                self.check_file()?;
                if self.data_version()? != seen {
                    break;
                }
            }
        }
    }
}
