//! The human timelines and tables, as golden text: one session that writes
//! every built-in event type, then `session events`, `logbook events` (a
//! page and `--follow`) and the other tables, each compared line for line.
//! Ids, times, hashes, the pid and the host name are replaced by fixed
//! stand-ins of the same width (the CLI has no fixed-clock or id hook), so
//! the columns still line up as printed. The JSON timeline is pinned too,
//! byte for byte after the same replacements.

use crate::common::*;
use std::collections::HashMap;

/// Replaces what varies from run to run with stand-ins of the same width:
/// session and run ids (numbered in order of first appearance), RFC 3339
/// times, epoch-ms numbers, SHA-256 hex, this process's pid and the host.
struct Norm {
    ids: HashMap<String, String>,
    pid: String,
    host: String,
}

impl Norm {
    fn new() -> Self {
        Norm {
            ids: HashMap::new(),
            pid: std::process::id().to_string(),
            host: logbook::ledger::hostname(),
        }
    }

    fn apply(&mut self, text: &str) -> String {
        let id_re = regex::Regex::new(r"\b(ses|run)_[0-9a-f]{16}\b").unwrap();
        let mut out = String::new();
        let mut last = 0;
        for m in id_re.find_iter(text) {
            out.push_str(&text[last..m.start()]);
            let n = self.ids.len() + 1;
            let id = self
                .ids
                .entry(m.as_str().to_owned())
                .or_insert_with(|| format!("{}_{n:016}", &m.as_str()[..3]));
            out.push_str(id);
            last = m.end();
        }
        out.push_str(&text[last..]);
        let out = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
            .unwrap()
            .replace_all(&out, "YYYY-MM-DDThh:mm:ss.mmmZ");
        let out = regex::Regex::new(r"\b1\d{12}\b")
            .unwrap()
            .replace_all(&out, "1000000000000");
        let out = regex::Regex::new(r"\b[0-9a-f]{64}\b")
            .unwrap()
            .replace_all(&out, "<sha256>");
        // A server's cursor is `TX.EVENT_ID` (opaque): the event it stands
        // at is what the golden text pins.
        let out = if on_pg() {
            regex::Regex::new(r"next cursor: [1-9][0-9]*\.([0-9]+)")
                .unwrap()
                .replace_all(&out, "next cursor: $1")
        } else {
            out
        };
        out.replace(
            &format!("pid {} on {}", self.pid, self.host),
            "pid PID on HOST",
        )
        .replace(
            &format!("\"pid\":{},\"hostname\":\"{}\"", self.pid, self.host),
            "\"pid\":PID,\"hostname\":\"HOST\"",
        )
    }
}

/// Asserts `actual` equals `expected` line by line (the first differing
/// line is named).
#[track_caller]
fn assert_lines(actual: &str, expected: &str) {
    let (a, e): (Vec<&str>, Vec<&str>) = (actual.lines().collect(), expected.lines().collect());
    for (i, (x, y)) in a.iter().zip(&e).enumerate() {
        assert_eq!(x, y, "line {} differs; the whole output:\n{actual}", i + 1);
    }
    assert_eq!(a.len(), e.len(), "the whole output:\n{actual}");
    assert_eq!(actual, expected, "trailing newline or blanks differ");
}

/// Runs a human command (exit 0) and returns its stdout, normalised.
#[track_caller]
fn human(env: &TestEnv, norm: &mut Norm, args: &[&str]) -> String {
    let r = env.run(args);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}");
    norm.apply(&r.stdout)
}

/// `.data.<key>` of a JSON command.
#[track_caller]
fn field(env: &TestEnv, args: &[&str], key: &str) -> String {
    env.json(args).data()[key].as_str().unwrap().to_owned()
}

/// Writes S (every built-in type), its fork child C, P (pending → started →
/// completed) and F (failed), in that order; returns (S, C).
fn every_event_type(env: &TestEnv) -> (String, String) {
    let me = std::process::id().to_string();
    let ok = |args: &[&str]| {
        let r = env.json(args);
        assert_eq!(r.code, 0, "{args:?}: {}", r.stdout);
    };
    let s = field(
        env,
        &["session", "create", "--title", "main", "--app", "demo"],
        "session_id",
    );
    ok(&["session", "stage", &s, "start", "build"]);
    ok(&[
        "session",
        "stage",
        &s,
        "fail",
        "build",
        "--attempt",
        "1",
        "--reason",
        "tests failed",
    ]);
    ok(&["session", "stage", &s, "retry", "build", "--attempt", "2"]);
    ok(&[
        "session",
        "stage",
        &s,
        "complete",
        "build",
        "--attempt",
        "2",
    ]);
    ok(&[
        "session",
        "checkpoint",
        &s,
        "--step",
        "compiled",
        "--note",
        "all green\nand fast",
        "--plan",
        "pln_1",
        "--operation",
        "op_2",
        "--deployment",
        "dep_3",
        "--state",
        r#"{"a":1}"#,
    ]);
    ok(&["session", "checkpoint", &s, "--note", "just a note"]);
    ok(&["session", "restore", &s, "--checkpoint", "5"]);
    let c = field(
        env,
        &["session", "fork", &s, "--title", "child"],
        "session_id",
    );
    ok(&["gate", "open", &s, "--gate", "lint", "--kind", "auto"]);
    ok(&[
        "gate",
        "open",
        &s,
        "--gate",
        "deploy",
        "--kind",
        "user-approval",
    ]);
    ok(&[
        "gate", "approve", &s, "--gate", "deploy", "--note", "ship it",
    ]);
    ok(&[
        "session",
        "usage",
        &s,
        "--input-tokens",
        "100",
        "--output-tokens",
        "50",
        "--api-calls",
        "2",
        "--duration-ms",
        "300",
    ]);
    ok(&[
        "session",
        "budget",
        &s,
        "--max-tokens",
        "1000",
        "--on-exceed",
        "pause",
    ]);
    let r1 = field(
        env,
        &["run", "create", &s, "--input", r#"{"q":1}"#],
        "run_id",
    );
    ok(&["run", "start", &r1]);
    // Takes usage to 1150 tokens: budget_exceeded, and the session pauses.
    ok(&[
        "run",
        "usage",
        &r1,
        "--input-tokens",
        "800",
        "--output-tokens",
        "200",
        "--api-calls",
        "1",
    ]);
    ok(&["session", "resume", &s, "--reason", "budget raised"]);
    ok(&["session", "budget", &s, "--reset"]);
    ok(&["run", "turn", &r1]);
    ok(&["run", "complete", &r1, "--output", r#"{"a":2}"#]);
    let r2 = field(env, &["run", "create", &s], "run_id");
    ok(&[
        "run",
        "fail",
        &r2,
        "--code",
        "provider_timeout",
        "--message",
        "the provider timed out",
    ]);
    let r3 = field(env, &["run", "create", &s], "run_id");
    ok(&["run", "start", &r3]);
    ok(&["run", "timeout", &r3]);
    let r4 = field(env, &["run", "create", &s], "run_id");
    ok(&["run", "cancel", &r4]);
    // A 1 ms lease has expired by the next command: it is taken over.
    ok(&["session", "lock", &s, "--ttl-ms", "1", "--owner-pid", &me]);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let token = field(env, &["session", "lock", &s, "--owner-pid", &me], "token");
    ok(&["session", "lock", &s, "--owner-pid", &me, "--lease", &token]);
    ok(&["session", "unlock", &s, "--token", &token]);
    ok(&[
        "session",
        "event",
        &s,
        "--type",
        "x.build",
        "--detail",
        "built in 3s",
    ]);
    ok(&[
        "session",
        "event",
        &s,
        "--type",
        "x.note",
        "--data",
        r#"{"k":1}"#,
    ]);
    ok(&["session", "pause", &s]);
    ok(&["session", "resume", &s]);
    // Left pending: cancelled when the rejection below ends the session.
    field(env, &["run", "create", &s], "run_id");
    ok(&[
        "gate",
        "open",
        &s,
        "--gate",
        "release",
        "--kind",
        "step-confirm",
    ]);
    ok(&[
        "gate",
        "reject",
        &s,
        "--gate",
        "release",
        "--reason",
        "not today",
    ]);
    ok(&["session", "cancel", &c, "--reason", "not needed"]);
    let p = field(
        env,
        &["session", "create", "--title", "later", "--pending"],
        "session_id",
    );
    ok(&["session", "start", &p]);
    ok(&["session", "complete", &p, "--result", "done"]);
    let f = field(
        env,
        &["session", "create", "--title", "doomed"],
        "session_id",
    );
    ok(&["session", "fail", &f, "--reason", "disk full"]);
    (s, c)
}

const S_EVENTS: &str = "\
SEQ  AT                        TYPE                 ACTOR  SUMMARY
  0  YYYY-MM-DDThh:mm:ss.mmmZ  created              cli    session created
  1  YYYY-MM-DDThh:mm:ss.mmmZ  stage_started        cli    stage build
  2  YYYY-MM-DDThh:mm:ss.mmmZ  stage_failed         cli    stage build · attempt 1 · tests failed
  3  YYYY-MM-DDThh:mm:ss.mmmZ  stage_retrying       cli    stage build · attempt 2
  4  YYYY-MM-DDThh:mm:ss.mmmZ  stage_completed      cli    stage build · attempt 2
  5  YYYY-MM-DDThh:mm:ss.mmmZ  checkpoint           cli    step compiled · plan pln_1 · operation op_2 · deployment dep_3 · snapshot 7 bytes · all green\\nand …
  6  YYYY-MM-DDThh:mm:ss.mmmZ  checkpoint           cli    just a note
  7  YYYY-MM-DDThh:mm:ss.mmmZ  checkpoint_restored  cli    checkpoint seq 5 · stage build · 7 bytes
  8  YYYY-MM-DDThh:mm:ss.mmmZ  forked               cli    child ses_0000000000000002 · checkpoint seq 5
  9  YYYY-MM-DDThh:mm:ss.mmmZ  gate_approved        cli    gate lint · auto · round 1
 10  YYYY-MM-DDThh:mm:ss.mmmZ  gate_opened          cli    gate deploy · user-approval · round 1
 11  YYYY-MM-DDThh:mm:ss.mmmZ  paused               cli    -
 12  YYYY-MM-DDThh:mm:ss.mmmZ  gate_approved        cli    gate deploy · user-approval · round 1 · ship it
 13  YYYY-MM-DDThh:mm:ss.mmmZ  resumed              cli    -
 14  YYYY-MM-DDThh:mm:ss.mmmZ  usage_recorded       cli    added 100 in / 50 out tokens, 2 calls, 300 ms
 15  YYYY-MM-DDThh:mm:ss.mmmZ  budget_set           cli    tokens ≤ 1000 · on_exceed pause
 16  YYYY-MM-DDThh:mm:ss.mmmZ  run_created          cli    run run_0000000000000003 → pending
 17  YYYY-MM-DDThh:mm:ss.mmmZ  run_started          cli    run run_0000000000000003 → running
 18  YYYY-MM-DDThh:mm:ss.mmmZ  run_usage            cli    run run_0000000000000003 · added 800 in / 200 out tokens, 1 call
 19  YYYY-MM-DDThh:mm:ss.mmmZ  budget_exceeded      cli    tokens 1150 > 1000 · on_exceed pause → paused
 20  YYYY-MM-DDThh:mm:ss.mmmZ  paused               cli    budget exceeded: tokens 1150 > 1000
 21  YYYY-MM-DDThh:mm:ss.mmmZ  resumed              cli    budget raised
 22  YYYY-MM-DDThh:mm:ss.mmmZ  budget_reset         cli    used until now: tokens 1150, api_calls 3, duration_ms 300
 23  YYYY-MM-DDThh:mm:ss.mmmZ  run_turn             cli    run run_0000000000000003 · turn 1
 24  YYYY-MM-DDThh:mm:ss.mmmZ  run_completed        cli    run run_0000000000000003 → completed
 25  YYYY-MM-DDThh:mm:ss.mmmZ  run_created          cli    run run_0000000000000004 → pending
 26  YYYY-MM-DDThh:mm:ss.mmmZ  run_failed           cli    run run_0000000000000004 → failed · provider_timeout · the provider timed out
 27  YYYY-MM-DDThh:mm:ss.mmmZ  run_created          cli    run run_0000000000000005 → pending
 28  YYYY-MM-DDThh:mm:ss.mmmZ  run_started          cli    run run_0000000000000005 → running
 29  YYYY-MM-DDThh:mm:ss.mmmZ  run_timeout          cli    run run_0000000000000005 → timeout
 30  YYYY-MM-DDThh:mm:ss.mmmZ  run_created          cli    run run_0000000000000006 → pending
 31  YYYY-MM-DDThh:mm:ss.mmmZ  run_cancelled        cli    run run_0000000000000006 → cancelled
 32  YYYY-MM-DDThh:mm:ss.mmmZ  lease_acquired       cli    pid PID on HOST · until YYYY-MM-DDThh:mm:ss.mmmZ
 33  YYYY-MM-DDThh:mm:ss.mmmZ  lease_taken_over     cli    pid PID on HOST · until YYYY-MM-DDThh:mm:ss.mmmZ · from pid PID on HOST (expired)
 34  YYYY-MM-DDThh:mm:ss.mmmZ  lease_acquired       cli    pid PID on HOST · until YYYY-MM-DDThh:mm:ss.mmmZ · renewed
 35  YYYY-MM-DDThh:mm:ss.mmmZ  lease_released       cli    pid PID on HOST
 36  YYYY-MM-DDThh:mm:ss.mmmZ  x.build              cli    built in 3s
 37  YYYY-MM-DDThh:mm:ss.mmmZ  x.note               cli    -
 38  YYYY-MM-DDThh:mm:ss.mmmZ  paused               cli    -
 39  YYYY-MM-DDThh:mm:ss.mmmZ  resumed              cli    -
 40  YYYY-MM-DDThh:mm:ss.mmmZ  run_created          cli    run run_0000000000000007 → pending
 41  YYYY-MM-DDThh:mm:ss.mmmZ  gate_opened          cli    gate release · step-confirm · round 1
 42  YYYY-MM-DDThh:mm:ss.mmmZ  paused               cli    -
 43  YYYY-MM-DDThh:mm:ss.mmmZ  run_cancelled        cli    run run_0000000000000007 → cancelled · SESSION_ENDED · the session was failed
 44  YYYY-MM-DDThh:mm:ss.mmmZ  gate_rejected        cli    gate release · step-confirm · round 1 · session failed · not today
 45  YYYY-MM-DDThh:mm:ss.mmmZ  failed               cli    not today
";

/// Every built-in event type shows a summary from its data; the timeline
/// of one session and the global feed share one layout (the feed adds
/// EVENT_ID and SESSION), `--follow` prints the header once and then the
/// rows, and every other table has the same UPPERCASE header style.
#[test]
fn timelines_and_tables_print_golden_text_for_every_event_type() {
    let env = TestEnv::new();
    let (s, c) = every_event_type(&env);
    let mut norm = Norm::new();
    // S is ses_…1 and C ses_…2; runs and the other sessions follow in order
    // of appearance.
    norm.apply(&s);
    norm.apply(&c);
    assert_lines(
        &human(
            &env,
            &mut norm,
            &["session", "events", &s, "--limit", "1000"],
        ),
        S_EVENTS,
    );
    // Every built-in type appears (and so gets its summary checked above).
    let mut types: Vec<String> = event_types(&env, &s);
    types.extend(event_types(&env, &c));
    types.extend(["started".into(), "completed".into(), "failed".into()]);
    for t in logbook::model::EventType::VARIANTS {
        assert!(
            types.iter().any(|x| x == t.as_str()),
            "the scenario lacks {t}"
        );
    }
    assert_lines(
        &human(&env, &mut norm, &["session", "events", &c]),
        "\
SEQ  AT                        TYPE       ACTOR  SUMMARY
  0  YYYY-MM-DDThh:mm:ss.mmmZ  created    cli    session created by fork
  1  YYYY-MM-DDThh:mm:ss.mmmZ  forked     cli    parent ses_0000000000000001 · checkpoint seq 5
  2  YYYY-MM-DDThh:mm:ss.mmmZ  cancelled  cli    not needed
",
    );
    // `session show` ends with the same table.
    let show = human(&env, &mut norm, &["session", "show", &c]);
    assert!(
        show.contains(&format!(
            "\n\n{}",
            &human(&env, &mut norm, &["session", "events", &c])
        )),
        "{show}"
    );
    // The feed: the same rows with the event's cursor and session in front.
    let feed = human(&env, &mut norm, &["events", "--after", "43"]);
    assert_lines(
        &feed,
        "\
EVENT_ID  SESSION               SEQ  AT                        TYPE           ACTOR  SUMMARY
      44  ses_0000000000000001   41  YYYY-MM-DDThh:mm:ss.mmmZ  gate_opened    cli    gate release · step-confirm · round 1
      45  ses_0000000000000001   42  YYYY-MM-DDThh:mm:ss.mmmZ  paused         cli    -
      46  ses_0000000000000001   43  YYYY-MM-DDThh:mm:ss.mmmZ  run_cancelled  cli    run run_0000000000000007 → cancelled · SESSION_ENDED · the session was failed
      47  ses_0000000000000001   44  YYYY-MM-DDThh:mm:ss.mmmZ  gate_rejected  cli    gate release · step-confirm · round 1 · session failed · not today
      48  ses_0000000000000001   45  YYYY-MM-DDThh:mm:ss.mmmZ  failed         cli    not today
      49  ses_0000000000000002    2  YYYY-MM-DDThh:mm:ss.mmmZ  cancelled      cli    not needed
      50  ses_0000000000000008    0  YYYY-MM-DDThh:mm:ss.mmmZ  created        cli    session created
      51  ses_0000000000000008    1  YYYY-MM-DDThh:mm:ss.mmmZ  started        cli    -
      52  ses_0000000000000008    2  YYYY-MM-DDThh:mm:ss.mmmZ  completed      cli    done
      53  ses_0000000000000009    0  YYYY-MM-DDThh:mm:ss.mmmZ  created        cli    session created
      54  ses_0000000000000009    1  YYYY-MM-DDThh:mm:ss.mmmZ  failed         cli    disk full
next cursor: 54
",
    );
    // Its first rows are S's first rows, the same summaries.
    let page = human(&env, &mut norm, &["events", "--limit", "3"]);
    assert_lines(
        &page,
        "\
EVENT_ID  SESSION               SEQ  AT                        TYPE           ACTOR  SUMMARY
       1  ses_0000000000000001    0  YYYY-MM-DDThh:mm:ss.mmmZ  created        cli    session created
       2  ses_0000000000000001    1  YYYY-MM-DDThh:mm:ss.mmmZ  stage_started  cli    stage build
       3  ses_0000000000000001    2  YYYY-MM-DDThh:mm:ss.mmmZ  stage_failed   cli    stage build · attempt 1 · tests failed
next cursor: 3
",
    );
    // Followed, the header comes once, before the rows, at fixed widths.
    assert_lines(
        &human(&env, &mut norm, &["events", "--follow", "--after", "48", "--limit", "3"]),
        "\
EVENT_ID  SESSION                 SEQ  AT                        TYPE                 ACTOR  SUMMARY
      49  ses_0000000000000002      2  YYYY-MM-DDThh:mm:ss.mmmZ  cancelled            cli    not needed
      50  ses_0000000000000008      0  YYYY-MM-DDThh:mm:ss.mmmZ  created              cli    session created
      51  ses_0000000000000008      1  YYYY-MM-DDThh:mm:ss.mmmZ  started              cli    -
",
    );
    assert_eq!(
        human(&env, &mut norm, &["events", "--after", "54"]),
        "no events\nnext cursor: 54\n"
    );
    // A follow refused at its first read prints no header, only the error.
    for (args, code) in [
        (vec!["events", "--follow", "--after", "999"], 2),
        (
            vec!["events", "--follow", "--session", "ses_00000000000000aa"],
            3,
        ),
    ] {
        let r = env.run(&args);
        assert_eq!((r.code, r.stdout.as_str()), (code, ""), "{args:?}");
        assert!(r.stderr.starts_with("error["), "{}", r.stderr);
    }
    assert_eq!(
        human(
            &env,
            &mut norm,
            &["session", "events", &s, "--after-seq", "45"]
        ),
        "no events\n"
    );

    // The other tables: one layout, UPPERCASE headers.
    assert_lines(
        &human(&env, &mut norm, &["run", "list", &s]),
        "\
RUN                   STATUS     TOKENS  TURNS  CREATED
run_0000000000000003  completed    1000      1  YYYY-MM-DDThh:mm:ss.mmmZ
run_0000000000000004  failed          0      0  YYYY-MM-DDThh:mm:ss.mmmZ
run_0000000000000005  timeout         0      0  YYYY-MM-DDThh:mm:ss.mmmZ
run_0000000000000006  cancelled       0      0  YYYY-MM-DDThh:mm:ss.mmmZ
run_0000000000000007  cancelled       0      0  YYYY-MM-DDThh:mm:ss.mmmZ
",
    );
    assert_lines(
        &human(&env, &mut norm, &["session", "tree", &s]),
        "\
SESSION                 STATUS     TITLE
ses_0000000000000001    failed     main
  ses_0000000000000002  cancelled  child
",
    );
    assert_lines(
        &human(&env, &mut norm, &["session", "budget", &s, "--check"]),
        "\
session    ses_0000000000000001
status     failed
rev        39
on_exceed  pause
exceeded   no

LIMIT        USED   MAX  REMAINING
tokens          0  1000       1000
api_calls       0     -          -
duration_ms     0     -          -
",
    );
    assert_lines(
        &human(&env, &mut norm, &["gate", "list", &s]),
        "\
GATE     ROUND  KIND           STATUS    OPENED                    DECIDED                   REASON
lint         1  auto           approved  YYYY-MM-DDThh:mm:ss.mmmZ  YYYY-MM-DDThh:mm:ss.mmmZ  -
deploy       1  user-approval  approved  YYYY-MM-DDThh:mm:ss.mmmZ  YYYY-MM-DDThh:mm:ss.mmmZ  ship it
release      1  step-confirm   rejected  YYYY-MM-DDThh:mm:ss.mmmZ  YYYY-MM-DDThh:mm:ss.mmmZ  not today
",
    );
    assert_lines(
        &human(&env, &mut norm, &["session", "checkpoints", &s]),
        "\
SEQ  AT                        BYTES  STAGE  STEP
  5  YYYY-MM-DDThh:mm:ss.mmmZ      7  build  compiled
",
    );
    assert_lines(
        &human(&env, &mut norm, &["verify", &s]),
        "\
ok: 1 session(s), 46 event(s); every hash chain holds
SESSION               EVENTS  HEAD
ses_0000000000000001      46  <sha256>
",
    );
    let list = human(&env, &mut norm, &["session", "list"]);
    assert!(
        list.starts_with(
            "SESSION               STATUS     REV  CREATED                   APP   TITLE\n"
        ),
        "{list}"
    );
}

/// C's timeline in JSON, after the same replacements, one event a line:
/// the summaries changed the human form only.
const C_EVENTS_JSON: &str = r#"{"ok":true,"data":{"events":[
{"event_id":9,"session_id":"ses_0000000000000002","seq":0,"type":"created","at_ms":1000000000000,"actor_type":"cli","detail":"session created by fork","data":null,"run_id":null},
{"event_id":10,"session_id":"ses_0000000000000002","seq":1,"type":"forked","at_ms":1000000000000,"actor_type":"cli","detail":null,"data":{"parent_session_id":"ses_0000000000000001","checkpoint_seq":5},"run_id":null},
{"event_id":49,"session_id":"ses_0000000000000002","seq":2,"type":"cancelled","at_ms":1000000000000,"actor_type":"cli","detail":"not needed","data":null,"run_id":null}],"next_after_seq":null}}
"#;

/// `--json` timelines are exactly what they were before the summaries:
/// every event's type, detail, data and run_id, in the fixed key order.
#[test]
fn json_timelines_are_unchanged_by_the_human_summaries() {
    let env = TestEnv::new();
    let (s, c) = every_event_type(&env);
    let mut norm = Norm::new();
    // Numbered as the human test does.
    norm.apply(&s);
    norm.apply(&c);
    let r = env.json(&["session", "events", &c]);
    assert_eq!(r.code, 0);
    let got = norm
        .apply(&r.stdout)
        .replace(r#"},{"event_id""#, "},\n{\"event_id\"");
    let got = got.replacen(r#""events":[{"#, "\"events\":[\n{", 1);
    assert_lines(&got, C_EVENTS_JSON);
    // S's lease events carry the owner, and runs their run_id, as stored.
    let r = env.json(&["session", "events", &s, "--limit", "1000"]);
    let got = norm.apply(&r.stdout);
    for piece in [
        r#""type":"lease_taken_over","at_ms":1000000000000,"actor_type":"cli","detail":null,"data":{"pid":PID,"hostname":"HOST","expires_at_ms":1000000000000,"previous":{"pid":PID,"hostname":"HOST","expires_at_ms":1000000000000,"reason":"expired"}},"run_id":null}"#,
        r#""type":"run_usage","at_ms":1000000000000,"actor_type":"cli","detail":null,"data":{"input_tokens":800,"output_tokens":200,"api_calls":1},"run_id":"run_0000000000000003"}"#,
        r#""type":"checkpoint","at_ms":1000000000000,"actor_type":"cli","detail":"all green\nand fast","data":{"step":"compiled","plan_ids":["pln_1"],"operation_ids":["op_2"],"deployment_ids":["dep_3"],"snapshot":{"size_bytes":7,"sha256":"<sha256>"}},"run_id":null}"#,
    ] {
        assert!(got.contains(piece), "{piece}\nnot in\n{got}");
    }
}
