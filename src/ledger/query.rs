//! `logbook sql` (docs/design.md, "Operator access"): read-only SQL for operators.

use super::Ledger;
use crate::error::{Error, Result};
use crate::store::rows::{QueryResult, QUERY_TIMEOUT_MS};

impl Ledger {
    /// Runs one read-only SQL statement on a connection opened with
    /// `SQLITE_OPEN_READ_ONLY` and `query_only` (this handle's own when it
    /// was opened read-only, else a fresh one), so nothing can be written
    /// whatever the text says.
    ///
    /// # Errors
    /// INVALID_ARGUMENT (field `sql`) for an empty text, more than one
    /// statement, a statement that would write, or one SQLite rejects (its
    /// message, passed through the redactor); STORE_BUSY; STORE_IO.
    ///
    /// `timeout_ms` (1..=3,600,000; default 30,000) interrupts a statement
    /// that runs longer; a result over 100,000 rows is refused rather than
    /// cut short.
    pub fn query(&self, text: &str, timeout_ms: Option<u64>) -> Result<QueryResult> {
        let timeout_ms = timeout_ms.unwrap_or(QUERY_TIMEOUT_MS);
        if !(1..=3_600_000).contains(&timeout_ms) {
            return Err(Error::invalid("timeout_ms", "must be from 1 to 3600000"));
        }
        self.store.query(text, timeout_ms)
    }
}
