//! The SQLite store (docs/design.md, "Storage"): the embedded default, one
//! database file beside its `-wal`, `-shm` and `-lock` companions.
//!
//! [`open`] opens a file (modes, pragmas, probes) and migrates it with
//! [`migrate`]; [`files`] says which files are the database's. The store
//! interface over one transaction is [`tx::SqliteTx`] (on [`txn::Txn`],
//! SQLite's `BEGIN IMMEDIATE`/`COMMIT` on cached statements), its SQL in
//! [`sql`]; [`store::SqliteStore`] owns the connection: the writer queue
//! ([`writelock`]), busy waits ([`busy`]) and WAL checkpoints outside the
//! callers' COMMITs ([`checkpointer`]). [`admin`] holds `doctor`'s file
//! checks and `backup`; [`query`] runs `logbook sql`; [`codec`] reads
//! SQLite's values.

pub mod admin;
pub mod busy;
pub mod checkpointer;
pub mod codec;
pub mod files;
pub mod migrate;
pub mod open;
pub mod query;
pub mod sql;
pub mod store;
pub mod tx;
pub mod txn;
pub mod writelock;
