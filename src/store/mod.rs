//! The storage layer: the only code that knows SQL or names rusqlite.
//!
//! Functions take `&Connection`; a `tx::Tx` derefs to one, so the same
//! helper works inside any transaction. Public `Ledger` methods open the
//! transaction and call these helpers.

pub mod admin;
pub mod budgets;
pub mod busy;
pub mod chain;
pub mod checkpointer;
pub mod codec;
pub mod events;
pub mod feed;
pub mod files;
pub mod list;
pub mod migrate;
pub mod open;
pub mod query;
pub mod runs;
pub mod sessions;
pub mod transfer;
pub mod tx;
pub mod workflow;
pub mod writelock;

pub use open::{open, StoreConfig, SyncMode};
