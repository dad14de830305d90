//! The suite's PostgreSQL half (issue 15 §6): the backend-neutral modules
//! of `tests/it/` run again here, each `TestEnv` a fresh database on the
//! PostgreSQL test server (`tests/it/pg.rs`), and beside them the facts of
//! PostgreSQL alone (its schema and triggers seen through a plain client,
//! the store interface against SQLite's, reconnects and restarts).
//!
//! Tests of facts of SQLite alone are wrapped in `sqlite_only!`, which
//! this binary expands to nothing. Without a server (`LOGBOOK_TEST_PG`
//! unset) outside CI, the first test to need one prints one line saying
//! the PostgreSQL half was skipped and ends this binary with exit 0; under
//! CI it fails.

// A module written for both backends has helpers only its SQLite-only
// tests use.
#![allow(dead_code, unused_imports)]

/// This binary runs its tests on PostgreSQL.
pub const BACKEND: common::Backend = common::Backend::Postgres;

/// SQLite-only items are left out of this binary.
#[allow(unused_macros)]
macro_rules! sqlite_only {
    ($($item:item)*) => {};
}

#[path = "../it/common.rs"]
mod common;
#[path = "../it/pg.rs"]
mod pg;

// PostgreSQL only.
mod pg_move;
mod pg_schema;
mod pg_server;
mod pg_tls;
mod pg_triggers;
mod pg_tx;
mod pg_tx_concurrency;
mod pg_tx_reads;
mod pg_tx_script;
mod pg_views;
mod proxy;

// Backend-neutral modules of tests/it/.
#[path = "../it/cli_session.rs"]
mod cli_session;
