//! Integration tests: one binary, organised by topic (ripgrep / jj style).
//! They run the real `logbook` binary on temporary databases, and open the
//! same files with plain SQLite to check what is stored.

mod admin;
mod budgets;
mod cases;
mod chain;
mod cli_errors;
mod cli_session;
mod common;
mod concurrency;
mod contracts;
mod contracts_errors;
mod db_files;
mod durability;
mod feed;
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
mod mcp_wire;
mod migration_files;
mod pg;
mod pg_schema;
mod pg_triggers;
mod readonly;
mod readonly_media;
mod replaced;
mod replays;
mod resolve;
mod runs;
mod schema;
mod snapshots;
mod stages;
mod timeline;
mod transfer;
mod transfer_fidelity;
mod tree;
mod views;
mod walcount;
mod write_path;
