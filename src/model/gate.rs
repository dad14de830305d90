//! Gates: recorded decisions on a session (docs/design.md, "Gates"; Amber's
//! gate handler). A gate records a decision; it authorizes nothing.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// What a gate waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum GateKind {
    /// Approved at once when opened; the session keeps going.
    #[serde(rename = "auto")]
    Auto,
    /// Pauses the session until a user approves or rejects it.
    #[serde(rename = "user-approval")]
    UserApproval,
    /// Pauses the session for a review before it continues.
    #[serde(rename = "step-confirm")]
    StepConfirm,
}

impl GateKind {
    /// Every kind, in the order of the schema's CHECK list.
    pub const VARIANTS: [GateKind; 3] = [Self::Auto, Self::UserApproval, Self::StepConfirm];

    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::UserApproval => "user-approval",
            Self::StepConfirm => "step-confirm",
        }
    }

    /// Whether opening it pauses the session (every kind but `auto`).
    pub fn blocks(self) -> bool {
        !matches!(self, Self::Auto)
    }
}

impl FromStr for GateKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::VARIANTS
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| "expected one of auto, user-approval, step-confirm".to_owned())
    }
}

impl fmt::Display for GateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a gate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GateStatus {
    /// Waiting for a decision; the session is paused on it.
    Pending,
    /// Approved (an `auto` gate at once).
    Approved,
    /// Rejected; the session failed or was cancelled.
    Rejected,
}

impl GateStatus {
    /// Every status, in the order of the schema's CHECK list.
    pub const VARIANTS: [GateStatus; 3] = [Self::Pending, Self::Approved, Self::Rejected];

    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
        }
    }
}

impl FromStr for GateStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::VARIANTS
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| "expected one of pending, approved, rejected".to_owned())
    }
}

/// One gate of a session, as `gate list` and `show` return it. Serializes
/// in the field order below.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gate {
    /// The gate's name, 1–128 characters.
    pub name: String,
    /// Which time this name was opened on the session, from 1 (a name may
    /// be opened again once its previous gate is decided).
    pub round: i64,
    /// What it waits for.
    pub kind: GateKind,
    /// Where it stands.
    pub status: GateStatus,
    /// Seq of the event that opened it (`gate_opened`, or `gate_approved`
    /// for an `auto` gate).
    pub opened_seq: i64,
    /// When it was opened, ms since the Unix epoch (UTC).
    pub opened_at_ms: i64,
    /// Seq of the `gate_approved` / `gate_rejected` event, or null.
    pub decided_seq: Option<i64>,
    /// When it was decided, ms since the Unix epoch (UTC), or null.
    pub decided_at_ms: Option<i64>,
    /// The approval note or the rejection reason (redacted), or null.
    pub reason: Option<String>,
    /// For a rejection: `failed`, or `cancelled` (`--abort`); else null.
    pub outcome: Option<String>,
}
