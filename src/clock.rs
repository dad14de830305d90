//! Time: the injectable clock, and parsing of user-given times.
//!
//! All stored times are INTEGER ms since the Unix epoch, UTC. Nothing depends
//! on the process's time zone: input is RFC 3339 with an explicit offset (or
//! epoch ms), output is RFC 3339 in UTC.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// Where "now" comes from.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The system clock.
    #[default]
    System,
    /// A settable clock for tests: reads the shared value, ms since the epoch.
    Fixed(Arc<AtomicI64>),
}

impl Clock {
    /// A fixed clock at `ms`; the returned handle can move it.
    pub fn fixed(ms: i64) -> (Clock, Arc<AtomicI64>) {
        let cell = Arc::new(AtomicI64::new(ms));
        (Clock::Fixed(cell.clone()), cell)
    }

    /// Now, in ms since the Unix epoch (UTC).
    pub fn now_ms(&self) -> i64 {
        match self {
            Clock::System => jiff::Timestamp::now().as_millisecond(),
            Clock::Fixed(cell) => cell.load(Ordering::SeqCst),
        }
    }
}

/// Parses a user-given time: RFC 3339 with an offset (`2030-01-01T00:00:00Z`,
/// `…+05:30`) or an integer of ms since the epoch. A time without an offset
/// is refused, never read as local time.
///
/// # Errors
/// INVALID_ARGUMENT naming `field`.
pub fn parse_time(field: &str, text: &str) -> Result<i64> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<i64>()
            .map_err(|_| Error::invalid(field, "epoch milliseconds out of range"));
    }
    let bad = || {
        Error::invalid(
            field,
            "expected an RFC 3339 time with an offset (e.g. 2030-01-01T00:00:00Z) or epoch milliseconds",
        )
    };
    // jiff reads the wider Temporal syntax (offsets up to ±25:59:59, zone
    // annotations, `±HHMM`); RFC 3339 is the date, `T`, the time, and `Z` or
    // `±HH:MM` with HH at most 23.
    static RFC3339: std::sync::OnceLock<Option<regex::Regex>> = std::sync::OnceLock::new();
    let shape = RFC3339.get_or_init(|| {
        regex::Regex::new(
            r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$",
        )
        .ok()
    });
    if !shape.as_ref().is_some_and(|re| re.is_match(t)) {
        return Err(bad());
    }
    t.parse::<jiff::Timestamp>()
        .map(|ts| ts.as_millisecond())
        .map_err(|_| bad())
}

/// Formats ms since the epoch as RFC 3339 in UTC with millisecond precision.
pub fn format_ms(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        Err(_) => format!("{ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_instant_three_spellings() {
        let a = parse_time("since", "2030-01-01T05:30:00Z").unwrap();
        let b = parse_time("since", "2030-01-01T11:00:00+05:30").unwrap();
        let c = parse_time("since", "1893475800000").unwrap();
        assert_eq!((a, b), (c, c));
        assert!(parse_time("since", "2030-01-01T00:00:00").is_err());
        assert!(parse_time("since", "yesterday").is_err());
        // RFC 3339 only: no offset past ±23:59, no zone annotation, no
        // `±HHMM` (jiff alone accepts all three).
        for t in [
            "2030-01-01T00:00:00+25:00",
            "2030-01-01T00:00:00+24:00",
            "2030-01-01T00:00:00Z[UTC]",
            "2030-01-01T00:00:00+0530",
        ] {
            assert!(parse_time("since", t).is_err(), "{t}");
        }
        assert_eq!(
            parse_time("since", "2030-01-01t05:30:00.5z").unwrap(),
            c + 500
        );
        assert_eq!(parse_time("since", "2030-01-02T05:29:00+23:59").unwrap(), c);
        assert_eq!(format_ms(c), "2030-01-01T05:30:00.000Z");
    }
}
