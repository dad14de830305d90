//! What a purge chooses: its filter, checked and written down in the
//! canonical form its record keeps (docs/design.md, "Retention").

use crate::error::{Error, Result};
use crate::model::SessionStatus;
use crate::store::rows::PurgeScan;
use serde::Serialize;
use std::path::PathBuf;

/// Which sessions to purge (docs/design.md, "Retention"). At least one of the filters must be
/// given; live sessions (pending, active, paused) and sessions with a live
/// descendant are never chosen, whatever the filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeFilter {
    /// Only sessions ended before this time (ms since the epoch).
    pub ended_before_ms: Option<i64>,
    /// Only this app's sessions.
    pub app: Option<String>,
    /// Only these ended statuses (empty: completed, failed and cancelled).
    pub statuses: Vec<SessionStatus>,
    /// Only these sessions (`ses_…` ids; empty: any). `purge --session`,
    /// and a framework adapter removing one thread.
    pub sessions: Vec<String>,
    /// Keep the newest N ended sessions of each app (by end time) among
    /// those the other filters choose.
    pub keep_last: Option<u64>,
}

/// A purge to plan or run.
#[derive(Debug, Clone, Default)]
pub struct PurgeRequest {
    /// What to purge.
    pub filter: PurgeFilter,
    /// Write the chosen sessions here as JSON Lines (the format `import`
    /// reads) before deleting anything. The file must not exist yet.
    pub export: Option<PathBuf>,
}

impl PurgeFilter {
    /// Checks the filter as a purge (or a dry run) would, without reading
    /// the ledger: a command line checks it before asking for confirmation.
    ///
    /// # Errors
    /// INVALID_ARGUMENT: no filter at all (field `filter`), a live status
    /// (`status`), a malformed app name (`app`).
    pub fn check(&self) -> Result<()> {
        self.scan().map(|_| ())
    }

    /// The statuses chosen, in the fixed order completed, failed,
    /// cancelled.
    pub(super) fn status_flags(&self) -> Result<[bool; 3]> {
        if self.statuses.is_empty() {
            return Ok([true; 3]);
        }
        let mut f = [false; 3];
        for s in &self.statuses {
            match s {
                SessionStatus::Completed => f[0] = true,
                SessionStatus::Failed => f[1] = true,
                SessionStatus::Cancelled => f[2] = true,
                other => {
                    return Err(Error::invalid(
                        "status",
                        format!(
                        "purge removes ended sessions only (completed, failed, cancelled), not {}",
                        other.as_str()
                    ),
                    ))
                }
            }
        }
        Ok(f)
    }

    /// The filter's SQL part.
    pub(super) fn scan(&self) -> Result<PurgeScan> {
        if self.ended_before_ms.is_none()
            && self.app.is_none()
            && self.statuses.is_empty()
            && self.keep_last.is_none()
            && self.sessions.is_empty()
        {
            return Err(Error::invalid(
                "filter",
                "purge needs at least one of --ended-before, --app, --status, --keep-last, --session",
            ));
        }
        super::super::request::opt_name("app", &self.app)?;
        for id in &self.sessions {
            super::super::request::parse_session_id(id).map_err(|_| {
                Error::invalid(
                    "session",
                    "expected `ses_` followed by 16 lowercase hex digits",
                )
            })?;
        }
        let sessions = if self.sessions.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(&self.sessions)
                    .map_err(|e| Error::internal(format!("cannot render session ids: {e}")))?,
            )
        };
        Ok(PurgeScan {
            statuses: self.status_flags()?,
            ended_before_ms: self.ended_before_ms.unwrap_or(i64::MAX),
            app: self.app.clone(),
            sessions,
        })
    }

    /// The filter a `purges.filter` records (its canonical JSON); `None`
    /// for a record raw SQL wrote (`{"raw_sql":true}`) or any other shape.
    pub(super) fn from_canonical(text: &str) -> Option<PurgeFilter> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Canon {
            ended_before_ms: Option<i64>,
            app: Option<String>,
            statuses: Vec<String>,
            keep_last: Option<u64>,
            #[serde(default)]
            sessions: Vec<String>,
        }
        let c: Canon = serde_json::from_str(text).ok()?;
        let statuses = c
            .statuses
            .iter()
            .map(|s| s.parse::<SessionStatus>().ok())
            .collect::<Option<Vec<_>>>()?;
        let f = PurgeFilter {
            ended_before_ms: c.ended_before_ms,
            app: c.app,
            statuses,
            keep_last: c.keep_last,
            sessions: c.sessions,
        };
        f.scan().ok().map(|_| f)
    }

    /// The canonical JSON of the filter, as `purges.filter` records it
    /// (keys in a fixed order, statuses in the fixed order).
    pub(super) fn canonical(&self) -> Result<String> {
        #[derive(Serialize)]
        struct Canon<'a> {
            ended_before_ms: Option<i64>,
            app: Option<&'a str>,
            statuses: Vec<&'static str>,
            keep_last: Option<u64>,
            // Left out when empty: a filter without it records as before.
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            sessions: &'a [String],
        }
        let f = self.status_flags()?;
        let mut sorted = self.sessions.clone();
        sorted.sort();
        sorted.dedup();
        let names = ["completed", "failed", "cancelled"];
        let statuses = if self.statuses.is_empty() {
            Vec::new()
        } else {
            names
                .iter()
                .zip(f)
                .filter(|(_, on)| *on)
                .map(|(n, _)| *n)
                .collect()
        };
        serde_json::to_string(&Canon {
            ended_before_ms: self.ended_before_ms,
            app: self.app.as_deref(),
            statuses,
            keep_last: self.keep_last,
            sessions: &sorted,
        })
        .map_err(|e| Error::internal(format!("cannot render a purge filter: {e}")))
    }
}

impl PurgeRequest {
    /// Checks the request without reading the ledger: the filter
    /// ([`PurgeFilter::check`]), and for a dry run that no `export` is
    /// asked for (a dry run writes nothing, so it refuses the file rather
    /// than ignore it).
    ///
    /// # Errors
    /// As [`PurgeFilter::check`]; INVALID_ARGUMENT (field `export`) for a
    /// dry run with `export`.
    pub fn check(&self, dry_run: bool) -> Result<()> {
        self.filter.check()?;
        if dry_run && self.export.is_some() {
            return Err(Error::invalid(
                "export",
                "a dry run writes nothing: drop --export to see what would go (--json lists every id), or drop --dry-run to export and purge",
            ));
        }
        Ok(())
    }
}
