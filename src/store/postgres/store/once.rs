//! [`PgStore`]'s writes sent as one statement, outside a transaction
//! (docs/postgres.md, "One round trip per write"): the statements are in
//! [`crate::store::postgres::sql::once`]; here, sending one and reading what
//! its failure means.

use super::{Conn, PgStore};
use crate::error::{Error, Result};
use crate::model::{Run, Session};
use crate::store::postgres::errors::{classify, Class};
use crate::store::postgres::tx::{PgTx, StatementCache};
use crate::store::rows::BudgetRow;
use crate::store::{LeaseTakenOver, OneCheckpoint, OneOutcome, SessionRow};
use std::time::{Duration, Instant};

/// What one statement sent on its own came to ([`PgStore::once`]).
enum Once {
    /// It ran: its rows.
    Rows(Vec<postgres::Row>),
    /// The server refused it (or could not be reached to send it): nothing
    /// was applied.
    Declined,
    /// The connection broke, or the server said it is ending the
    /// connection, before or instead of its reply: it may have been
    /// applied.
    Lost,
}

/// A row that is not what the statement selects.
fn internal(e: postgres::Error) -> Error {
    Error::internal(format!("a one-statement write's row: {e}"))
}

/// The session a one-statement write returned, if it returned one.
fn first_session(rows: &[postgres::Row]) -> Result<Option<Session>> {
    rows.first()
        .map(|r| crate::store::postgres::sql::sessions::map_session(r).map(|(s, _, _)| s))
        .transpose()
}

impl PgStore {
    /// Applies `w` as one statement ([`crate::store::postgres::sql::once`]): the session as
    /// it now stands, or `NotApplied` when the statement applied nothing
    /// (the caller runs the write pipeline, which diagnoses, replays or
    /// waits). A reply lost on the way back is `Unknown`: `w` carries an
    /// idempotency key, so the pipeline replays the write if it was
    /// applied, and the caller reports an unknown outcome if the pipeline
    /// cannot reach the server to tell.
    ///
    /// # Errors
    /// STORE_BUSY when the session's row stayed locked for the busy
    /// timeout.
    pub fn write_one(&self, w: &crate::store::OneWrite<'_>) -> Result<OneOutcome> {
        self.write_one_reading(w, |_, s| Ok(s))
    }

    /// [`PgStore::write_one`], answering with `read` of the statement's row
    /// and the session it returned.
    fn write_one_reading<T>(
        &self,
        w: &crate::store::OneWrite<'_>,
        read: impl FnOnce(&postgres::Row, Session) -> Result<T>,
    ) -> Result<OneOutcome<T>> {
        if self.read_only {
            return Ok(OneOutcome::NotApplied);
        }
        let (sql, p) =
            crate::store::postgres::sql::once::write_statement(w, self.lock_timeout_ms());
        self.apply_one(&sql, &p, |rows| {
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let (s, _, _) = crate::store::postgres::sql::sessions::map_session(row)?;
            read(row, s).map(Some)
        })
    }

    /// Applies `lock`'s `w` (side [`crate::store::OneSide::LeaseTake`]) as
    /// one statement, as [`PgStore::write_one`]: the session as it now
    /// stands and, when the statement took over an expired lease, that
    /// lease's owner and expiry.
    ///
    /// # Errors
    /// STORE_BUSY when the session's row stayed locked for the busy
    /// timeout.
    pub fn lease_one(
        &self,
        w: &crate::store::OneWrite<'_>,
    ) -> Result<OneOutcome<(Session, Option<LeaseTakenOver>)>> {
        let Some(crate::store::OneSide::LeaseTake { token_sha256, .. }) = w.side else {
            return Err(Error::internal("lease_one takes a lease verb"));
        };
        self.write_one_reading(w, |row, s| {
            let found: Option<String> = row.try_get("lease_token_sha256").map_err(internal)?;
            let previous = match found {
                Some(t) if t != token_sha256 => Some(LeaseTakenOver {
                    pid: row.try_get("lease_pid").map_err(internal)?,
                    hostname: row.try_get("lease_hostname").map_err(internal)?,
                    expires_at_ms: row.try_get("lease_expires_at_ms").map_err(internal)?,
                }),
                _ => None,
            };
            Ok((s, previous))
        })
    }

    /// Applies a budget verb's `w` (side [`crate::store::OneSide::BudgetSet`]
    /// or [`crate::store::OneSide::BudgetReset`]) as one statement, as
    /// [`PgStore::write_one`]: the session as it now stands and the budget
    /// as the statement left it.
    ///
    /// # Errors
    /// STORE_BUSY when the session's row stayed locked for the busy
    /// timeout.
    pub fn budget_one(
        &self,
        w: &crate::store::OneWrite<'_>,
    ) -> Result<OneOutcome<(Session, BudgetRow)>> {
        if !matches!(
            w.side,
            Some(crate::store::OneSide::BudgetSet { .. } | crate::store::OneSide::BudgetReset)
        ) {
            return Err(Error::internal("budget_one takes a budget verb"));
        }
        self.write_one_reading(w, |row, s| {
            let policy: Option<String> = row.try_get("budget_on_exceed").map_err(internal)?;
            let Some(policy) = policy else {
                return Err(Error::internal("a budget statement returned no budget"));
            };
            let b = BudgetRow {
                max_tokens: row.try_get("budget_max_tokens").map_err(internal)?,
                max_api_calls: row.try_get("budget_max_api_calls").map_err(internal)?,
                max_duration_ms: row.try_get("budget_max_duration_ms").map_err(internal)?,
                on_exceed: policy.parse().ok(),
                base_tokens: row.try_get("budget_base_tokens").map_err(internal)?,
                base_api_calls: row.try_get("budget_base_api_calls").map_err(internal)?,
                base_duration_ms: row.try_get("budget_base_duration_ms").map_err(internal)?,
                exceeded_at_ms: row.try_get("budget_exceeded_at_ms").map_err(internal)?,
            };
            Ok((s, b))
        })
    }

    /// Applies a run verb `w` as one statement
    /// ([`crate::store::postgres::sql::once::run_statement`]): the run as it
    /// now stands, or `NotApplied` / `Unknown` as [`PgStore::write_one`].
    ///
    /// # Errors
    /// STORE_BUSY when the session's row stayed locked for the busy
    /// timeout.
    pub fn run_one(&self, w: &crate::store::OneRunWrite<'_>) -> Result<OneOutcome<Run>> {
        if self.read_only {
            return Ok(OneOutcome::NotApplied);
        }
        let (sql, p) = crate::store::postgres::sql::once::run_statement(w, self.lock_timeout_ms());
        self.apply_one(&sql, &p, |rows| {
            rows.first()
                .map(crate::store::postgres::sql::runs::map_run)
                .transpose()
        })
    }

    /// Sends one write statement and reads what it came to: `read` maps its
    /// rows (none: nothing applied).
    fn apply_one<T>(
        &self,
        sql: &str,
        p: &crate::store::postgres::sql::Params,
        read: impl FnOnce(&[postgres::Row]) -> Result<Option<T>>,
    ) -> Result<OneOutcome<T>> {
        Ok(
            match self.once(sql, &crate::store::postgres::sql::borrow(p))? {
                Once::Rows(rows) => match read(&rows)? {
                    Some(v) => OneOutcome::Applied(Box::new(v)),
                    None => OneOutcome::NotApplied,
                },
                Once::Declined => OneOutcome::NotApplied,
                Once::Lost => OneOutcome::Unknown,
            },
        )
    }

    /// Inserts a new session (`row`, with its parent if it has one), its
    /// `created` event with `idempotency`'s key and request digest if
    /// given, and, with `first`, its first checkpoint, as one statement
    /// ([`crate::store::postgres::sql::once::CREATE`], `CREATE_FIRST`): the session,
    /// or `None` when it applied nothing (the id is taken, a create already
    /// used the key, or the server refused, e.g. a missing parent: the
    /// caller creates it the usual way, which replays or diagnoses). A
    /// reply lost on the way back is resolved by the session's id: the
    /// statement runs again with the same id on a new connection (its
    /// insert, or its key's lock, waits for the lost attempt's, if that
    /// still runs) and reads the session back if the lost attempt applied
    /// it; with a key that another create used meanwhile, the lost attempt
    /// applied nothing (its id is not there) and the answer is `None`.
    ///
    /// # Errors
    /// STORE_BUSY; STORE_UNAVAILABLE with an unknown outcome
    /// ([`Error::CommitUnknown`]) when the server cannot be reached again
    /// within the busy timeout to tell.
    pub fn create_one(
        &self,
        row: &SessionRow<'_>,
        detail: &str,
        idempotency: Option<(&str, &str)>,
        first: Option<&OneCheckpoint<'_>>,
    ) -> Result<Option<Session>> {
        if self.read_only {
            return Ok(None);
        }
        let deadline = Instant::now() + Duration::from_millis(self.busy_timeout_ms);
        let params = crate::store::postgres::sql::once::CreateParams::new(
            row,
            detail,
            self.lock_timeout_ms(),
            idempotency,
            first,
        );
        let mut lost = false;
        loop {
            match self.once(params.sql(), &params.params())? {
                Once::Rows(rows) if !rows.is_empty() || !lost => return first_session(&rows),
                // The id is there (the lost attempt inserted it), or, with a
                // key, another create used the key.
                Once::Rows(_) => {
                    let found = self.read(|tx| tx.find_session(row.session_id))?;
                    if found.is_none() && idempotency.is_none() {
                        return Err(Error::internal("a created session could not be read back"));
                    }
                    return Ok(found);
                }
                Once::Declined if !lost => return Ok(None),
                Once::Declined | Once::Lost if Instant::now() >= deadline => {
                    return Err(Error::CommitUnknown {
                        location: self.loc.display.clone(),
                    });
                }
                Once::Declined | Once::Lost => {
                    lost = true;
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }

    /// What a one-statement write may wait for a row lock: the busy
    /// timeout, in ms.
    fn lock_timeout_ms(&self) -> i64 {
        i64::try_from(self.busy_timeout_ms.max(1)).unwrap_or(i64::MAX)
    }

    /// Runs one statement on its own (its own implicit transaction),
    /// connecting first if there is no connection.
    ///
    /// # Errors
    /// STORE_BUSY when it waited for a row lock for the whole busy
    /// timeout; STORE_IO, STORE_UNAVAILABLE when no connection can be
    /// made (as the pipeline would report).
    fn once(&self, sql: &str, p: &[crate::store::postgres::sql::Param<'_>]) -> Result<Once> {
        let mut slot = self.conn.borrow_mut();
        if slot.as_ref().is_none_or(|c| c.client.is_closed()) {
            *slot = None;
            match self.connect() {
                Ok(client) => {
                    *slot = Some(Conn {
                        client,
                        cache: StatementCache::new(self.loc.statement_cache_size),
                    });
                }
                Err(Class::Final(e)) => return Err(self.fill(e)),
                // The pipeline waits for the server within the busy timeout.
                Err(_) => return Ok(Once::Declined),
            }
        }
        let Some(conn) = slot.as_mut() else {
            return Err(Error::internal("no connection after connecting"));
        };
        let Conn { client, cache } = conn;
        let mut tx = PgTx::new(client, true)
            .with_location(&self.loc.display)
            .with_cache(cache);
        let out = tx.try_rows(sql, p);
        match out {
            Ok(rows) => Ok(Once::Rows(rows)),
            // The server answered with an error: the statement's
            // transaction was rolled back, nothing was applied.
            Err(e) if e.as_db_error().is_some() => {
                let state = e.as_db_error().map(|d| d.code().code().to_owned());
                let _ = tx.fail(&e); // clears the statement cache on a stale plan
                match classify(&e, &self.loc.display) {
                    // The server is ending the connection (terminated,
                    // shutting down): the driver may hand that notice to
                    // this statement although the statement had already
                    // run and committed, so its outcome is unknown.
                    Class::Lost(_) => {
                        *slot = None;
                        return Ok(Once::Lost);
                    }
                    _ if state.as_deref() == Some("55P03") => {
                        return Err(self.fill(Error::Busy {
                            timeout_ms: self.busy_timeout_ms,
                        }))
                    }
                    _ => {}
                }
                Ok(Once::Declined)
            }
            // No answer: the statement may or may not have been applied.
            Err(_) => {
                *slot = None;
                Ok(Once::Lost)
            }
        }
    }
}
