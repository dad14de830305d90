//! The SQL of the SQLite store, one module per table group (the PostgreSQL
//! store's `sql` modules mirror them): `const` statements with explicit
//! columns and `?N` parameters next to their row mappers, run by
//! [`super::tx::SqliteTx`] on the connection of one transaction.

pub mod budgets;
pub mod chain;
pub mod events;
pub mod feed;
pub mod list;
pub mod retention;
pub mod runs;
pub mod sessions;
pub mod transfer;
pub mod workflow;
