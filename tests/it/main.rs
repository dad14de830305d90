//! Integration tests: one binary, organised by topic (ripgrep / jj style).
//! They run the real `logbook` binary on temporary databases, and open the
//! same files with plain SQLite to check what is stored.
//!
//! A test of a failure case of CASES.md carries its id first in its name
//! (`c05_parallel_checkpoints_lose_no_update`) and lives in the module of
//! its topic: `cargo test --test it c05_` runs a case wherever it is.
//! Helpers every module may use (`TestEnv` and its verbs) are in
//! `common.rs`.

/// This binary runs every test on SQLite; `tests/pg/main.rs` runs the
/// backend-neutral modules again on PostgreSQL.
pub const BACKEND: common::Backend = common::Backend::Sqlite;

/// PostgreSQL-only items are left out of this binary.
#[allow(unused_macros)]
macro_rules! pg_only {
    ($($item:item)*) => {};
}

/// Items (tests, and helpers only they use) about facts of SQLite alone —
/// file modes, the WAL, the `-lock` file, the file's bytes — compiled in
/// this binary and left out of the PostgreSQL one.
#[allow(unused_macros)]
macro_rules! sqlite_only {
    ($($item:item)*) => { $($item)* };
}

mod admin;
mod budgets;
mod chain;
mod cli_errors;
mod cli_session;
mod cli_usage;
mod clock;
mod common;
mod concurrency;
mod conflict_clauses;
mod contention;
mod contracts;
mod contracts_errors;
mod db_files;
mod durability;
mod engine;
mod feed;
mod first_checkpoint;
mod gates;
mod golden;
mod hardening;
mod helper;
mod interrupt;
mod json_numbers;
mod leases;
mod library;
mod mcp;
mod mcp_record;
mod mcp_runs;
mod mcp_server;
mod mcp_sessions;
mod mcp_wire;
mod migration_files;
mod pg;
mod purge;
mod purge_cli;
mod readme;
mod readonly;
mod readonly_media;
mod replaced;
mod replays;
mod repo_docs;
mod resolve;
mod retention_guards;
mod run_race;
mod runs;
mod runs_ending;
mod runs_store;
mod schema;
mod schema_migrations;
mod schema_plans;
mod snapshots;
mod stages;
mod text;
mod timeline;
mod transfer;
mod transfer_fidelity;
mod transfer_jsonl;
mod transfer_seeds;
mod transfer_timeline;
mod transfer_workflow;
mod tree;
mod verify_export;
mod views;
mod wal;
mod walcount;
mod write_path;
