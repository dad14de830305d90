//! Id newtypes: `ses_` + 16 lowercase hex digits (docs/design.md, "Model").

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A session id: `ses_` followed by 16 lowercase hex digits (8 random bytes).
///
/// Rule: docs/design.md, "Model".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

/// Why a string is not a well-formed id. The message never repeats the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdError {
    /// The expected shape, e.g. "ses_ followed by 16 lowercase hex digits".
    pub expected: &'static str,
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}", self.expected)
    }
}

impl std::error::Error for IdError {}

fn parse_prefixed(s: &str, prefix: &str, expected: &'static str) -> Result<String, IdError> {
    let ok = s.len() == prefix.len() + 16
        && s.starts_with(prefix)
        && s.as_bytes()[prefix.len()..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    if ok {
        Ok(s.to_owned())
    } else {
        Err(IdError { expected })
    }
}

/// Parses `prefix` + 16 lowercase hex digits (shared by the id newtypes).
pub(crate) fn parse_prefixed_id(
    s: &str,
    prefix: &str,
    expected: &'static str,
) -> Result<String, IdError> {
    parse_prefixed(s, prefix, expected)
}

impl SessionId {
    /// The id prefix.
    pub const PREFIX: &'static str = "ses_";

    /// Builds an id from 8 bytes (hex-encoded, lowercase).
    pub fn from_bytes(bytes: [u8; 8]) -> Self {
        SessionId(format!("{}{}", Self::PREFIX, hex::encode(bytes)))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for SessionId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_prefixed(
            s,
            Self::PREFIX,
            "`ses_` followed by 16 lowercase hex digits",
        )
        .map(SessionId)
    }
}

impl TryFrom<String> for SessionId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> String {
        id.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_only_the_exact_shape() {
        assert!("ses_0123456789abcdef".parse::<SessionId>().is_ok());
        for bad in [
            "",
            "ses_",
            "ses_0123456789ABCDEF",
            "ses_0123456789abcde",
            "ses_0123456789abcdef0",
            "run_0123456789abcdef",
            "ses_0123456789abcdeg",
            " ses_0123456789abcdef",
        ] {
            assert!(bad.parse::<SessionId>().is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(bytes in any::<[u8; 8]>()) {
            let id = SessionId::from_bytes(bytes);
            prop_assert_eq!(id.to_string().parse::<SessionId>().unwrap(), id);
        }
    }
}
