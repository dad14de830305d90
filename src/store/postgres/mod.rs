//! The PostgreSQL store (docs/design.md, "Backends"): the same ledger on a server,
//! chosen by a `postgres://` URL.
//!
//! The schema is `migrations/postgres/` (the same versions, tables, columns,
//! views and invariants as `migrations/sqlite/`; docs/schema.md,
//! "PostgreSQL"), applied under an advisory lock ([`migrate`]). The URL is
//! parsed by [`location`], TLS set up by [`tls`], and server errors
//! classified by [`errors`]. The store interface over one server
//! transaction is [`tx::PgTx`], its SQL in [`sql`]; [`store::PgStore`] owns
//! the connection: transactions, retries, reconnects and the feed probe.

pub mod doctor;
pub mod errors;
pub mod location;
pub mod migrate;
pub mod query;
pub mod sql;
pub mod store;
pub mod tls;
pub mod tx;
