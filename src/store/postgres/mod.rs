//! The PostgreSQL store (SPEC §7): the same ledger on a server, chosen by a
//! `postgres://` URL.

pub mod errors;
pub mod location;
pub mod tls;
