//! Human output: aligned key/value blocks and tables, RFC 3339 UTC times.
//!
//! Values are escaped for the terminal (control characters shown as
//! `\u{..}`), and previews are cut on character boundaries with `…`; stored
//! values are never shortened, only their display.

use logbook::clock::format_ms;
use logbook::{Event, Session, SessionPage, SessionView};

/// Escapes control characters so stored text cannot drive the terminal.
pub fn clean(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The first line of `s`, cleaned, cut to `max` characters with `…`.
pub fn preview(s: &str, max: usize) -> String {
    let first = s.lines().next().unwrap_or("");
    let more_lines = s.contains('\n');
    let cleaned = clean(first);
    let n = cleaned.chars().count();
    if n > max {
        let cut: String = cleaned.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else if more_lines {
        format!("{cleaned} …")
    } else {
        cleaned
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

/// Renders rows as a table: columns padded to their widest cell, the last
/// column unpadded; numeric columns (named in `right`) right-aligned.
pub fn table(headers: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| width(h)).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(width(c));
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let last = cells.len() - 1;
        for (i, c) in cells.iter().enumerate() {
            let pad = widths[i] - width(c);
            if i == last {
                out.push_str(c);
            } else if right.contains(&i) {
                out.push_str(&" ".repeat(pad));
                out.push_str(c);
                out.push_str("  ");
            } else {
                out.push_str(c);
                out.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push('\n');
    };
    line(headers.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
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

/// Events as a table.
pub fn events(events: &[Event]) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.seq.to_string(),
                format_ms(e.at_ms),
                clean(&e.event_type),
                e.actor_type.as_str().to_owned(),
                e.detail
                    .as_deref()
                    .map(|d| preview(d, 60))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    table(&["SEQ", "AT", "TYPE", "ACTOR", "DETAIL"], &rows, &[0])
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

/// `list`: a table, then the next cursor if any.
pub fn page(p: &SessionPage) -> String {
    let rows: Vec<Vec<String>> = p
        .sessions
        .iter()
        .map(|s| {
            vec![
                s.session_id.to_string(),
                s.status.as_str().to_owned(),
                s.rev.to_string(),
                format_ms(s.updated_at_ms),
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
            &["SESSION", "STATUS", "REV", "UPDATED", "APP", "TITLE"],
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
}
