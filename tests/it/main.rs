//! Integration tests: one binary, organised by topic (ripgrep / jj style).
//! They run the real `logbook` binary on temporary databases, and open the
//! same files with plain SQLite to check what is stored.

mod cases;
mod chain;
mod cli_errors;
mod cli_session;
mod common;
mod concurrency;
mod durability;
mod hardening;
mod helper;
mod library;
mod schema;
mod transfer;
mod walcount;
mod write_path;
