//! The secret redactor (SPEC §4).
//!
//! Every free-text value and every string inside a JSON value passes through
//! [`redact`] before it is persisted. Each rule replaces the secret part of a
//! match with `[REDACTED]` and keeps the harmless prefix (`Bearer `,
//! `password=`, `https://user:`), so the text still reads. Redaction is
//! idempotent: `[REDACTED]` matches no rule's secret part. Caps are checked on
//! the input as given; redaction runs after.
//!
//! The rule table is self-testing: each rule carries samples that must match
//! and samples that must not (ordinary ids such as `ses_…`, git hashes, UUIDs).

use regex::{Captures, Regex};
use serde_json::Value;
use std::borrow::Cow;
use std::sync::OnceLock;

/// The replacement text.
pub const REDACTED: &str = "[REDACTED]";

struct Rule {
    #[cfg_attr(not(test), allow(dead_code))]
    name: &'static str,
    pattern: &'static str,
    /// Capture group to keep in front of `[REDACTED]` (0 = none).
    keep: usize,
    /// Capture group to keep after `[REDACTED]` (0 = none).
    keep_after: usize,
    #[cfg_attr(not(test), allow(dead_code))]
    must_match: &'static [&'static str],
    #[cfg_attr(not(test), allow(dead_code))]
    must_not_match: &'static [&'static str],
}

const RULES: &[Rule] = &[
    Rule {
        name: "private key PEM block",
        pattern: r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----(?s:.*?)(-----END[A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\z)",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
        ],
        must_not_match: &["-----BEGIN CERTIFICATE-----", "BEGIN PRIVATE"],
    },
    Rule {
        name: "Authorization: Bearer token",
        pattern: r"(?i)(\bbearer\s+)[A-Za-z0-9\-._~+/]{8,}=*",
        keep: 1,
        keep_after: 0,
        must_match: &[
            "Authorization: Bearer abcdef0123456789",
            "authorization: bearer sk_live_0123456789",
        ],
        must_not_match: &["bearer of bad news", "Bearer [REDACTED]"],
    },
    Rule {
        name: "JWT",
        pattern: r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
        keep: 0,
        keep_after: 0,
        must_match: &["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"],
        must_not_match: &["eyJ.short.x", "a.b.c"],
    },
    Rule {
        name: "AWS access key id",
        pattern: r"\b(AKIA|ASIA|ABIA|ACCA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b",
        keep: 0,
        keep_after: 0,
        must_match: &["AKIAIOSFODNN7EXAMPLE", "key=ASIAY34FZKBOKMUTVV7A."],
        must_not_match: &["AKIAshort", "AKIAIOSFODNN7EXAMPLEXX"],
    },
    Rule {
        name: "GitHub token",
        pattern: r"\b((gh[pousr]_[A-Za-z0-9]{30,})|(github_pat_[A-Za-z0-9_]{22,}))\b",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "ghp_EXAMPLE0EXAMPLE0EXAMPLE0EXAMPLE00000",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        ],
        must_not_match: &["ghp_short", "github_pat_x"],
    },
    Rule {
        name: "GitLab token",
        pattern: r"\bgl(pat|dt|ptt|rt)-[A-Za-z0-9_-]{20,}",
        keep: 0,
        keep_after: 0,
        must_match: &["glpat-abcdefghij0123456789"],
        must_not_match: &["glpat-short"],
    },
    Rule {
        name: "Slack token or webhook",
        pattern: r"\bxox[abposre]-[A-Za-z0-9-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9/]+",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "xoxb-1234567890-abcdefghij",
            "https://hooks.slack.com/services/T000/B000/XXXX",
        ],
        must_not_match: &["xoxb-1"],
    },
    Rule {
        name: "OpenAI / Anthropic API key",
        pattern: r"\bsk-(ant-|proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
        keep: 0,
        keep_after: 0,
        must_match: &[
            "sk-EXAMPLE0000EXAMPLE0000",
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
            "sk-proj-abcdefghijklmnopqrstuvwx",
        ],
        must_not_match: &["sk-short", "task-runner-0123456789abcdefghij"],
    },
    Rule {
        name: "Google API key",
        pattern: r"\bAIza[0-9A-Za-z_-]{35}",
        keep: 0,
        keep_after: 0,
        must_match: &["AIzaSyA0123456789abcdefghijklmnopqrstuv"],
        must_not_match: &["AIzaShort"],
    },
    Rule {
        name: "URL userinfo password",
        pattern: r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)[^@\s/]+(@)",
        keep: 1,
        keep_after: 2,
        must_match: &[
            "postgres://admin:hunter2@db.internal:5432/x",
            "https://u:p%40ss@example.com",
        ],
        must_not_match: &["https://example.com/a:b@c", "ssh://git@github.com/x"],
    },
    Rule {
        name: "secret assignment",
        pattern: r#"(?i)(\b(?:password|passwd|pwd|secret|client_secret|token|access_token|refresh_token|auth_token|api_key|apikey|api-key|access_key|secret_key|private_key)"?\s*[=:]\s*"?)[^\s"'&,;]+"#,
        keep: 1,
        keep_after: 0,
        must_match: &[
            "password=hunter2",
            "PASSWORD: hunter2",
            "api_key=abc123",
            "--token=abc",
            r#"{"secret": "s3cr3t"}"#,
            "db?user=a&password=x",
        ],
        must_not_match: &[
            "input_tokens=5",
            "tokens: 1000",
            "the password was rotated",
            "secretary=bob",
        ],
    },
];

/// Names of JSON object keys whose string values are always redacted.
const SECRET_KEY: &str = r"(?i)^(password|passwd|pwd|secret|client_secret|token|access_token|refresh_token|auth_token|id_token|api_key|apikey|api-key|access_key|secret_key|private_key|authorization|cookie)$";

struct Compiled {
    rules: Vec<(Regex, usize, usize)>,
    secret_key: Regex,
}

fn compiled() -> &'static Compiled {
    static C: OnceLock<Compiled> = OnceLock::new();
    C.get_or_init(|| Compiled {
        rules: RULES
            .iter()
            .filter_map(|r| {
                Regex::new(r.pattern)
                    .ok()
                    .map(|re| (re, r.keep, r.keep_after))
            })
            .collect(),
        // The pattern is a constant; the unit test proves it compiles.
        secret_key: Regex::new(SECRET_KEY).unwrap_or_else(|_| never_matches()),
    })
}

fn never_matches() -> Regex {
    // `[^\s\S]` matches nothing; it is a constant known to compile.
    Regex::new(r"[^\s\S]").unwrap_or_else(|_| unreachable_regex())
}

#[allow(clippy::panic)]
fn unreachable_regex() -> Regex {
    panic!("the regex crate rejected a constant pattern")
}

/// Returns `text` with every secret replaced by `[REDACTED]`.
///
/// Borrowed when nothing matched (the common case), so it costs no copy.
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    for (re, keep, keep_after) in &compiled().rules {
        if !re.is_match(&out) {
            continue;
        }
        let group = |c: &Captures<'_>, i: usize| -> String {
            if i > 0 {
                c.get(i).map_or(String::new(), |m| m.as_str().to_owned())
            } else {
                String::new()
            }
        };
        let replaced = re
            .replace_all(&out, |c: &Captures<'_>| {
                format!("{}{REDACTED}{}", group(c, *keep), group(c, *keep_after))
            })
            .into_owned();
        out = Cow::Owned(replaced);
    }
    out
}

/// Redacts an optional text value.
pub fn redact_opt(text: Option<&str>) -> Option<String> {
    text.map(|t| redact(t).into_owned())
}

/// Redacts every string inside a JSON value, in place. A string under a key
/// that names a secret (`password`, `token`, `api_key`, …) is replaced whole.
pub fn redact_json(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Cow::Owned(r) = redact(s) {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_json),
        Value::Object(map) => {
            let keys = &compiled().secret_key;
            for (k, v) in map.iter_mut() {
                if keys.is_match(k) {
                    if let Value::String(s) = v {
                        if !s.is_empty() {
                            *s = REDACTED.to_owned();
                        }
                        continue;
                    }
                }
                redact_json(v);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn every_rule_compiles() {
        assert_eq!(compiled().rules.len(), RULES.len());
        Regex::new(SECRET_KEY).unwrap();
    }

    #[test]
    fn rule_table_samples() {
        for rule in RULES {
            let re = Regex::new(rule.pattern).unwrap();
            for s in rule.must_match {
                assert!(re.is_match(s), "{}: should match {s:?}", rule.name);
                let r = redact(s);
                assert!(r.contains(REDACTED), "{}: {s:?} -> {r:?}", rule.name);
            }
            for s in rule.must_not_match {
                assert!(!re.is_match(s), "{}: should not match {s:?}", rule.name);
            }
        }
    }

    #[test]
    fn secrets_are_gone_and_context_stays() {
        let cases = [
            (
                "Authorization: Bearer abcdef0123456789xyz",
                "Authorization: Bearer [REDACTED]",
            ),
            ("password=hunter2 ok", "password=[REDACTED] ok"),
            (
                "postgres://admin:hunter2@db/x",
                "postgres://admin:[REDACTED]@db/x",
            ),
            ("use AKIAIOSFODNN7EXAMPLE now", "use [REDACTED] now"),
            ("k sk-EXAMPLE0000EXAMPLE0000", "k [REDACTED]"),
            (
                "-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY----- tail",
                "[REDACTED] tail",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(redact(input), want, "{input:?}");
        }
    }

    #[test]
    fn ordinary_values_are_untouched() {
        for s in [
            "ses_0123456789abcdef",
            "run_0123456789abcdef",
            "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
            "9fceb02",
            "550e8400-e29b-41d4-a716-446655440000",
            "deploy canary at 10%",
            "input_tokens=1200 output_tokens=300",
            "https://example.com/path?q=1",
            "git@github.com:org/repo.git",
            "pln_abc op_123 dep-9",
            "漢字 🙏 text",
        ] {
            assert!(
                matches!(redact(s), Cow::Borrowed(_)),
                "{s:?} changed to {:?}",
                redact(s)
            );
        }
    }

    #[test]
    fn json_strings_and_secret_keys() {
        let mut v: Value = serde_json::from_str(
            r#"{"password":"hunter2","nested":{"url":"https://a:b@h"},"list":["AKIAIOSFODNN7EXAMPLE"],"n":1}"#,
        )
        .unwrap();
        redact_json(&mut v);
        assert_eq!(
            v.to_string(),
            r#"{"list":["[REDACTED]"],"n":1,"nested":{"url":"https://a:[REDACTED]@h"},"password":"[REDACTED]"}"#
        );
    }

    proptest! {
        #[test]
        fn redaction_is_idempotent(s in "(password=|Bearer |sk-|AKIA|https://u:|[a-zA-Z0-9 =:/@._-]){0,40}") {
            let once = redact(&s).into_owned();
            let twice = redact(&once).into_owned();
            prop_assert_eq!(once, twice);
        }
    }
}
