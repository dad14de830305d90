//! logbook: an embedded, SQLite-backed ledger of AI-agent work sessions.
//!
//! Agents on one host record every unit of work — create, checkpoint, pause,
//! complete / fail / cancel — with an append-only event timeline, from many
//! processes at once, into one SQLite file that operators query with plain
//! SQL. The CLI (`logbook`) is a thin layer over [`Ledger`].
//!
//! ```
//! use logbook::{CheckpointRequest, CreateSession, Ledger, LedgerOptions, Mutation};
//!
//! let dir = tempfile::tempdir()?;
//! let ledger = Ledger::open(LedgerOptions::at(dir.path().join("ledger.db")))?;
//! let s = ledger.create_session(CreateSession::titled("ship billing v3"))?;
//! let id = s.session_id.to_string();
//! let step = CheckpointRequest { step: Some("deploy".into()), ..Default::default() };
//! ledger.checkpoint(&id, step, &Mutation { if_rev: Some(1), ..Default::default() })?;
//! let done = ledger.complete(&id, "shipped", &Mutation::default())?;
//! assert_eq!(done.rev, 3);
//! assert_eq!(ledger.show_session(&id)?.events.len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, clippy::unwrap_used, clippy::expect_used)]
#![deny(clippy::print_stdout, clippy::print_stderr)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod chain;
pub mod clock;
pub mod envelope;
pub mod error;
pub mod interrupt;
pub mod ledger;
pub mod mcp;
pub mod model;
pub mod redact;
pub mod resolve;
pub mod store;
pub mod transfer;
pub mod validate;

pub use clock::Clock;
pub use envelope::{Envelope, ErrorBody};
pub use error::{Error, ErrorCode, Result};
pub use interrupt::Interrupt;
pub use ledger::{
    AppendEvent, ChainHead, CheckpointRequest, CreateSession, EventPage, FeedPage, FeedQuery,
    Ledger, LedgerOptions, ListSessions, Mutation, Resolved, ResolvedState, SessionPage,
    SessionView, StageAction, StageRequest, VerifyReport,
};
pub use ledger::{CreateRun, RecordUsage, RunUsageDelta, SetBudget};
pub use ledger::{ExportOutcome, ExportSession};
pub use ledger::{ForkRequest, GateList, Lease, LockRequest, SessionTree, SnapshotList};
pub use ledger::{Replayed, Written};
pub use model::{Actor, ActorType, Checkpoint, Event, Session, SessionId, SessionStatus, Usage};
pub use model::{Budget, OnExceed, Run, RunError, RunId, RunStatus, RunUsage};
pub use model::{Gate, GateKind, GateStatus};
pub use store::SyncMode;
pub use transfer::{ExportFormat, ExportReport, ImportFormat, ImportReport, Rejection};
