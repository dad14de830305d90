//! Plain data: ids, sessions, events. No I/O and no SQL live here.

pub mod event;
pub mod gate;
pub mod ids;
pub mod session;

pub use event::{Event, EventType};
pub use gate::{Gate, GateKind, GateStatus};
pub use ids::SessionId;
pub use session::{Actor, ActorType, Checkpoint, Session, SessionStatus, Usage, Verb};
