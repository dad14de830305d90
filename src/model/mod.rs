//! Plain data: ids, sessions, events. No I/O and no SQL live here.

pub mod event;
pub mod gate;
pub mod ids;
pub mod run;
pub mod session;

pub use event::{Event, EventType};
pub use gate::{Gate, GateKind, GateStatus};
pub use ids::SessionId;
pub use run::{
    Budget, BudgetFigures, BudgetRemaining, OnExceed, Run, RunError, RunId, RunStatus, RunUsage,
    RunVerb, COUNT_MAX,
};
pub use session::{Actor, ActorType, Checkpoint, Session, SessionStatus, Usage, Verb};
