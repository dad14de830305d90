//! What the schema looks like before logbook touches it: the read-only
//! probe [`super::migrate`] and [`super::is_current`] judge (docs/design.md,
//! "Backends"). On a ledger that is there, one statement.

use super::{from_pg, SCHEMA_MARKER};
use crate::error::{Error, Result};
use ::postgres::types::Type;
use ::postgres::Client;

/// One row of refinery's history, as stored.
#[derive(Debug)]
pub(super) struct HistoryRow {
    pub(super) version: i64,
    pub(super) name: Option<String>,
    pub(super) applied_on: Option<String>,
    pub(super) checksum: Option<String>,
}

/// What the read-only probe saw.
#[derive(Debug)]
pub(super) struct Probe {
    /// "database `d`, schema `s`", for messages.
    pub(super) place: String,
    /// `server_encoding`.
    pub(super) encoding: String,
    /// Tables, views and sequences in the schema other than refinery's
    /// history table.
    pub(super) objects: i64,
    /// Whether `sessions` carries [`SCHEMA_MARKER`].
    pub(super) marked: bool,
    /// refinery's history, or `None` without the table.
    pub(super) history: Option<Vec<HistoryRow>>,
}

/// The schema's state: its database and name, the server's encoding, its
/// other tables, whether `sessions` carries the marker ($1), whether it has
/// refinery's history table; no row without a schema.
macro_rules! probe_select {
    () => {
        "SELECT current_database()::text, n.nspname::text, \
     pg_catalog.current_setting('server_encoding'), \
     (SELECT count(*) FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid \
        AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND c.relname <> 'refinery_schema_history'), \
     coalesce(pg_catalog.obj_description(pg_catalog.to_regclass(pg_catalog.format('%I.sessions', n.nspname)), 'pg_class') = $1, false), \
     pg_catalog.to_regclass(pg_catalog.format('%I.refinery_schema_history', n.nspname)) IS NOT NULL \
     FROM pg_catalog.pg_namespace n WHERE n.nspname = current_schema()"
    };
}

const PROBE: &str = probe_select!();

/// refinery reads its history unqualified, as here: the table in the
/// first schema of the search_path, which is `current_schema()`.
const HISTORY: &str = "SELECT version::bigint, name::text, applied_on::text, checksum::text \
     FROM refinery_schema_history ORDER BY version";

/// [`PROBE`] and [`HISTORY`] in one statement (its own snapshot): the
/// history's columns as arrays by version after [`PROBE`]'s. It names the
/// history table, so it fails (SQLSTATE 42P01) where there is none.
const PROBE_WITH_HISTORY: &str = concat!(
    "SELECT p.*, h.versions, h.names, h.applied, h.checksums FROM (",
    probe_select!(),
    ") p, (SELECT array_agg(version::bigint ORDER BY version) AS versions, \
     array_agg(name::text ORDER BY version) AS names, \
     array_agg(applied_on::text ORDER BY version) AS applied, \
     array_agg(checksum::text ORDER BY version) AS checksums \
     FROM refinery_schema_history) h"
);

/// The schema's state and refinery's history, read in one snapshot.
pub(super) fn probe(client: &mut Client) -> Result<Probe> {
    // A ledger already there (every open but the first): one statement.
    if let Some(p) = probe_at_once(client)? {
        return Ok(p);
    }
    // One snapshot for both reads: another process's migration committing
    // between them would show its history without its tables.
    let mut tx = client
        .build_transaction()
        .isolation_level(::postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .map_err(|e| from_pg(&e, "reading the schema's state"))?;
    let probe = probe_in(&mut tx);
    // Read-only: ending it either way changes nothing.
    let _ = tx.rollback();
    probe
}

/// [`probe`] as one statement, [`PROBE_WITH_HISTORY`]: `None` where it
/// cannot tell (no history table in the connection's schema, or no
/// schema), which the transaction's reads then report.
fn probe_at_once(client: &mut Client) -> Result<Option<Probe>> {
    let row = match client.query_typed_opt(PROBE_WITH_HISTORY, &[(&SCHEMA_MARKER, Type::TEXT)]) {
        Ok(Some(row)) => row,
        Ok(None) => return Ok(None),
        Err(e) if e.code() == Some(&::postgres::error::SqlState::UNDEFINED_TABLE) => {
            return Ok(None)
        }
        Err(e) => return Err(from_pg(&e, "reading the schema's state")),
    };
    let get = |e: ::postgres::Error| from_pg(&e, "reading the schema's state");
    // The unqualified history is the schema's own only when it has one (a
    // later schema of the search_path may hold another).
    let has_history: bool = row.try_get(5).map_err(get)?;
    if !has_history {
        return Ok(None);
    }
    let database: String = row.try_get(0).map_err(get)?;
    let schema: String = row.try_get(1).map_err(get)?;
    let versions: Vec<i64> = row
        .try_get::<_, Option<Vec<i64>>>(6)
        .map_err(get)?
        .unwrap_or_default();
    let texts = |i: usize| -> Result<Vec<Option<String>>> {
        Ok(row
            .try_get::<_, Option<Vec<Option<String>>>>(i)
            .map_err(get)?
            .unwrap_or_default())
    };
    let (names, applied, checksums) = (texts(7)?, texts(8)?, texts(9)?);
    if [names.len(), applied.len(), checksums.len()] != [versions.len(); 3] {
        return Err(Error::internal(
            "refinery_schema_history came back in arrays of other lengths",
        ));
    }
    let history = versions
        .into_iter()
        .zip(names)
        .zip(applied.into_iter().zip(checksums))
        .map(|((version, name), (applied_on, checksum))| HistoryRow {
            version,
            name,
            applied_on,
            checksum,
        })
        .collect();
    Ok(Some(Probe {
        place: format!("database `{database}`, schema `{schema}`"),
        encoding: row.try_get(2).map_err(get)?,
        objects: row.try_get(3).map_err(get)?,
        marked: row.try_get(4).map_err(get)?,
        history: Some(history),
    }))
}

/// [`probe`]'s reads, in its transaction.
fn probe_in(client: &mut ::postgres::Transaction<'_>) -> Result<Probe> {
    let row = client
        .query_typed_opt(PROBE, &[(&SCHEMA_MARKER, Type::TEXT)])
        .map_err(|e| from_pg(&e, "reading the schema's state"))?;
    let Some(row) = row else {
        let database = client
            .query_typed_one("SELECT current_database()::text", &[])
            .ok()
            .and_then(|r| r.try_get::<_, String>(0).ok())
            .unwrap_or_else(|| "?".into());
        return Err(Error::StoreIo {
            context: format!(
                "database `{database}`: the connection's search_path names no schema that exists, so there is nowhere to create logbook's tables"
            ),
        });
    };
    let get = |e: ::postgres::Error| from_pg(&e, "reading the schema's state");
    let database: String = row.try_get(0).map_err(get)?;
    let schema: String = row.try_get(1).map_err(get)?;
    let has_history: bool = row.try_get(5).map_err(get)?;
    let history = if has_history {
        let rows = client
            .query_typed(HISTORY, &[])
            .map_err(|e| from_pg(&e, "reading refinery_schema_history"))?;
        let get = |e: ::postgres::Error| from_pg(&e, "reading refinery_schema_history");
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            out.push(HistoryRow {
                version: r.try_get(0).map_err(get)?,
                name: r.try_get(1).map_err(get)?,
                applied_on: r.try_get(2).map_err(get)?,
                checksum: r.try_get(3).map_err(get)?,
            });
        }
        Some(out)
    } else {
        None
    };
    Ok(Probe {
        place: format!("database `{database}`, schema `{schema}`"),
        encoding: row.try_get(2).map_err(get)?,
        objects: row.try_get(3).map_err(get)?,
        marked: row.try_get(4).map_err(get)?,
        history,
    })
}
