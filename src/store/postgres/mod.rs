//! The PostgreSQL store (SPEC §7, issue 15): the same ledger on a server.
//!
//! This module holds what only PostgreSQL needs: the schema's migrations,
//! run under an advisory lock ([`migrate`]). The schema itself is
//! `migrations/postgres/` (the same versions, tables, columns, views and
//! invariants as `migrations/sqlite/`; docs/schema.md, "PostgreSQL").

pub mod migrate;
