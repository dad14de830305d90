//! The minimal one-transaction binary: the baseline a whole `logbook session
//! checkpoint` process is measured against (BENCHMARKS.md, "Whole-process
//! CLI").
//!
//! `checkpoint_once DB SESSION_ID [full|normal]`
//!
//! It opens DB with rusqlite's defaults, sets `synchronous`, and runs the
//! library's checkpoint transaction statement for statement (its own SQL:
//! the guarded `UPDATE` and the chained event `INSERT`, as the `chain`
//! section of `benches/report.rs` does) in one `BEGIN IMMEDIATE`, then
//! exits. No option parsing, no probes, no writer lock, no output: what any
//! program must do to append one checkpoint to the file.
use logbook::store::sqlite::sql::events::{insert_event, NewEvent};
use logbook::store::{SessionChange, SessionGuard};
use rusqlite::Connection;

fn main() {
    let mut args = std::env::args().skip(1);
    let usage = "usage: checkpoint_once DB SESSION_ID [full|normal]";
    let db = args.next().expect(usage);
    let id = args.next().expect(usage);
    let sync = args.next().unwrap_or_else(|| "full".into());
    let c = open(&db, &sync);
    transaction(&c, &id);
    close(c);
}

/// Opens the file and sets `synchronous` (SQLite reads the schema here).
#[inline(never)]
fn open(db: &str, sync: &str) -> Connection {
    let c = Connection::open(db).expect("open");
    c.pragma_update(None, "synchronous", sync)
        .expect("synchronous");
    c
}

/// The checkpoint: one `BEGIN IMMEDIATE` … `COMMIT`.
#[inline(never)]
fn transaction(c: &Connection, id: &str) {
    c.execute_batch("BEGIN IMMEDIATE").expect("begin");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let guard = SessionGuard {
        from: logbook::model::Verb::Checkpoint.allowed_from(),
        rev: None,
    };
    let change = SessionChange {
        now_ms,
        checkpoint_at_next_seq: true,
        ..Default::default()
    };
    let (sql, p) = logbook::store::sqlite::tx::session_update(id, guard, &change);
    let changed = c
        .prepare(&sql)
        .and_then(|mut s| s.execute(rusqlite::params_from_iter(p.iter())))
        .expect("update");
    assert_eq!(changed, 1, "{id} is not an active session");
    let event = NewEvent {
        session_id: id,
        event_type: "checkpoint",
        actor_type: logbook::ActorType::Cli,
        detail: Some("n"),
        data: Some(r#"{"step":"s"}"#),
        idempotency: None,
        run_id: None,
    };
    insert_event(c, &event).expect("insert");
    c.execute_batch("COMMIT").expect("commit");
}

/// Closes the connection: the last one checkpoints the WAL into the file.
#[inline(never)]
fn close(c: Connection) {
    drop(c);
}
