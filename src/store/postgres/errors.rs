//! Server errors classified (docs/design.md, "Backends"): by SQLSTATE where the server sent
//! one, else by the driver's kind of failure; never a password in a
//! message (the driver's messages hold none, and the location shown is the
//! display form).

use crate::error::Error;
use postgres::error::SqlState;

/// What a failed statement means for the transaction it ran in.
#[derive(Debug)]
pub enum Class {
    /// A serialization failure or a deadlock: the transaction was rolled
    /// back by the server and may succeed if run again.
    Transient,
    /// The connection is gone (lost, or the server is shutting down): open
    /// a new one, then run again — unless COMMIT was already sent.
    Lost(String),
    /// Anything else: the call fails with this error.
    Final(Error),
}

/// The SQLSTATE class of logbook's own trigger errors
/// (`migrations/postgres/`): the message is the same text SQLite's
/// triggers raise.
const TRIGGER_CLASS: &str = "LB";

/// Classifies a driver error; `location` is the display form
/// ([`super::location::PgLocation::display`]).
pub fn classify(e: &postgres::Error, location: &str) -> Class {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        let state = code.code();
        let io = |what: &str| {
            Class::Final(Error::StoreIo {
                context: format!("{what} ({location}): {}", db.message()),
            })
        };
        return match state {
            "40001" | "40P01" | "55P03" => Class::Transient,
            // admin_shutdown, crash_shutdown, cannot_connect_now,
            // too_many_connections: the server is going or not ready.
            "57P01" | "57P02" | "57P03" | "53300" => Class::Lost(db.message().to_string()),
            _ if state.starts_with("08") => Class::Lost(db.message().to_string()),
            "28000" | "28P01" => io("the server refused the login"),
            "42501" => io("the role lacks a privilege logbook needs"),
            "3D000" => io("the database does not exist"),
            "53100" => io("the server's disk is full"),
            "25006" => Class::Final(Error::StoreIo {
                context: "the database is read-only".into(),
            }),
            "XX001" | "XX002" => Class::Final(Error::Corrupt {
                path: location.to_string(),
                reason: db.message().to_string(),
            }),
            _ if state.starts_with(TRIGGER_CLASS) || code == &SqlState::RAISE_EXCEPTION => {
                Class::Final(Error::internal(format!("database error: {}", db.message())))
            }
            _ => Class::Final(Error::internal(format!(
                "database error ({state}): {}",
                db.message()
            ))),
        };
    }
    if e.is_closed() {
        return Class::Lost("the connection was closed".into());
    }
    // The driver's own kinds, by the fixed text of its `Display` (its kind
    // enum is private): `error connecting to server`, `timeout waiting for
    // server`, `error communicating with the server`, `connection closed`
    // mean the server is unreachable; TLS and authentication failures are a
    // refused connection, as a permission error is on a file.
    let text = e.to_string();
    let reason = match std::error::Error::source(e) {
        Some(why) => format!("{text}: {why}"),
        None => text.clone(),
    };
    if text.starts_with("error performing TLS handshake") && handshake_cut(e) {
        // The connection ended during the handshake (a server shutting
        // down or starting, a proxy): nothing is wrong with TLS itself.
        Class::Lost(reason)
    } else if text.starts_with("error performing TLS handshake")
        || text.contains("does not support TLS")
    {
        Class::Final(Error::StoreIo {
            context: format!("TLS with the PostgreSQL server {location} failed: {reason}"),
        })
    } else if text.starts_with("error performing authentication")
        || text.starts_with("invalid configuration")
        || text.starts_with("password missing")
    {
        Class::Final(Error::StoreIo {
            context: format!("the PostgreSQL server {location} refused the login: {reason}"),
        })
    } else {
        Class::Lost(reason)
    }
}

/// Whether a TLS handshake failed because the connection ended (an I/O
/// error that is not the TLS library's verdict on the peer, which arrives
/// as `InvalidData`).
fn handshake_cut(e: &postgres::Error) -> bool {
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            );
        }
        cause = c.source();
    }
    false
}

/// The final error of a failed call: a transient failure that outlasted the
/// busy timeout is STORE_BUSY, a lost server STORE_UNAVAILABLE.
pub fn final_error(class: Class, location: &str, busy_timeout_ms: u64) -> Error {
    match class {
        Class::Transient => Error::Busy {
            timeout_ms: busy_timeout_ms,
        },
        Class::Lost(reason) => Error::Unavailable {
            location: location.to_string(),
            reason,
        },
        Class::Final(e) => e,
    }
}

/// The error a failed statement of [`super::tx::PgTx`] reaches the caller
/// as: [`Class::Transient`] is STORE_BUSY with `timeout_ms` 0 and
/// [`Class::Lost`] STORE_UNAVAILABLE (the Store retries both, then fills in
/// its busy timeout; [`super::tx::PgTx::failure`] tells it which it was),
/// [`Class::Final`] its own error.
pub fn to_error(e: &postgres::Error, location: &str) -> Error {
    final_error(classify(e, location), location, 0)
}

/// Whether a prepared statement's plan went stale (a migration changed a
/// table it reads): prepare it again and retry.
pub fn is_stale_plan(e: &postgres::Error) -> bool {
    e.as_db_error().is_some_and(|d| {
        d.code() == &SqlState::FEATURE_NOT_SUPPORTED
            && d.message()
                .starts_with("cached plan must not change result type")
    })
}

/// Whether the server refused a statement by a key, constraint or
/// trigger.
pub fn is_refusal(e: &postgres::Error) -> bool {
    e.as_db_error().is_some_and(|db| {
        let state = db.code().code();
        state.starts_with("23") || state.starts_with(TRIGGER_CLASS)
    })
}

/// Whether a driver error is a UNIQUE or primary-key violation of the
/// named constraint.
pub fn is_unique_violation(e: &postgres::Error, constraint: &str) -> bool {
    e.as_db_error().is_some_and(|db| {
        db.code() == &SqlState::UNIQUE_VIOLATION && db.constraint() == Some(constraint)
    })
}
