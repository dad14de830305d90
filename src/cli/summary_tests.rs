//! Unit tests of [`super::event_summary`]: one per arm (or group of arms
//! that share one), and the one-line and multibyte rules for every type.

use super::*;
use logbook::ActorType;

fn ev(t: &str, detail: Option<&str>, data: Option<&str>, run_id: Option<&str>) -> Event {
    Event {
        event_id: 1,
        session_id: "ses_0123456789abcdef".into(),
        seq: 0,
        event_type: t.into(),
        at_ms: 0,
        actor_type: ActorType::Cli,
        detail: detail.map(str::to_owned),
        data: data.map(|d| serde_json::value::RawValue::from_string(d.to_owned()).unwrap()),
        run_id: run_id.map(str::to_owned),
    }
}

fn sum(t: EventType, detail: Option<&str>, data: Option<&str>) -> String {
    event_summary(&ev(t.as_str(), detail, data, None))
}

const RUN: &str = "run_0123456789abcdef";

fn run_sum(t: EventType, detail: Option<&str>, data: Option<&str>) -> String {
    event_summary(&ev(t.as_str(), detail, data, Some(RUN)))
}

#[test]
fn created() {
    use EventType::Created;
    assert_eq!(
        sum(Created, Some("session created"), None),
        "session created"
    );
    assert_eq!(sum(Created, None, None), "session created");
    assert_eq!(
        sum(Created, Some("session created by fork"), None),
        "session created by fork"
    );
}

#[test]
fn status_changes_show_their_reason_or_result() {
    for t in [
        EventType::Started,
        EventType::Paused,
        EventType::Resumed,
        EventType::Completed,
        EventType::Failed,
        EventType::Cancelled,
    ] {
        assert_eq!(sum(t, Some("because"), None), "because", "{t}");
        assert_eq!(sum(t, None, None), "-", "{t}");
    }
}

#[test]
fn checkpoint() {
    let data = r#"{"step":"compiled","plan_ids":["pln_1","pln_2"],"operation_ids":["op_2"],"deployment_ids":["dep_3"],"snapshot":{"size_bytes":7,"sha256":"ab"}}"#;
    assert_eq!(
        sum(EventType::Checkpoint, Some("all green"), Some(data)),
        "step compiled · plan pln_1 pln_2 · operation op_2 · deployment dep_3 · snapshot 7 bytes · all green"
    );
    assert_eq!(
        sum(EventType::Checkpoint, Some("a note"), Some("{}")),
        "a note"
    );
    assert_eq!(
        sum(EventType::Checkpoint, None, Some(r#"{"step":"s"}"#)),
        "step s"
    );
}

#[test]
fn stages() {
    for t in [
        EventType::StageStarted,
        EventType::StageCompleted,
        EventType::StageFailed,
        EventType::StageRetrying,
    ] {
        assert_eq!(sum(t, None, Some(r#"{"stage":"build"}"#)), "stage build");
        assert_eq!(
            sum(t, Some("flaky"), Some(r#"{"stage":"build","attempt":2}"#)),
            "stage build · attempt 2 · flaky"
        );
    }
}

#[test]
fn gates() {
    let opened = r#"{"gate":"deploy","kind":"user-approval","round":1}"#;
    assert_eq!(
        sum(EventType::GateOpened, None, Some(opened)),
        "gate deploy · user-approval · round 1"
    );
    assert_eq!(
        sum(EventType::GateApproved, Some("ship it"), Some(opened)),
        "gate deploy · user-approval · round 1 · ship it"
    );
    let rejected = r#"{"gate":"release","kind":"step-confirm","round":2,"outcome":"cancelled"}"#;
    assert_eq!(
        sum(EventType::GateRejected, Some("not today"), Some(rejected)),
        "gate release · step-confirm · round 2 · session cancelled · not today"
    );
}

#[test]
fn checkpoint_restored() {
    assert_eq!(
        sum(
            EventType::CheckpointRestored,
            None,
            Some(r#"{"checkpoint_seq":5,"stage":"build","size_bytes":7}"#)
        ),
        "checkpoint seq 5 · stage build · 7 bytes"
    );
    assert_eq!(
        sum(
            EventType::CheckpointRestored,
            None,
            Some(r#"{"checkpoint_seq":5,"stage":null,"size_bytes":7}"#)
        ),
        "checkpoint seq 5 · 7 bytes"
    );
}

#[test]
fn forked() {
    assert_eq!(
        sum(
            EventType::Forked,
            None,
            Some(r#"{"child_session_id":"ses_1111111111111111","checkpoint_seq":5}"#)
        ),
        "child ses_1111111111111111 · checkpoint seq 5"
    );
    assert_eq!(
        sum(
            EventType::Forked,
            None,
            Some(r#"{"parent_session_id":"ses_2222222222222222","checkpoint_seq":3}"#)
        ),
        "parent ses_2222222222222222 · checkpoint seq 3"
    );
}

#[test]
fn leases() {
    let ms = 1_796_158_944_169_i64;
    let t = format_ms(ms);
    let acquired = format!(r#"{{"pid":12,"hostname":"vm","expires_at_ms":{ms}}}"#);
    assert_eq!(
        sum(EventType::LeaseAcquired, None, Some(&acquired)),
        format!("pid 12 on vm · until {t}")
    );
    let renewed = format!(r#"{{"pid":12,"hostname":"vm","expires_at_ms":{ms},"renewed":true}}"#);
    assert_eq!(
        sum(EventType::LeaseAcquired, None, Some(&renewed)),
        format!("pid 12 on vm · until {t} · renewed")
    );
    assert_eq!(
        sum(EventType::LeaseReleased, None, Some(&acquired)),
        "pid 12 on vm"
    );
    let taken = format!(
        r#"{{"pid":12,"hostname":"vm","expires_at_ms":{ms},"previous":{{"pid":9,"hostname":"box","expires_at_ms":1,"reason":"owner_gone"}}}}"#
    );
    assert_eq!(
        sum(EventType::LeaseTakenOver, None, Some(&taken)),
        format!("pid 12 on vm · until {t} · from pid 9 on box (owner_gone)")
    );
}

#[test]
fn runs_name_the_run_and_its_status() {
    for (t, status) in [
        (EventType::RunCreated, "pending"),
        (EventType::RunStarted, "running"),
        (EventType::RunCompleted, "completed"),
        (EventType::RunCancelled, "cancelled"),
        (EventType::RunTimeout, "timeout"),
    ] {
        assert_eq!(run_sum(t, None, None), format!("run {RUN} → {status}"));
    }
    assert_eq!(
        run_sum(
            EventType::RunFailed,
            Some("the provider timed out"),
            Some(r#"{"code":"provider_timeout"}"#)
        ),
        format!("run {RUN} → failed · provider_timeout · the provider timed out")
    );
    assert_eq!(
        run_sum(
            EventType::RunCancelled,
            Some("the session was completed"),
            Some(r#"{"code":"SESSION_ENDED"}"#)
        ),
        format!("run {RUN} → cancelled · SESSION_ENDED · the session was completed")
    );
    assert_eq!(
        run_sum(EventType::RunTurn, None, Some(r#"{"turn_count":3}"#)),
        format!("run {RUN} · turn 3")
    );
    assert_eq!(sum(EventType::RunStarted, None, None), "run → running");
}

#[test]
fn usage_counts_tokens_and_calls() {
    assert_eq!(
        run_sum(
            EventType::RunUsage,
            None,
            Some(r#"{"input_tokens":800,"output_tokens":200,"api_calls":1}"#)
        ),
        format!("run {RUN} · added 800 in / 200 out tokens, 1 call")
    );
    assert_eq!(
        sum(
            EventType::UsageRecorded,
            None,
            Some(r#"{"input_tokens":100,"output_tokens":50,"api_calls":2,"duration_ms":300}"#)
        ),
        "added 100 in / 50 out tokens, 2 calls, 300 ms"
    );
}

#[test]
fn budgets() {
    assert_eq!(
        sum(
            EventType::BudgetSet,
            None,
            Some(
                r#"{"max_tokens":1000,"max_api_calls":null,"max_duration_ms":60000,"on_exceed":"pause"}"#
            )
        ),
        "tokens ≤ 1000, duration_ms ≤ 60000 · on_exceed pause"
    );
    assert_eq!(
        sum(
            EventType::BudgetSet,
            None,
            Some(
                r#"{"max_tokens":null,"max_api_calls":null,"max_duration_ms":null,"on_exceed":"warn"}"#
            )
        ),
        "no limits · on_exceed warn"
    );
    assert_eq!(
        sum(
            EventType::BudgetReset,
            None,
            Some(r#"{"tokens":1150,"api_calls":3,"duration_ms":300}"#)
        ),
        "used until now: tokens 1150, api_calls 3, duration_ms 300"
    );
    let exceeded = r#"{"limits":["tokens","api_calls"],"used":{"tokens":1150,"api_calls":3,"duration_ms":0},"max":{"tokens":1000,"api_calls":2,"duration_ms":null},"on_exceed":"pause","status":"paused"}"#;
    assert_eq!(
        sum(
            EventType::BudgetExceeded,
            Some("budget exceeded: tokens 1150 > 1000, api_calls 3 > 2"),
            Some(exceeded)
        ),
        "tokens 1150 > 1000, api_calls 3 > 2 · on_exceed pause → paused"
    );
    assert_eq!(sum(EventType::BudgetExceeded, Some("over"), None), "over");
}

#[test]
fn custom_and_unknown_types_show_their_detail() {
    assert_eq!(
        event_summary(&ev("x.build", Some("built"), Some(r#"{"k":1}"#), None)),
        "built"
    );
    assert_eq!(event_summary(&ev("x.note", None, Some("{}"), None)), "-");
    assert_eq!(
        event_summary(&ev("stage_paused", Some("imported"), None, None)),
        "imported"
    );
}

/// Every built-in type gets a summary from a detail alone (the data an
/// import may have left out), on one line.
#[test]
fn every_type_is_one_line_and_keeps_multibyte_text_whole() {
    for t in EventType::VARIANTS {
        for data in [
            None,
            Some("{}"),
            Some("[1]"),
            Some(r#"{"stage":7,"pid":"x"}"#),
        ] {
            let s = event_summary(&ev(t.as_str(), Some("a\nb🙏漢\u{1b}[31m"), data, Some(RUN)));
            assert!(!s.contains('\n') && !s.contains('\u{1b}'), "{t}: {s:?}");
            assert!(s.ends_with(r"a\nb🙏漢\u{1b}[31m"), "{t}: {s:?}");
        }
    }
}

#[test]
fn stored_text_in_data_is_escaped() {
    assert_eq!(
        sum(EventType::StageStarted, None, Some(r#"{"stage":"a\nb"}"#)),
        r"stage a\nb"
    );
}
