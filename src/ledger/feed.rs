//! The global event feed across sessions, and following it as it grows
//! (docs/design.md, "Feed").
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
use crate::store::{FeedPos, Tx};
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
    /// Start after the newest event at the time of the call instead of
    /// after `after` (which must then be `None`): [`Ledger::follow`]
    /// delivers exactly the events whose transactions end after the call
    /// begins (none written before it, every one written after, in feed
    /// order); [`Ledger::feed`] returns no events and the cursor of that
    /// point. On SQLite the point is the newest event_id. On a server it is
    /// the feed's horizon (docs/postgres.md, "The global feed on a
    /// server"): `follow` also skips the events above it whose
    /// transactions had already ended, while a cursor cannot say which
    /// those are, so resuming from `feed`'s cursor also returns events
    /// that committed while an older transaction was still open.
    pub from_now: bool,
}

/// One page of the feed.
#[derive(Debug, Clone, Serialize)]
pub struct FeedPage {
    /// Events in feed order (`event_id` order on SQLite).
    pub events: Vec<Event>,
    /// Pass as `after` to continue. Never null: the feed has no end, and an
    /// empty page returns the cursor it was given (or one further on, past
    /// events the filters skipped).
    pub next_cursor: String,
    /// Each event's position (what `follow` resumes from).
    #[serde(skip)]
    positions: Vec<FeedPos>,
}

fn page(events: Vec<(FeedPos, Event)>, next: FeedPos) -> FeedPage {
    let (positions, events) = events.into_iter().unzip();
    FeedPage {
        events,
        next_cursor: render(next),
        positions,
    }
}

impl Plan {
    /// The cursor text reached.
    fn cursor(&self) -> String {
        match self.after {
            Cursor::Event(id) => id.to_string(),
            Cursor::Pos(p) => render(p),
        }
    }
}

/// A validated feed request.
#[derive(Debug, Clone)]
struct Plan {
    after: Cursor,
    /// Start at the feed's horizon at the first read (`after` unused).
    from_now: bool,
    sessions: Vec<String>,
    types: BTreeSet<String>,
    limit: usize,
}

/// A cursor as given: an event id (SQLite's only form, and accepted on
/// PostgreSQL: the position of that event) or a position `TX.EVENT_ID`
/// (what PostgreSQL hands out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cursor {
    Event(i64),
    Pos(FeedPos),
}

fn parse_cursor(c: &str) -> Option<Cursor> {
    let num = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<i64>().ok())
            .flatten()
    };
    match c.split_once('.') {
        None => num(c).map(Cursor::Event),
        Some((tx, id)) => Some(Cursor::Pos(FeedPos {
            tx: num(tx).filter(|t| *t > 0)?,
            event_id: num(id)?,
        })),
    }
}

/// The cursor text of a position: the event id on SQLite (`tx` 0),
/// `TX.EVENT_ID` on PostgreSQL. Opaque to callers: pass it back as it is.
fn render(p: FeedPos) -> String {
    if p.tx == 0 {
        p.event_id.to_string()
    } else {
        format!("{}.{}", p.tx, p.event_id)
    }
}

fn plan(q: &FeedQuery) -> Result<Plan> {
    if q.from_now && q.after.is_some() {
        return Err(Error::invalid(
            "after",
            "cannot be given with from_now: start after a cursor or at the newest event, not both",
        ));
    }
    let after = match q.after.as_deref() {
        None => Cursor::Event(0),
        Some(c) => parse_cursor(c).ok_or_else(|| {
            Error::invalid(
                "after",
                "must be a cursor: 0 or a next_cursor this database returned",
            )
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
        from_now: q.from_now,
        sessions,
        types,
        limit: usize::try_from(limit).unwrap_or(1),
    })
}

/// The position a cursor stands for, in this read.
fn resolve(tx: &mut dyn Tx, c: Cursor) -> Result<FeedPos> {
    match c {
        Cursor::Event(0) => Ok(FeedPos::default()),
        Cursor::Event(id) => tx.feed_pos_of_event(id)?.ok_or_else(|| {
            Error::invalid(
                "after",
                "names no event of this database: pass a next_cursor this database returned",
            )
        }),
        Cursor::Pos(p) => Ok(p),
    }
}

/// A cursor past the feed's horizon was never handed out by this database
/// (another file, or an older copy of this one): continuing from it would
/// silently skip every event up to it once they are written.
fn check_cursor(after: FeedPos, horizon: FeedPos) -> Result<()> {
    if after > horizon {
        return Err(Error::invalid(
            "after",
            format!(
                "is past the newest event ({}): pass a next_cursor this database returned",
                render(horizon)
            ),
        ));
    }
    Ok(())
}

impl Ledger {
    /// One page of the global feed: events of all sessions (or of the given
    /// ones) after the cursor, in `event_id` order, in one read snapshot.
    /// With [`FeedQuery::from_now`], no events and the cursor of the newest
    /// one (to pass as `after` later).
    ///
    /// # Errors
    /// INVALID_ARGUMENT (cursor — malformed, or past the newest event —,
    /// `after` with `from_now`, limit, type, malformed id);
    /// SESSION_NOT_FOUND for a `sessions` entry that does not exist.
    pub fn feed(&self, q: &FeedQuery) -> Result<FeedPage> {
        let p = plan(q)?;
        self.feed_page(&p).map(|(page, _, _)| page)
    }

    /// A page, whether more events may be waiting right now, and the
    /// position reached.
    fn feed_page(&self, p: &Plan) -> Result<(FeedPage, bool, Cursor)> {
        let mut keep = |e: &Event| p.types.is_empty() || p.types.contains(&e.event_type);
        // A page of every session needs no one snapshot: each statement
        // reads below its own horizon, where nothing can still appear, and
        // the next resumes where it stopped (docs/postgres.md, "Reads"). So
        // on a server it is one round trip, not BEGIN, the scan and COMMIT.
        // From now, the page is the start's snapshot's (empty: the start is
        // its horizon).
        let all = p.sessions.is_empty() && !p.from_now;
        let read = |tx: &mut dyn Tx| {
            let after = if p.from_now {
                tx.feed_start()?.pos
            } else {
                resolve(tx, p.after)?
            };
            if p.sessions.is_empty() {
                let (events, last, at_end) =
                    tx.scan_feed(after, p.limit, FEED_MAX_SCAN, &mut keep)?;
                if last == after {
                    // Nothing after the cursor: it must not be past the end.
                    check_cursor(after, tx.feed_horizon()?)?;
                }
                // A full page, or a scan cut short by FEED_MAX_SCAN: more
                // may be waiting. (A full page that ended exactly at the
                // table's end costs one more, empty, read.)
                let more = !at_end;
                let next = if events.len() == p.limit {
                    events.last().map_or(last, |(pos, _)| *pos)
                } else {
                    last
                };
                return Ok((page(events, next), more, Cursor::Pos(next)));
            }
            let mut all = Vec::new();
            for s in &p.sessions {
                if !tx.session_exists(s)? {
                    return Err(Error::SessionNotFound { id: s.clone() });
                }
                all.extend(tx.scan_feed_session(s, after, p.limit, &mut keep)?);
            }
            all.sort_by_key(|(pos, _)| *pos);
            let full = all.len() >= p.limit;
            all.truncate(p.limit);
            // Not full: every matching event up to the horizon is here, and
            // any later one comes after it.
            let next = if full {
                all.last().map_or(after, |(pos, _)| *pos)
            } else {
                let horizon = tx.feed_horizon()?;
                check_cursor(after, horizon)?;
                all.last()
                    .map_or(after, |(pos, _)| *pos)
                    .max(after)
                    .max(horizon)
            };
            Ok((page(all, next), full, Cursor::Pos(next)))
        };
        if all {
            self.read_each(read)
        } else {
            self.read(read)
        }
        .map_err(|e| self.fill_path(e))
    }

    /// Follows the feed: calls `sink` with every event after the cursor (or,
    /// with [`FeedQuery::from_now`], after the newest event when the call
    /// begins), in `event_id` order, as they commit, until `sink` breaks or
    /// `stop` returns true. Returns the cursor reached.
    ///
    /// Between reads it holds no transaction. On SQLite it waits for
    /// `PRAGMA data_version` to change (any other connection's commit),
    /// checking every `poll`; on a server it probes the feed every `poll`
    /// while events come, backing off to one probe every 20 ms while none
    /// do (README, "The timeline"). It calls `stop` at each check.
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
        // Where "now" is, fixed once before the first mark: whatever
        // commits after this read comes after its position. On a server,
        // events above the horizon whose transactions had already ended are
        // before now: skipped as they come up.
        let mut skip = None;
        if p.from_now {
            let start = self
                .read(|tx| tx.feed_start())
                .map_err(|e| self.fill_path(e))?;
            p.after = Cursor::Pos(start.pos);
            p.from_now = false;
            skip = start.ended;
        }
        loop {
            if stop() {
                return Ok(p.cursor());
            }
            // Read the counter before the snapshot: a commit after this
            // point either is in the snapshot or changes the counter.
            let seen = self.store.change_mark()?;
            let (page, more, reached) = self.feed_page(&p)?;
            for (e, pos) in page.events.iter().zip(page.positions) {
                p.after = Cursor::Pos(pos);
                if let Some(before) = &skip {
                    if pos.tx >= before.xmax {
                        skip = None;
                    } else if before.ended(pos.tx) {
                        continue;
                    }
                }
                if sink(e).is_break() {
                    return Ok(p.cursor());
                }
            }
            p.after = reached;
            if more {
                continue;
            }
            loop {
                if stop() {
                    return Ok(p.cursor());
                }
                if self.store.wait_for_change(seen, poll)? {
                    break;
                }
            }
        }
    }
}
