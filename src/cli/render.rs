//! Human output: aligned key/value blocks and tables, RFC 3339 UTC times.
//!
//! Values are escaped for the terminal (a newline as `\n`, other control
//! characters as `\u{..}`), and previews are cut on character boundaries
//! with `…`; stored values are never shortened, only their display. Every
//! table goes through [`Table`]: one layout, UPPERCASE headers.

use super::summary::event_summary;
use logbook::clock::format_ms;
use logbook::ledger::PurgedChildren;
use logbook::model::EventType;
use logbook::{Event, Session, SessionPage, SessionView};

/// Escapes control characters so stored text cannot drive the terminal and
/// stays on one line: newline, carriage return and tab as `\n`, `\r`,
/// `\t`, any other as `\u{..}`.
pub fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `s` (already one line) cut to `max` characters: the first `max − 1`
/// and `…`, on a character boundary.
pub fn ellipsize(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let cut: String = s.chars().take(max.saturating_sub(1)).collect();
    format!("{cut}…")
}

/// The first line of `s`, cleaned, cut to `max` characters with `…`.
pub fn preview(s: &str, max: usize) -> String {
    let first = s.lines().next().unwrap_or("");
    let more_lines = s.contains('\n');
    let cleaned = clean(first);
    if cleaned.chars().count() > max {
        ellipsize(&cleaned, max)
    } else if more_lines {
        format!("{cleaned} …")
    } else {
        cleaned
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

/// The one table layout of the human output: a header line of UPPERCASE
/// column names, then one line per row; columns two spaces apart, padded
/// to their widest cell (numeric ones, named in `right`, right-aligned),
/// the last column unpadded. Printed whole ([`Table::render`]), widths come
/// from the cells; printed as rows arrive ([`Table::header`] once, then
/// [`Table::row`]), from widths fixed up front ([`Table::widths`]), which a
/// longer cell pushes past on its own line only.
pub struct Table {
    headers: Vec<String>,
    right: Vec<usize>,
    widths: Vec<usize>,
}

impl Table {
    /// A table with fixed `headers` (UPPERCASE, checked in debug builds).
    pub fn new(headers: &[&'static str], right: &[usize]) -> Table {
        debug_assert!(
            headers.iter().all(|h| h.to_uppercase() == *h),
            "table headers are UPPERCASE: {headers:?}"
        );
        Self::with_headers(headers.iter().map(|h| (*h).to_owned()).collect(), right)
    }

    /// A table whose headers are data (`sql`'s column names, as the query
    /// named them).
    pub fn with_headers(headers: Vec<String>, right: &[usize]) -> Table {
        Table {
            widths: headers.iter().map(|h| width(h)).collect(),
            headers,
            right: right.to_vec(),
        }
    }

    /// Reserves at least `min[i]` characters for column `i` (for rows
    /// printed as they arrive).
    pub fn widths(mut self, min: &[usize]) -> Table {
        for (w, m) in self.widths.iter_mut().zip(min) {
            *w = (*w).max(*m);
        }
        self
    }

    /// The header line.
    pub fn header(&self) -> String {
        let cells: Vec<&str> = self.headers.iter().map(String::as_str).collect();
        self.line(&cells)
    }

    /// One row's line, at the table's current widths.
    pub fn row(&self, row: &[String]) -> String {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        self.line(&cells)
    }

    /// The header and every row, each column as wide as its widest cell.
    pub fn render(mut self, rows: &[Vec<String>]) -> String {
        for r in rows {
            for (w, c) in self.widths.iter_mut().zip(r) {
                *w = (*w).max(width(c));
            }
        }
        let mut out = self.header();
        for r in rows {
            out.push_str(&self.row(r));
        }
        out
    }

    fn line(&self, cells: &[&str]) -> String {
        let mut out = String::new();
        let last = cells.len().saturating_sub(1);
        for (i, c) in cells.iter().enumerate() {
            let pad = self
                .widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(width(c));
            if i == last {
                if self.right.contains(&i) {
                    out.push_str(&" ".repeat(pad));
                }
                out.push_str(c);
            } else if self.right.contains(&i) {
                out.push_str(&" ".repeat(pad));
                out.push_str(c);
                out.push_str("  ");
            } else {
                out.push_str(c);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        // An empty last cell leaves no trailing blanks.
        out.truncate(out.trim_end_matches(' ').len());
        out.push('\n');
        out
    }
}

/// [`Table::new`] rendered whole: the usual way to print a list.
pub fn table(headers: &[&'static str], rows: &[Vec<String>], right: &[usize]) -> String {
    Table::new(headers, right).render(rows)
}

fn kv(out: &mut String, key: &str, value: &str) {
    // Keys up to 10 characters line up; a longer one (`deployments`) keeps
    // one space before its value.
    out.push_str(&format!("{key:<10} {value}\n"));
}

/// A session as an aligned key/value block.
pub fn session(s: &Session) -> String {
    let mut out = String::new();
    kv(&mut out, "session", s.session_id.as_str());
    kv(&mut out, "status", s.status.as_str());
    kv(&mut out, "rev", &s.rev.to_string());
    kv(&mut out, "title", &clean(&s.title));
    let opt = [
        ("app", &s.app),
        ("agent", &s.agent_id),
        ("route", &s.route),
        ("stage", &s.stage),
        ("parent", &s.parent_session_id),
    ];
    for (k, v) in opt {
        if let Some(v) = v {
            kv(&mut out, k, &clean(v));
        }
    }
    if let Some(g) = &s.goal {
        kv(&mut out, "goal", &preview(g, 80));
    }
    if !s.tags.is_empty() {
        kv(&mut out, "tags", &clean(&s.tags.join(", ")));
    }
    for (k, ids) in [
        ("plans", &s.plan_ids),
        ("operations", &s.operation_ids),
        ("deployments", &s.deployment_ids),
    ] {
        if !ids.is_empty() {
            kv(&mut out, k, &clean(&ids.join(" ")));
        }
    }
    if let Some(c) = &s.checkpoint {
        let step = c.step.as_deref().map(clean).unwrap_or_else(|| "-".into());
        let note = c
            .note
            .as_deref()
            .map(|n| format!(": {}", preview(n, 60)))
            .unwrap_or_default();
        kv(
            &mut out,
            "checkpoint",
            &format!("{step} (seq {}, {}){note}", c.seq, format_ms(c.at_ms)),
        );
    }
    if let Some(r) = &s.final_result {
        kv(&mut out, "result", &preview(r, 80));
    }
    if let Some(r) = &s.end_reason {
        kv(&mut out, "reason", &preview(r, 80));
    }
    let u = &s.usage;
    if u.input_tokens + u.output_tokens + u.api_calls + u.duration_ms > 0 {
        kv(
            &mut out,
            "usage",
            &format!(
                "{} in / {} out tokens, {} calls, {} ms",
                u.input_tokens, u.output_tokens, u.api_calls, u.duration_ms
            ),
        );
    }
    kv(&mut out, "created", &format_ms(s.created_at_ms));
    kv(&mut out, "updated", &format_ms(s.updated_at_ms));
    if let Some(e) = s.ended_at_ms {
        kv(&mut out, "ended", &format_ms(e));
    }
    out
}

/// The widest a timeline's SUMMARY cell gets, in characters; a longer
/// summary ends in `…` (the event itself, and its JSON, stay whole).
pub const SUMMARY_WIDTH: usize = 100;

/// A session's timeline (`session show`, `session events`).
const TIMELINE: [&str; 5] = ["SEQ", "AT", "TYPE", "ACTOR", "SUMMARY"];

/// The global feed (`logbook events`): the timeline with the event's
/// cursor and session in front.
const FEED: [&str; 7] = [
    "EVENT_ID", "SESSION", "SEQ", "AT", "TYPE", "ACTOR", "SUMMARY",
];

fn timeline_cells(e: &Event) -> Vec<String> {
    vec![
        e.seq.to_string(),
        format_ms(e.at_ms),
        clean(&e.event_type),
        e.actor_type.as_str().to_owned(),
        ellipsize(&event_summary(e), SUMMARY_WIDTH),
    ]
}

/// A session's events as a table (`no events` when there are none).
pub fn events(events: &[Event]) -> String {
    if events.is_empty() {
        return "no events\n".to_owned();
    }
    let rows: Vec<Vec<String>> = events.iter().map(timeline_cells).collect();
    table(&TIMELINE, &rows, &[0])
}

/// One row of the feed.
pub fn feed_row(e: &Event) -> Vec<String> {
    let mut row = vec![e.event_id.to_string(), clean(&e.session_id)];
    row.extend(timeline_cells(e));
    row
}

/// The feed's table, for rows printed as they arrive (`events --follow`):
/// widths fixed for ids of up to 8 digits, seqs of 5 and the longest
/// built-in type.
pub fn feed_stream() -> Table {
    let longest_type = EventType::VARIANTS
        .iter()
        .map(|t| t.as_str().len())
        .max()
        .unwrap_or(0);
    Table::new(&FEED, &[0, 2]).widths(&[8, 20, 5, 24, longest_type, 5])
}

/// A page of the feed as a table (`no events` when there are none).
pub fn feed(events: &[Event]) -> String {
    if events.is_empty() {
        return "no events\n".to_owned();
    }
    let rows: Vec<Vec<String>> = events.iter().map(feed_row).collect();
    table(&FEED, &rows, &[0, 2])
}

/// A session's purged children: `2 children: 1 by purge 1 (TIME), 1 by
/// purge 3 (TIME)`, each time the last child that purge removed.
pub fn purged_children(p: &PurgedChildren) -> String {
    let by: Vec<String> = p
        .purges
        .iter()
        .map(|c| {
            format!(
                "{} by purge {} ({})",
                c.sessions,
                c.purge_id,
                format_ms(c.purged_at_ms)
            )
        })
        .collect();
    let noun = if p.total == 1 { "child" } else { "children" };
    format!("{} {noun}: {}", p.total, by.join(", "))
}

/// `show`: the session block, its events, and resolved references.
pub fn view(v: &SessionView) -> String {
    let mut out = session(&v.session);
    if v.children.total > 0 {
        let c = &v.children;
        kv(
            &mut out,
            "children",
            &format!(
                "{} (pending {}, active {}, paused {}, completed {}, failed {}, cancelled {})",
                c.total, c.pending, c.active, c.paused, c.completed, c.failed, c.cancelled
            ),
        );
    }
    if v.purged_children.total > 0 {
        kv(&mut out, "purged", &purged_children(&v.purged_children));
    }
    if let Some(g) = &v.blocking_gate {
        kv(
            &mut out,
            "blocked_on",
            &format!(
                "gate {} ({}, opened at seq {})",
                clean(&g.name),
                g.kind,
                g.opened_seq
            ),
        );
    }
    if let Some(l) = &v.lease {
        kv(
            &mut out,
            "lease",
            &format!(
                "pid {} on {} until {}{}",
                l.pid,
                clean(&l.hostname),
                format_ms(l.expires_at_ms),
                if l.live { "" } else { " (not live)" }
            ),
        );
    }
    out.push('\n');
    out.push_str(&events(&v.events));
    if !v.resolved.is_empty() {
        out.push('\n');
        let rows: Vec<Vec<String>> = v
            .resolved
            .iter()
            .map(|r| {
                let state = serde_json::to_value(r.state)
                    .ok()
                    .and_then(|s| s.as_str().map(str::to_owned))
                    .unwrap_or_default();
                vec![r.kind.to_owned(), clean(&r.id), state]
            })
            .collect();
        out.push_str(&table(&["KIND", "REFERENCE", "STATE"], &rows, &[]));
    }
    out
}

/// `list`: a table, then the next cursor if any. Its time column is the
/// one the page is sorted by: CREATED, or UPDATED with `order_updated`.
pub fn page(p: &SessionPage, order_updated: bool) -> String {
    let rows: Vec<Vec<String>> = p
        .sessions
        .iter()
        .map(|s| {
            vec![
                s.session_id.to_string(),
                s.status.as_str().to_owned(),
                s.rev.to_string(),
                format_ms(if order_updated {
                    s.updated_at_ms
                } else {
                    s.created_at_ms
                }),
                s.app
                    .as_deref()
                    .map(|a| preview(a, 20))
                    .unwrap_or_else(|| "-".into()),
                preview(&s.title, 48),
            ]
        })
        .collect();
    let mut out = if rows.is_empty() {
        "no sessions\n".to_owned()
    } else {
        table(
            &[
                "SESSION",
                "STATUS",
                "REV",
                if order_updated { "UPDATED" } else { "CREATED" },
                "APP",
                "TITLE",
            ],
            &rows,
            &[2],
        )
    };
    if let Some(c) = &p.next_cursor {
        out.push_str(&format!("\nnext page: --cursor {c}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_cut_on_char_boundaries() {
        // 47 + 1 + 4 = 52 characters, cut to 47 + `…` = 48.
        let s = format!("{}🙏tail", "a".repeat(47));
        assert_eq!(preview(&s, 48), format!("{}…", "a".repeat(47)));
        let s = format!("{}🙏tail", "a".repeat(46));
        assert_eq!(preview(&s, 48), format!("{}🙏…", "a".repeat(46)));
        let s = format!("{}漢", "a".repeat(47));
        assert_eq!(preview(&s, 48), s);
        assert_eq!(preview("a\u{0}b", 10), "a\\u{0}b");
    }

    #[test]
    fn clean_keeps_text_on_one_line() {
        assert_eq!(clean("a\nb\r\tc\u{1b}[0m"), "a\\nb\\r\\tc\\u{1b}[0m");
    }

    #[test]
    fn ellipsize_cuts_on_char_boundaries_with_a_visible_mark() {
        assert_eq!(ellipsize("abc", 3), "abc");
        assert_eq!(ellipsize("abcd", 3), "ab…");
        assert_eq!(ellipsize("a🙏漢d", 3), "a🙏…");
        assert_eq!(ellipsize("漢漢漢漢", 2), "漢…");
    }

    #[test]
    fn one_layout_for_whole_tables_and_streams() {
        let rows = vec![
            vec!["1".to_owned(), "a".to_owned(), "x".to_owned()],
            vec!["10".to_owned(), "bcdef".to_owned(), String::new()],
        ];
        assert_eq!(
            table(&["N", "NAME", "NOTE"], &rows, &[0]),
            " N  NAME   NOTE\n 1  a      x\n10  bcdef\n"
        );
        let t = Table::new(&["N", "NAME", "NOTE"], &[0]).widths(&[3, 2]);
        assert_eq!(t.header(), "  N  NAME  NOTE\n");
        assert_eq!(t.row(&rows[0]), "  1  a     x\n");
        // A cell wider than its column pushes only its own line.
        assert_eq!(t.row(&rows[1]), " 10  bcdef\n");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "UPPERCASE")]
    fn table_headers_are_uppercase() {
        let _ = Table::new(&["run"], &[]);
    }
}
