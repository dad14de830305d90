//! The suite's PostgreSQL half (docs/design.md, "Backends"): the backend-neutral modules
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

/// PostgreSQL-only items are compiled into this binary.
#[allow(unused_macros)]
macro_rules! pg_only {
    ($($item:item)*) => { $($item)* };
}

/// SQLite-only items are left out of this binary.
#[allow(unused_macros)]
macro_rules! sqlite_only {
    ($($item:item)*) => {};
}

#[path = "../it/common.rs"]
mod common;
#[path = "../it/engine.rs"]
mod engine;
#[path = "../it/pg.rs"]
mod pg;

// PostgreSQL only.
mod failover;
mod pg_create_first;
mod pg_fork_race;
mod pg_move;
mod pg_one_statement;
mod pg_one_statement_budget;
mod pg_one_statement_create;
mod pg_one_statement_ends;
mod pg_one_statement_lease;
mod pg_one_statement_runs;
mod pg_one_statement_usage;
mod pg_one_statement_workflow;
mod pg_reads;
mod pg_schema;
mod pg_server;
mod pg_show;
mod pg_tls;
mod pg_triggers;
mod pg_tx;
mod pg_tx_concurrency;
mod pg_tx_reads;
mod pg_tx_script;
mod pg_views;
mod proxy;

// Backend-neutral modules of tests/it/ (their SQLite facts in sqlite_only!).
#[path = "../it/budgets.rs"]
mod budgets;
#[path = "../it/chain.rs"]
mod chain;
#[path = "../it/cli_errors.rs"]
mod cli_errors;
#[path = "../it/cli_session.rs"]
mod cli_session;
#[path = "../it/cli_usage.rs"]
mod cli_usage;
#[path = "../it/clock.rs"]
mod clock;
#[path = "../it/concurrency.rs"]
mod concurrency;
#[path = "../it/conflict_clauses.rs"]
mod conflict_clauses;
#[path = "../it/contention.rs"]
mod contention;
#[path = "../it/contracts.rs"]
mod contracts;
#[path = "../it/contracts_errors.rs"]
mod contracts_errors;
#[path = "../it/durability.rs"]
mod durability;
#[path = "../it/feed.rs"]
mod feed;
#[path = "../it/gates.rs"]
mod gates;
#[path = "../it/golden.rs"]
mod golden;
#[path = "../it/hardening.rs"]
mod hardening;
#[path = "../it/helper.rs"]
mod helper;
#[path = "../it/interrupt.rs"]
mod interrupt;
#[path = "../it/json_numbers.rs"]
mod json_numbers;
#[path = "../it/leases.rs"]
mod leases;
#[path = "../it/library.rs"]
mod library;
#[path = "../it/mcp.rs"]
mod mcp;
#[path = "../it/mcp_record.rs"]
mod mcp_record;
#[path = "../it/mcp_runs.rs"]
mod mcp_runs;
#[path = "../it/mcp_server.rs"]
mod mcp_server;
#[path = "../it/mcp_sessions.rs"]
mod mcp_sessions;
#[path = "../it/mcp_wire.rs"]
mod mcp_wire;
#[path = "../it/purge.rs"]
mod purge;
#[path = "../it/purge_cli.rs"]
mod purge_cli;
#[path = "../it/readonly.rs"]
mod readonly;
#[path = "../it/replays.rs"]
mod replays;
#[path = "../it/resolve.rs"]
mod resolve;
#[path = "../it/retention_guards.rs"]
mod retention_guards;
#[path = "../it/run_race.rs"]
mod run_race;
#[path = "../it/runs.rs"]
mod runs;
#[path = "../it/runs_ending.rs"]
mod runs_ending;
#[path = "../it/runs_store.rs"]
mod runs_store;
#[path = "../it/snapshots.rs"]
mod snapshots;
#[path = "../it/stages.rs"]
mod stages;
#[path = "../it/text.rs"]
mod text;
#[path = "../it/timeline.rs"]
mod timeline;
#[path = "../it/transfer.rs"]
mod transfer;
#[path = "../it/transfer_fidelity.rs"]
mod transfer_fidelity;
#[path = "../it/transfer_jsonl.rs"]
mod transfer_jsonl;
#[path = "../it/transfer_seeds.rs"]
mod transfer_seeds;
#[path = "../it/transfer_timeline.rs"]
mod transfer_timeline;
#[path = "../it/transfer_workflow.rs"]
mod transfer_workflow;
#[path = "../it/tree.rs"]
mod tree;
#[path = "../it/verify_export.rs"]
mod verify_export;
#[path = "../it/views.rs"]
mod views;

// Left out, wholly facts of SQLite:
// - admin: doctor's file checks (integrity, modes, WAL) and backup; a
//   server's doctor and its refusal of backup are in pg_server.
// - db_files: the file, its -wal/-shm/-lock companions and their modes.
// - migration_files: SQLite's migration files and refinery's history.
// - readme: README.md's first screen and docs/storage.md (text, no database).
// - readonly_media: a read-only mount under a SQLite file.
// - replaced: a SQLite file replaced or removed under an open handle.
// - schema: SQLite's schema (sqlite_schema, PRAGMAs, its triggers via
//   rusqlite); the server's is pinned by pg_schema and pg_triggers.
// - schema_migrations: SQLite's migrations, user_version and history.
// - schema_plans: EXPLAIN QUERY PLAN of SQLite.
// - wal, walcount, write_path: the WAL, its size and the file write path.
