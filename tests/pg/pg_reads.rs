//! Reads on a server (docs/postgres.md, "Reads"): a listing's statement is
//! planned once per connection, and a listing filtered by tag walks an
//! index in order whatever the tag.

use crate::common::*;
use logbook::ledger::{CreateSession, ListSessions};
use logbook::Ledger;
use serde_json::Value;

/// The plans PostgreSQL has made of this connection's listing statements
/// (those whose text ends with the page's LIMIT): `(text, generic, custom)`.
fn listing_plans(lg: &Ledger, limit: i64) -> Vec<(String, i64, i64)> {
    let r = lg
        .query(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements \
             ORDER BY statement",
            None,
        )
        .unwrap();
    r.rows
        .iter()
        .filter_map(|row| {
            let text = row[0].as_str()?.to_owned();
            let n = |v: &Value| v.as_i64().or_else(|| v.as_str()?.parse().ok()).unwrap();
            text.ends_with(&format!("LIMIT {}", limit + 1))
                .then(|| (text, n(&row[1]), n(&row[2])))
        })
        .collect()
}

/// With its page size in the text, a listing's prepared statement gets a
/// generic plan: after PostgreSQL's five custom plans it is not planned
/// again (each listing of 1,000,000 sessions paid ≈ 0.7 ms of planning
/// with `LIMIT $n`, whose generic plan PostgreSQL never chose).
#[test]
fn pg_a_listing_is_planned_once_per_connection() {
    let env = TestEnv::new();
    env.create("migrated");
    let lg = open_ledger(&env.db);
    for i in 0..4 {
        lg.create_session(CreateSession {
            app: Some("planner".into()),
            tags: vec!["t".into()],
            ..CreateSession::titled(format!("s{i}"))
        })
        .unwrap();
    }
    let shapes = [
        ListSessions {
            limit: Some(3),
            ..Default::default()
        },
        ListSessions {
            app: Some("planner".into()),
            limit: Some(3),
            ..Default::default()
        },
        ListSessions {
            tag: Some("t".into()),
            limit: Some(3),
            ..Default::default()
        },
    ];
    for q in &shapes {
        let mut ids = Vec::new();
        for _ in 0..10 {
            let page = lg.list_sessions(q).unwrap();
            assert_eq!(page.sessions.len(), 3);
            ids.push(page.sessions[0].session_id.to_string());
        }
        ids.dedup();
        assert_eq!(ids.len(), 1, "the same first page every time");
    }
    let plans = listing_plans(&lg, 3);
    assert_eq!(plans.len(), 3, "one statement per shape: {plans:?}");
    for (text, generic, custom) in &plans {
        assert_eq!(generic + custom, 10, "{text}");
        assert!(
            *custom <= 5 && *generic >= 5,
            "{generic} generic, {custom} custom plans: {text}"
        );
    }
    // Another page size is another statement, planned on its own.
    lg.list_sessions(&ListSessions {
        limit: Some(2),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(listing_plans(&lg, 2).len(), 1);
}

/// The statement cache keeps the statements used most recently: a client
/// that has sent more shapes than `statement_cache_size` still has its
/// hot statements prepared (each shape beyond replaces the one used least
/// recently, closed on the server), never none.
#[test]
fn pg_the_statement_cache_keeps_the_most_recently_used() {
    let env = TestEnv::new();
    env.create("migrated");
    let url = format!("{}?statement_cache_size=4", env.db.to_str().unwrap());
    let lg = open_ledger(std::path::Path::new(&url));
    let id = lg
        .create_session(CreateSession::titled("hot"))
        .unwrap()
        .session_id
        .to_string();
    for limit in 1..=10 {
        lg.list_sessions(&ListSessions {
            limit: Some(limit),
            ..Default::default()
        })
        .unwrap();
        // The hot read between listings stays prepared.
        lg.get_session(&id).unwrap();
    }
    let r = lg
        .query("SELECT statement FROM pg_prepared_statements", None)
        .unwrap();
    // The cache's statements (this query is prepared apart from it).
    let texts: Vec<&str> = r
        .rows
        .iter()
        .filter_map(|row| row[0].as_str())
        .filter(|t| !t.contains("pg_prepared_statements"))
        .collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    let listings: Vec<&&str> = texts.iter().filter(|t| t.contains(" LIMIT ")).collect();
    assert!(
        listings.iter().any(|t| t.ends_with("LIMIT 11")),
        "the newest listing is prepared: {texts:?}"
    );
    assert!(
        !listings.iter().any(|t| t.ends_with("LIMIT 2")),
        "the oldest was replaced: {texts:?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("WHERE s.session_id = $1")),
        "the session read is still prepared: {texts:?}"
    );
}

/// A page of the feed of every session is one round trip: the horizon and
/// the events below it in one statement, without BEGIN and COMMIT; an
/// empty page past the newest event needs no second statement for the
/// horizon its cursor is checked against. A page filtered by type reads on
/// in further statements and is still exact: every event of the type,
/// in feed order, each once, across pages.
#[test]
fn pg_a_feed_page_is_one_round_trip_and_exact_across_statements() {
    use crate::pg_one_statement::via;
    use crate::proxy::Proxy;
    use logbook::FeedQuery;
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(crate::pg_one_statement::server_port());
    let lg = open_ledger(std::path::Path::new(&via(&env, &proxy, "")));
    let id = lib_create(&lg, "feed", "reader");
    for i in 0..40 {
        lg.checkpoint(&id, cp(&format!("s{i}"), None), &Default::default())
            .unwrap();
    }
    let all = FeedQuery {
        limit: Some(100),
        ..Default::default()
    };
    // The server's other transactions (other tests' databases) can hold
    // the horizon back for a while: wait until the page holds every event.
    let t = std::time::Instant::now();
    while lg.feed(&all).unwrap().events.len() < 42 {
        assert!(
            t.elapsed().as_secs() < 30,
            "the feed never reached the events"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let before = proxy.bursts();
    let page = lg.feed(&all).unwrap();
    assert_eq!(proxy.bursts() - before, 1, "a page");
    let types: Vec<&str> = page.events.iter().map(|e| e.event_type.as_str()).collect();
    // The env's session and this one: two `created`, then 40 checkpoints.
    assert_eq!(types.len(), 42, "{types:?}");
    assert_eq!(types[..2], ["created", "created"]);
    assert!(types[2..].iter().all(|t| *t == "checkpoint"));
    let past = FeedQuery {
        after: Some(page.next_cursor.clone()),
        ..all.clone()
    };
    lg.feed(&past).unwrap();
    let before = proxy.bursts();
    let empty = lg.feed(&past).unwrap();
    assert_eq!(proxy.bursts() - before, 1, "an empty page");
    assert!(empty.events.is_empty());
    // A cursor past the horizon is still refused.
    let far = FeedQuery {
        after: Some("999999999.1".into()),
        ..all.clone()
    };
    assert_eq!(
        lg.feed(&far).unwrap_err().code().as_str(),
        "INVALID_ARGUMENT"
    );
    // By type, two checkpoints a page: every one, in order, once.
    let mut cursor = None;
    let mut steps = Vec::new();
    loop {
        let page = lg
            .feed(&FeedQuery {
                after: cursor.clone(),
                types: vec!["checkpoint".into()],
                limit: Some(2),
                ..Default::default()
            })
            .unwrap();
        if page.events.is_empty() {
            break;
        }
        steps.extend(page.events.iter().map(|e| e.seq));
        cursor = Some(page.next_cursor);
    }
    assert_eq!(steps, (1..=40).collect::<Vec<i64>>());
}

/// Opening a ledger that is there (every CLI process's open but the
/// first) checks its schema in one statement after connecting: one round
/// trip more than a bare connection, where the check was a read-only
/// transaction of four.
#[test]
fn pg_opening_an_existing_ledger_checks_its_schema_in_one_round_trip() {
    use crate::pg_one_statement::{server_port, via};
    use crate::proxy::Proxy;
    let env = TestEnv::new();
    env.create("migrated");
    let proxy = Proxy::start(server_port());
    let url = via(&env, &proxy, "");
    let before = proxy.bursts();
    let bare = crate::pg::connect(&url);
    let connect = proxy.bursts() - before;
    let before = proxy.bursts();
    let lg = open_ledger(std::path::Path::new(&url));
    let open = proxy.bursts() - before;
    // Closed only now: its Terminate message is a burst of its own, which
    // would otherwise land in the open's count.
    drop(bare);
    assert_eq!(open, connect + 1, "connect {connect}, open {open}");
    assert_eq!(
        lg.get_session(&lib_create(&lg, "after", "a")).unwrap().rev,
        1
    );
}
