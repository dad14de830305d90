//! Integration tests: one binary, organised by topic (ripgrep / jj style).
//! They run the real `logbook` binary on temporary databases, and open the
//! same files with plain SQLite to check what is stored.

mod admin;
mod cases;
mod chain;
mod cli_errors;
mod cli_session;
mod common;
mod concurrency;
mod durability;
mod feed;
mod hardening;
mod helper;
mod library;
mod mcp;
mod resolve;
mod schema;
mod stages;
mod walcount;
mod write_path;
