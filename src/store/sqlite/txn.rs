//! SQLite transactions on cached statements: [`Txn`], what the SQLite
//! store opens before it hands the connection to
//! [`SqliteTx`](super::tx::SqliteTx), the store interface.
//!
//! `BEGIN IMMEDIATE`, `BEGIN`, `COMMIT` and `ROLLBACK` run as cached
//! prepared statements rather than being parsed on every call. A [`Txn`]
//! that is dropped without [`Txn::commit`] rolls back, so every error path
//! leaves no transaction (and no lock) behind (CASES C03).

use rusqlite::Connection;
use std::ops::Deref;

/// An open transaction; derefs to the connection.
#[derive(Debug)]
pub struct Txn<'c> {
    conn: &'c Connection,
    open: bool,
}

fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

impl<'c> Txn<'c> {
    /// `BEGIN IMMEDIATE`: takes the write lock now, where the busy handler
    /// applies, instead of failing to upgrade a read lock later.
    pub fn immediate(conn: &'c Connection) -> rusqlite::Result<Self> {
        run(conn, "BEGIN IMMEDIATE")?;
        Ok(Txn { conn, open: true })
    }

    /// `BEGIN` (deferred): one read snapshot for several statements.
    pub fn read(conn: &'c Connection) -> rusqlite::Result<Self> {
        run(conn, "BEGIN")?;
        Ok(Txn { conn, open: true })
    }

    /// `COMMIT`. On failure the transaction is rolled back when dropped.
    pub fn commit(mut self) -> rusqlite::Result<()> {
        run(self.conn, "COMMIT")?;
        self.open = false;
        Ok(())
    }

    /// `ROLLBACK` now.
    pub fn rollback(mut self) -> rusqlite::Result<()> {
        self.open = false;
        run(self.conn, "ROLLBACK")
    }
}

impl Deref for Txn<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        if self.open && !self.conn.is_autocommit() {
            // Nothing else can be done with a failed rollback here; SQLite
            // rolls back on its own when the statement that failed was a
            // COMMIT that could not complete.
            let _ = run(self.conn, "ROLLBACK");
        }
    }
}
