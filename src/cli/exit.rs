//! The one place errors are rendered and turned into exit codes.
//!
//! `--json`: the failure envelope (docs/design.md, "CLI") ([`logbook::Envelope`]) on stdout.
//! Otherwise `error[CODE]: message` on stderr, `caused by:` lines, then
//! hints. clap's usage errors are re-worded here so that no rejected value
//! is ever echoed (it may hold a secret): messages name the flag and the
//! rule only.

use super::output::{write_stderr, write_stdout, Printer};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use logbook::error::Details;
use logbook::{Envelope, Error, ErrorBody, ErrorCode};
use serde::Serialize;
use std::ffi::OsString;
use std::process::ExitCode;

/// Whether `--json` appears on the command line (before any `--`).
pub fn wants_json(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Prints `body` (under `--json` as the failure envelope, else as text with
/// `hints`); returns the exit code of its code.
fn print(body: ErrorBody<'_>, hints: &[String], json: bool) -> ExitCode {
    let code = body.code;
    if json {
        let mut s = Envelope::<()>::Failure(body).to_json().unwrap_or_else(|_| {
            format!(r#"{{"ok":false,"error":{{"code":"{}","message":"","retryable":false,"details":{{}}}}}}"#, code.as_str())
        });
        s.push('\n');
        write_stdout(s.as_bytes());
    } else {
        let mut s = format!("error[{}]: {}\n", code.as_str(), body.message);
        if !hints.is_empty() {
            s.push('\n');
            for h in hints {
                s.push_str(&format!("hint: {h}\n"));
            }
        }
        write_stderr(&s);
    }
    ExitCode::from(code.exit_code())
}

fn hints(e: &Error) -> Vec<String> {
    match e {
        Error::Conflict { id, actual_rev, .. } => vec![format!(
            "re-read the session (`logbook session show {id}`), then retry with --if-rev {actual_rev}"
        )],
        Error::Busy { .. } => vec!["retry, or raise --busy-timeout-ms".to_owned()],
        Error::VersionTooNew { .. } => vec!["this database was written by a newer logbook".to_owned()],
        Error::StoreFile { hint, .. } => vec![hint.clone()],
        _ => Vec::new(),
    }
}

/// Renders a failure that is not a library error (e.g. an import with
/// rejections, whose `details` is the import report); returns its exit code.
pub fn failure(code: ErrorCode, message: &str, details: serde_json::Value, json: bool) -> ExitCode {
    print(
        ErrorBody::new(code, message, Details::report(details)),
        &[],
        json,
    )
}

/// Renders a library error; returns the exit code of its code.
pub fn report(e: &Error, out: &Printer) -> ExitCode {
    let mut message = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if !out.json {
            message.push_str(&format!("\ncaused by: {s}"));
        }
        src = s.source();
    }
    print(
        ErrorBody::new(e.code(), message, e.wire_details()),
        &hints(e),
        out.json,
    );
    // An interruption exits 128 + the signal (130, 143), not its code's 130.
    ExitCode::from(e.exit_code())
}

fn arg_name(e: &clap::Error) -> Option<String> {
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => Some(v.join(", ")),
        _ => None,
    }
}

/// A short flag (`-V`) or a long one (`--if-rev`): safe to repeat in a
/// message.
fn flag_like(token: &str) -> bool {
    if let [b'-', c] = token.as_bytes() {
        return c.is_ascii_alphabetic();
    }
    // Never repeat a token the redactor would hide.
    logbook::redact::redact(token) == token
        && token.len() <= 40
        && token.starts_with("--")
        && token[2..]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A plain word (`sesion`, `bogus`): safe to repeat in a message. Token
/// shapes such as `sk-…` or `xoxb-…` are words too, so the redactor has the
/// last say, and a leading `-` is left to [`flag_like`].
fn word_like(token: &str) -> bool {
    token.len() <= 40
        && !token.starts_with('-')
        && token.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
        && logbook::redact::redact(token) == token
}

/// Renders a clap error. Help prints as clap does (exit 0); a version
/// request at any level prints `logbook X.Y.Z`, or under `--json` the
/// envelope `{"ok":true,"data":{"version":"X.Y.Z"}}`.
pub fn clap_error(e: &clap::Error, json: bool) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayVersion => {
            #[derive(Serialize)]
            struct Version {
                version: &'static str,
            }
            Printer::new(json).success(
                &Version {
                    version: env!("CARGO_PKG_VERSION"),
                },
                |v| format!("logbook {}\n", v.version),
            );
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand
            if !json =>
        {
            let _ = e.print();
            return ExitCode::from(2);
        }
        _ => {}
    }
    let arg = arg_name(e).unwrap_or_else(|| "argument".to_owned());
    let mut hints: Vec<String> = Vec::new();
    let (field, message) = match e.kind() {
        ErrorKind::InvalidValue => {
            let empty = matches!(e.get(ContextKind::InvalidValue), Some(ContextValue::String(v)) if v.is_empty());
            if empty && arg.starts_with('<') {
                // A positional given as `''`.
                (arg.clone(), format!("`{arg}` must not be empty"))
            } else if empty {
                let flag = arg.split_whitespace().next().unwrap_or("--flag").to_owned();
                (
                    arg.clone(),
                    format!(
                        "a value is required for `{arg}` but none was supplied; a value that begins with `-` must be attached with `=`, e.g. `{flag}=-x`"
                    ),
                )
            } else {
                let valid = match e.get(ContextKind::ValidValue) {
                    Some(ContextValue::Strings(v)) => {
                        format!("; expected one of: {}", v.join(", "))
                    }
                    _ => String::new(),
                };
                (arg.clone(), format!("invalid value for `{arg}`{valid}"))
            }
        }
        ErrorKind::ValueValidation => {
            let why = std::error::Error::source(e)
                .map(|s| s.to_string())
                .unwrap_or_default();
            (arg.clone(), format!("invalid value for `{arg}`: {why}"))
        }
        ErrorKind::UnknownArgument => {
            let hint = "if it is a value that begins with `-`, attach it to its flag with `=`, e.g. `--note=-rf`";
            if flag_like(&arg) {
                // clap's "a similar argument exists": a flag of ours, by name.
                let similar = match e.get(ContextKind::SuggestedArg) {
                    Some(ContextValue::String(s)) => {
                        s.split_whitespace().next().filter(|s| flag_like(s))
                    }
                    _ => None,
                };
                let message = match similar {
                    Some(s) => format!("unexpected argument `{arg}`; did you mean `{s}`? ({hint})"),
                    None => format!("unexpected argument `{arg}`; {hint}"),
                };
                (arg.clone(), message)
            } else {
                (
                    "argument".to_owned(),
                    format!("unexpected argument (its text is not repeated here); {hint}"),
                )
            }
        }
        ErrorKind::InvalidSubcommand => {
            let given = match e.get(ContextKind::InvalidSubcommand) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => String::new(),
            };
            let mut reason = if flag_like(&given) {
                format!("unknown command `{given}`: a command name was expected here, not a flag")
            } else if word_like(&given) {
                format!("unknown command `{given}`")
            } else {
                "unknown command".to_owned()
            };
            if let Some(ContextValue::Strings(s)) = e.get(ContextKind::SuggestedSubcommand) {
                if let Some(first) = s.first().filter(|s| word_like(s)) {
                    reason.push_str(&format!("; did you mean `{first}`?"));
                }
            }
            ("command".to_owned(), reason)
        }
        ErrorKind::MissingRequiredArgument => {
            (arg.clone(), format!("missing required argument: `{arg}`"))
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => (
            "command".to_owned(),
            "a subcommand is required; see --help".to_owned(),
        ),
        ErrorKind::ArgumentConflict => {
            // Argument names of our own definitions, never user values.
            let prior = match e.get(ContextKind::PriorArg) {
                Some(ContextValue::String(s)) => Some(s.clone()),
                Some(ContextValue::Strings(v)) => Some(v.join("`, `")),
                _ => None,
            };
            let message = match prior {
                // clap reports a repeated flag as a conflict with itself.
                Some(p) if p == arg => format!("`{arg}` was given more than once"),
                Some(p) => format!("`{arg}` cannot be used with `{p}`"),
                None => format!("`{arg}` cannot be used with one of the other arguments"),
            };
            (arg.clone(), message)
        }
        ErrorKind::TooManyValues | ErrorKind::WrongNumberOfValues => {
            (arg.clone(), format!("wrong number of values for `{arg}`"))
        }
        ErrorKind::InvalidUtf8 => (arg.clone(), "arguments must be valid UTF-8".to_owned()),
        _ => (arg.clone(), "invalid command line; see --help".to_owned()),
    };
    if !json {
        if let Some(usage) = e.get(ContextKind::Usage) {
            hints.push(usage.to_string().trim().to_owned());
        }
    }
    // The details of an INVALID_ARGUMENT naming the flag, with clap's
    // re-worded message as both message and reason.
    let shape = Error::invalid(field, message.as_str());
    let body = ErrorBody::new(
        ErrorCode::InvalidArgument,
        message.as_str(),
        shape.wire_details(),
    );
    print(body, &hints, json)
}
