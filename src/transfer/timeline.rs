//! The one check of a converted session that every import format passes,
//! whatever it was read from: the session's row agrees with its own
//! timeline (docs/import-export.md, "The row and its timeline"). It runs
//! on [`SessionRows`] after conversion and after [`super::check_rows`]
//! (which guarantees at least one event, the first `created`, and
//! `1 ≤ rev ≤ number of events`), so it holds for logbook JSON Lines,
//! Phelix and Amber alike.
//!
//! What it does not hold here is what logbook's own verbs could not have
//! written: each rule is the invariant the write kernel keeps (README.md,
//! "What it is, and who it is for"; docs/schema.md).

use super::Bad;
use crate::model::SessionStatus;
use crate::store::rows::{EventRow, SessionRows};

/// The statuses an event of this type leaves its session in, when its
/// type says so; `None` for an event that does not set the status.
///
/// `created` leaves a session pending or active (`session create` makes
/// either); the status verbs' events their status; a blocking gate's
/// `gate_opened` pauses it, `gate_approved` leaves it active (an `auto`
/// gate is approved on an active session, a decision resumes a paused
/// one) and `gate_rejected` ends it (failed or cancelled, its `outcome`).
/// The gate events count so that a timeline written before the kernel
/// also recorded the status event after them (and Amber's, which has no
/// pause event) says the status too.
fn status_after(e: &EventRow) -> Option<&'static [SessionStatus]> {
    use SessionStatus::*;
    Some(match e.event_type.as_str() {
        "created" => &[Pending, Active],
        "started" | "resumed" | "gate_approved" => &[Active],
        "paused" | "gate_opened" => &[Paused],
        "completed" => &[Completed],
        "failed" => &[Failed],
        "cancelled" => &[Cancelled],
        "gate_rejected" => &[Failed, Cancelled],
        _ => return None,
    })
}

/// Event types each of which is one mutation of its own (its session's
/// rev + 1) that records no other event of these types: the verbs' own
/// events. The status events are not among them: a status event is also
/// appended beside another verb's event (a gate decision, a budget
/// crossing), as are `run_cancelled` (a session's end cancels its runs) and
/// `budget_exceeded`. Names of the built-in families that logbook does not
/// write (`stage_foo`) are not counted either.
const OWN_MUTATION_TYPES: &[&str] = &[
    "created",
    "checkpoint",
    "checkpoint_restored",
    "forked",
    "usage_recorded",
    "budget_set",
    "budget_reset",
    "stage_started",
    "stage_completed",
    "stage_failed",
    "stage_retrying",
    "gate_opened",
    "gate_approved",
    "gate_rejected",
    "run_created",
    "run_started",
    "run_usage",
    "run_turn",
    "run_completed",
    "run_failed",
    "run_timeout",
    "lease_acquired",
    "lease_taken_over",
    "lease_released",
];

/// Whether an event is a mutation of its own ([`OWN_MUTATION_TYPES`], or
/// an agent's `x.` event: `session event` appends one per mutation).
fn own_mutation(e: &EventRow) -> bool {
    e.event_type.starts_with("x.") || OWN_MUTATION_TYPES.contains(&e.event_type.as_str())
}

/// `a`, `a or b`: the status names of a list.
fn names(statuses: &[SessionStatus]) -> String {
    let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    names.join(" or ")
}

/// Checks that a converted session's row agrees with its own timeline,
/// naming the first field that does not (logbook's field names, whatever
/// the format):
///
/// - `status`: the one the last status event leaves (see [`status_after`]);
/// - `rev`: at least the number of events that are each a mutation of
///   their own (`rev` ≤ the number of events is [`super::check_rows`]'s);
/// - `ended_at_ms`: for an ended session, the `at_ms` of the status event
///   that ended it;
/// - `final_result`: a completed session's is the `detail` of its
///   `completed` event; any other session has none;
/// - `checkpoint_seq`: the seq of the last `checkpoint` event, null when
///   there is none.
pub(crate) fn check_timeline(s: &SessionRows) -> Result<(), Bad> {
    let Some((i, last, allowed)) = s
        .events
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, e)| status_after(e).map(|st| (i, e, st)))
    else {
        return Err(Bad::new("events", "must hold at least the `created` event"));
    };
    if !allowed.contains(&s.status) {
        return Err(Bad::new(
            "status",
            format!(
                "is {}, but the last event that sets the status (events[{i}], `{}`) leaves the session {}",
                s.status.as_str(),
                last.event_type,
                names(allowed)
            ),
        ));
    }
    let own = s.events.iter().filter(|e| own_mutation(e)).count();
    let own = i64::try_from(own).unwrap_or(i64::MAX);
    if s.rev < own {
        return Err(Bad::new(
            "rev",
            format!(
                "is {}, but the timeline records at least {own} mutations (events that are each one mutation: created, checkpoint, x.…, stage_*, gate_*, run_*, lease_*, usage and budget changes, forked, checkpoint_restored)",
                s.rev
            ),
        ));
    }
    if s.status.is_terminal() && s.ended_at_ms != Some(last.at_ms) {
        return Err(Bad::new(
            "ended_at_ms",
            format!(
                "must be the at_ms of the event that ended the session (events[{i}], `{}`)",
                last.event_type
            ),
        ));
    }
    if s.status == SessionStatus::Completed {
        if s.final_result != last.detail {
            return Err(Bad::new(
                "final_result",
                format!(
                    "must be the detail of the `completed` event that ended the session (events[{i}])"
                ),
            ));
        }
    } else if s.final_result.is_some() {
        return Err(Bad::new(
            "final_result",
            format!(
                "must be null: only a completed session has a final result, and this one is {}",
                s.status.as_str()
            ),
        ));
    }
    let last_checkpoint = s
        .events
        .iter()
        .rposition(|e| e.event_type == "checkpoint")
        .and_then(|j| i64::try_from(j).ok());
    if s.checkpoint_seq != last_checkpoint {
        let reason = match last_checkpoint {
            Some(j) => format!("must be the seq of the last `checkpoint` event ({j})"),
            None => "must be null: the timeline has no `checkpoint` event".to_owned(),
        };
        return Err(Bad::new("checkpoint_seq", reason));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ActorType, Usage};

    fn ev(t: &str, at_ms: i64, detail: Option<&str>) -> EventRow {
        EventRow {
            event_type: t.to_owned(),
            at_ms,
            actor_type: ActorType::Cli,
            detail: detail.map(str::to_owned),
            data: None,
            run_id: None,
        }
    }

    /// created, checkpoint, checkpoint, completed: rev 4, consistent.
    fn completed() -> SessionRows {
        SessionRows {
            session_id: "ses_0000000000000001".into(),
            status: SessionStatus::Completed,
            title: "t".into(),
            goal: None,
            app: None,
            agent_id: None,
            route: None,
            stage: None,
            parent_session_id: None,
            tags: Vec::new(),
            context: "{}".into(),
            metadata: "{}".into(),
            actor_type: ActorType::Cli,
            actor_id: None,
            rev: 4,
            checkpoint_seq: Some(2),
            refs: Vec::new(),
            final_result: Some("done".into()),
            end_reason: None,
            usage: Usage::default(),
            created_at_ms: 10,
            updated_at_ms: 40,
            ended_at_ms: Some(40),
            events: vec![
                ev("created", 10, None),
                ev("checkpoint", 20, Some("a")),
                ev("checkpoint", 30, Some("b")),
                ev("completed", 40, Some("done")),
            ],
            workflow: Default::default(),
        }
    }

    #[track_caller]
    fn refused(s: &SessionRows, field: &str, reason: &str) {
        let b = check_timeline(s).expect_err("refused");
        assert_eq!((b.field.as_str(), b.reason.as_str()), (field, reason));
    }

    #[test]
    fn a_consistent_session_passes() {
        check_timeline(&completed()).unwrap();
        // A gate rejection ends a session with the rejection's own event
        // only in timelines written before the status event followed it.
        let mut s = completed();
        s.status = SessionStatus::Cancelled;
        s.final_result = None;
        s.events[3] = ev("gate_rejected", 40, Some("no"));
        check_timeline(&s).unwrap();
        // Side events (a crossing, runs cancelled) do not count as
        // mutations: rev 2 for created + usage_recorded + budget_exceeded
        // + paused.
        let mut s = completed();
        s.status = SessionStatus::Paused;
        s.final_result = None;
        s.ended_at_ms = None;
        s.checkpoint_seq = None;
        s.rev = 2;
        s.events = vec![
            ev("created", 10, None),
            ev("usage_recorded", 20, None),
            ev("budget_exceeded", 20, Some("over")),
            ev("paused", 20, Some("over")),
        ];
        check_timeline(&s).unwrap();
    }

    #[test]
    fn status_must_be_the_last_status_events() {
        let mut s = completed();
        s.status = SessionStatus::Failed;
        s.final_result = None;
        refused(
            &s,
            "status",
            "is failed, but the last event that sets the status (events[3], `completed`) leaves the session completed",
        );
        let mut s = completed();
        s.status = SessionStatus::Paused;
        s.ended_at_ms = None;
        s.final_result = None;
        s.events.pop();
        s.rev = 3;
        refused(
            &s,
            "status",
            "is paused, but the last event that sets the status (events[0], `created`) leaves the session pending or active",
        );
    }

    #[test]
    fn rev_must_count_every_mutation() {
        let mut s = completed();
        s.rev = 2;
        refused(
            &s,
            "rev",
            "is 2, but the timeline records at least 3 mutations (events that are each one mutation: created, checkpoint, x.…, stage_*, gate_*, run_*, lease_*, usage and budget changes, forked, checkpoint_restored)",
        );
    }

    #[test]
    fn ended_at_ms_is_the_ending_events_time() {
        let mut s = completed();
        s.ended_at_ms = Some(35);
        refused(
            &s,
            "ended_at_ms",
            "must be the at_ms of the event that ended the session (events[3], `completed`)",
        );
    }

    #[test]
    fn final_result_is_the_completed_events_detail_and_only_a_completed_sessions() {
        let mut s = completed();
        s.final_result = Some("other".into());
        refused(
            &s,
            "final_result",
            "must be the detail of the `completed` event that ended the session (events[3])",
        );
        let mut s = completed();
        s.final_result = None;
        refused(
            &s,
            "final_result",
            "must be the detail of the `completed` event that ended the session (events[3])",
        );
        let mut s = completed();
        s.status = SessionStatus::Failed;
        s.events[3] = ev("failed", 40, Some("done"));
        refused(
            &s,
            "final_result",
            "must be null: only a completed session has a final result, and this one is failed",
        );
    }

    #[test]
    fn checkpoint_seq_is_the_last_checkpoint_events() {
        let mut s = completed();
        s.checkpoint_seq = Some(1);
        refused(
            &s,
            "checkpoint_seq",
            "must be the seq of the last `checkpoint` event (2)",
        );
        let mut s = completed();
        s.checkpoint_seq = None;
        refused(
            &s,
            "checkpoint_seq",
            "must be the seq of the last `checkpoint` event (2)",
        );
        let mut s = completed();
        s.events[1] = ev("x.note", 20, None);
        s.events[2] = ev("x.note", 30, None);
        refused(
            &s,
            "checkpoint_seq",
            "must be null: the timeline has no `checkpoint` event",
        );
    }
}
