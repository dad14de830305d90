//! SQL for `doctor` and `backup`: SQLite's own checks and its online
//! backup API.

use rusqlite::Connection;
use std::path::Path;

/// `PRAGMA integrity_check`, at most 10 messages (`["ok"]` when sound).
pub fn integrity_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut st = conn.prepare("PRAGMA integrity_check(10)")?;
    let rows = st.query_map([], |r| r.get::<_, String>(0))?;
    rows.collect()
}

/// A violation that is not a session naming its purged parent: a purge
/// removes a parent whose ended children remain, and they keep its id,
/// which its tombstone holds (docs/design.md, "Retention").
const NOT_PURGED_PARENT: &str = "NOT (fk.\"table\" = 'sessions' AND fk.parent = 'sessions' \
     AND EXISTS (SELECT 1 FROM sessions c JOIN tombstones t ON t.session_id = c.parent_session_id \
                 WHERE c.insert_seq = fk.rowid))";

/// Rows that break a foreign key (a session naming its purged parent
/// does not): the count and at most 10, as `table rowid N → parent`.
pub fn foreign_key_violations(conn: &Connection) -> rusqlite::Result<(i64, Vec<String>)> {
    let n: i64 = conn.query_row(
        &format!("SELECT count(*) FROM pragma_foreign_key_check fk WHERE {NOT_PURGED_PARENT}"),
        [],
        |r| r.get(0),
    )?;
    let mut st = conn.prepare(&format!(
        "SELECT \"table\" || ' rowid ' || coalesce(rowid, '?') || ' → ' || parent \
         FROM pragma_foreign_key_check fk WHERE {NOT_PURGED_PARENT} LIMIT 10"
    ))?;
    let rows = st.query_map([], |r| r.get::<_, String>(0))?;
    Ok((n, rows.collect::<rusqlite::Result<Vec<_>>>()?))
}

/// `(user_version, newest version in refinery's history)`.
pub fn schema_versions(conn: &Connection) -> rusqlite::Result<(i64, i64)> {
    conn.query_row(
        "SELECT (SELECT user_version FROM pragma_user_version), \
                (SELECT coalesce(max(version), 0) FROM refinery_schema_history)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

/// `(sessions, events, page_size, page_count, freelist_count, journal_mode)`.
pub fn sizes(conn: &Connection) -> rusqlite::Result<(i64, i64, i64, i64, i64, String)> {
    conn.query_row(
        "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM events), \
                (SELECT page_size FROM pragma_page_size), (SELECT page_count FROM pragma_page_count), \
                (SELECT freelist_count FROM pragma_freelist_count), \
                (SELECT journal_mode FROM pragma_journal_mode)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
    )
}

/// Copies the whole database, as of one snapshot, into a new file at
/// `dest` with SQLite's online backup API. One `step(-1)` copies every page
/// under a single read transaction: writers of the source keep committing
/// (WAL), and the copy is exactly the snapshot, never restarted. Returns the
/// number of pages, sessions and events copied.
pub fn backup_to(conn: &Connection, dest: &Path) -> rusqlite::Result<(i64, i64, i64)> {
    use rusqlite::backup::{Backup, StepResult};
    let mut out = Connection::open(dest)?;
    {
        let b = Backup::new(conn, &mut out)?;
        loop {
            match b.step(-1)? {
                StepResult::Done => break,
                StepResult::More | StepResult::Busy | StepResult::Locked => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                _ => break,
            }
        }
    }
    let counts: (i64, i64, i64) = out.query_row(
        "SELECT (SELECT page_count FROM pragma_page_count), (SELECT count(*) FROM sessions), \
                (SELECT count(*) FROM events)",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )?;
    let ok: String = out.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
    if ok != "ok" {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
            Some("the copy fails its quick_check".into()),
        ));
    }
    out.close().map_err(|(_, e)| e)?;
    Ok(counts)
}

/// `(type, name, sql)` of every schema object but SQLite's own and
/// refinery's history table, by name.
fn schema_objects(conn: &Connection) -> rusqlite::Result<Vec<(String, String, String)>> {
    let mut st = conn.prepare(
        "SELECT type, name, coalesce(sql, '') FROM sqlite_schema \
         WHERE name NOT LIKE 'sqlite_%' AND name <> 'refinery_schema_history' ORDER BY name",
    )?;
    let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    rows.collect()
}

/// Whether index `name` is UNIQUE (`pragma_index_list` of its table).
fn index_is_unique(conn: &Connection, name: &str) -> rusqlite::Result<bool> {
    let mut st = conn.prepare_cached(
        "SELECT coalesce(max(il.\"unique\"), 0) FROM sqlite_schema s, pragma_index_list(s.tbl_name) il \
         WHERE s.type = 'index' AND s.name = ?1 AND il.name = s.name",
    )?;
    st.query_row([name], |r| r.get::<_, i64>(0)).map(|u| u != 0)
}

/// How one schema object differs from what the migrations build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftKind {
    /// One of logbook's objects is gone.
    Missing,
    /// One of logbook's objects has other SQL than its migration's.
    Differs,
    /// An object that is not logbook's (an operator's own).
    Extra,
}

/// One object in which the file differs from logbook's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    /// `table`, `index`, `trigger` or `view`.
    pub object_type: String,
    /// Its name.
    pub name: String,
    /// Missing, differs, or extra.
    pub kind: DriftKind,
    /// For an extra index: whether it is UNIQUE (a constraint on the table,
    /// not only a way to read it).
    pub unique: bool,
}

/// How the file's tables, indexes, triggers and views differ from the
/// schema the embedded migrations build (in memory, for comparison): one
/// entry per object missing, altered, or extra — logbook's objects first,
/// by name, then the extra ones, by name. Empty when they match; a dropped
/// append-only trigger shows here before any edit it would allow.
pub fn schema_drift(conn: &Connection) -> rusqlite::Result<Vec<Drift>> {
    let mem = Connection::open_in_memory()?;
    for m in crate::store::sqlite::migrate::embedded() {
        mem.execute_batch(m.sql().unwrap_or_default())?;
    }
    let want = schema_objects(&mem)?;
    let have = schema_objects(conn)?;
    let mut out = Vec::new();
    for (object_type, name, sql) in &want {
        let kind = match have.iter().find(|(_, n, _)| n == name) {
            None => DriftKind::Missing,
            Some((_, _, s)) if s != sql => DriftKind::Differs,
            Some(_) => continue,
        };
        out.push(Drift {
            object_type: object_type.clone(),
            name: name.clone(),
            kind,
            unique: false,
        });
    }
    for (object_type, name, _) in &have {
        if !want.iter().any(|(_, n, _)| n == name) {
            out.push(Drift {
                object_type: object_type.clone(),
                name: name.clone(),
                kind: DriftKind::Extra,
                unique: object_type == "index" && index_is_unique(conn, name)?,
            });
        }
    }
    Ok(out)
}
