//! Tool inputs: the field table each tool declares, the JSON schema built
//! from it, and checked access to a call's arguments.
//!
//! One [`Field`] list per tool is the single source of both the advertised
//! `inputSchema` and the checks a call's `arguments` pass, so the two cannot
//! drift. A check failure is INVALID_ARGUMENT naming the field and the rule;
//! no rejected value is ever repeated (it may hold a secret, docs/design.md, "Errors").
//! Business rules (caps, characters, ids) stay in the library.

use crate::error::{Error, Result};
use crate::redact::redact;
use serde_json::{json, Map, Value};

/// The JSON type a field accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A string.
    Text,
    /// An integer (a JSON number without a fraction).
    Int,
    /// `true` or `false`.
    Bool,
    /// An array of strings.
    TextList,
    /// A JSON object.
    Object,
    /// One of these strings.
    Enum(&'static [&'static str]),
    /// An array of these strings.
    EnumList(&'static [&'static str]),
    /// A string or an integer (times: RFC 3339 or epoch ms; cursors).
    TextOrInt,
}

/// One input field of a tool.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The argument's name (snake_case, as in the CLI's JSON).
    pub name: &'static str,
    /// The JSON type it accepts.
    pub kind: Kind,
    /// Whether a call must give it.
    pub required: bool,
    /// One line for the schema's `description`.
    pub doc: &'static str,
}

impl Field {
    /// A required field.
    pub const fn req(name: &'static str, kind: Kind, doc: &'static str) -> Self {
        Field {
            name,
            kind,
            required: true,
            doc,
        }
    }

    /// An optional field.
    pub const fn opt(name: &'static str, kind: Kind, doc: &'static str) -> Self {
        Field {
            name,
            kind,
            required: false,
            doc,
        }
    }

    fn schema(&self) -> Value {
        let mut s = match self.kind {
            Kind::Text => json!({"type": "string"}),
            Kind::Int => json!({"type": "integer"}),
            Kind::Bool => json!({"type": "boolean"}),
            Kind::TextList => json!({"type": "array", "items": {"type": "string"}}),
            Kind::Object => json!({"type": "object"}),
            Kind::Enum(values) => json!({"type": "string", "enum": values}),
            Kind::EnumList(values) => {
                json!({"type": "array", "items": {"type": "string", "enum": values}})
            }
            Kind::TextOrInt => json!({"type": ["string", "integer"]}),
        };
        if let Value::Object(m) = &mut s {
            m.insert("description".into(), Value::String(self.doc.into()));
        }
        s
    }

    fn expected(&self) -> &'static str {
        match self.kind {
            Kind::Text => "expected a string",
            Kind::Int => "expected an integer",
            Kind::Bool => "expected true or false",
            Kind::TextList => "expected an array of strings",
            Kind::Object => "expected a JSON object",
            Kind::Enum(_) => "expected one of the values the schema lists",
            Kind::EnumList(_) => "expected an array of the values the schema lists",
            Kind::TextOrInt => "expected a string or an integer",
        }
    }

    fn accepts(&self, v: &Value) -> bool {
        let one_of = |values: &[&str], v: &Value| v.as_str().is_some_and(|s| values.contains(&s));
        match self.kind {
            Kind::Text => v.is_string(),
            Kind::Int => v.is_i64(),
            Kind::Bool => v.is_boolean(),
            Kind::TextList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Kind::Object => v.is_object(),
            Kind::Enum(values) => one_of(values, v),
            Kind::EnumList(values) => v
                .as_array()
                .is_some_and(|a| a.iter().all(|x| one_of(values, x))),
            Kind::TextOrInt => v.is_string() || v.is_i64(),
        }
    }
}

/// The `inputSchema` of a tool with these fields: a closed object
/// (`additionalProperties: false`), properties in declaration order (as far
/// as the JSON map keeps it), `required` listing the required ones.
pub fn input_schema(fields: &[Field]) -> Map<String, Value> {
    let mut props = Map::new();
    for f in fields {
        props.insert(f.name.into(), f.schema());
    }
    let required: Vec<&str> = fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name)
        .collect();
    let mut m = Map::new();
    m.insert("type".into(), json!("object"));
    m.insert("properties".into(), Value::Object(props));
    m.insert("required".into(), json!(required));
    m.insert("additionalProperties".into(), json!(false));
    m
}

/// A call's arguments, checked against its tool's fields: every key is a
/// declared field, every value has the field's type, every required field
/// is present. `null` counts as absent for an optional field.
#[derive(Debug)]
pub struct Args {
    map: Map<String, Value>,
}

/// Whether `key` may be named in a message: short, plain, and untouched by
/// the redactor.
fn nameable(key: &str) -> bool {
    key.len() <= 64
        && redact(key) == key
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl Args {
    /// Checks `arguments` (absent = `{}`) against `fields`.
    ///
    /// # Errors
    /// INVALID_ARGUMENT for an unknown field (named only when it looks like
    /// a plain name), a value of the wrong JSON type, or a missing required
    /// field.
    pub fn check(fields: &[Field], arguments: Option<Map<String, Value>>) -> Result<Args> {
        let mut map = arguments.unwrap_or_default();
        for key in map.keys() {
            if !fields.iter().any(|f| f.name == key) {
                return Err(if nameable(key) {
                    Error::invalid(key.as_str(), "unknown field; see the tool's input schema")
                } else {
                    Error::invalid(
                        "arguments",
                        "an unknown field (its name is not repeated here); see the tool's input schema",
                    )
                });
            }
        }
        map.retain(|_, v| !v.is_null());
        for f in fields {
            match map.get(f.name) {
                None if f.required => {
                    return Err(Error::invalid(f.name, "a required field is missing"))
                }
                None => {}
                Some(v) if !f.accepts(v) => return Err(Error::invalid(f.name, f.expected())),
                Some(_) => {}
            }
        }
        Ok(Args { map })
    }

    /// A string field.
    pub fn text(&self, name: &str) -> Option<String> {
        self.map
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    /// A required string field (`check` has ensured it is there).
    pub fn required_text(&self, name: &str) -> Result<String> {
        self.text(name)
            .ok_or_else(|| Error::invalid(name, "a required field is missing"))
    }

    /// An integer field.
    pub fn int(&self, name: &str) -> Option<i64> {
        self.map.get(name).and_then(Value::as_i64)
    }

    /// A boolean field; absent is `false`.
    pub fn flag(&self, name: &str) -> bool {
        self.map.get(name).and_then(Value::as_bool).unwrap_or(false)
    }

    /// An array-of-strings field; absent is empty.
    pub fn list(&self, name: &str) -> Vec<String> {
        self.map
            .get(name)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// An object field, as its JSON value.
    pub fn object(&self, name: &str) -> Option<Value> {
        self.map.get(name).filter(|v| v.is_object()).cloned()
    }

    /// A string-or-integer field, as text (an integer in decimal).
    pub fn text_or_int(&self, name: &str) -> Option<String> {
        match self.map.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: &[Field] = &[
        Field::req("title", Kind::Text, "t"),
        Field::opt("limit", Kind::Int, "l"),
        Field::opt("status", Kind::EnumList(&["active", "paused"]), "s"),
    ];

    fn args(v: Value) -> Result<Args> {
        Args::check(FIELDS, v.as_object().cloned())
    }

    #[test]
    fn schema_is_closed_and_lists_required_fields() {
        let s = Value::Object(input_schema(FIELDS));
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["required"], json!(["title"]));
        assert_eq!(
            s["properties"]["status"]["items"]["enum"],
            json!(["active", "paused"])
        );
    }

    #[test]
    fn checks_types_presence_and_unknown_fields_without_echoing_values() {
        assert!(args(json!({"title": "x", "limit": null})).is_ok());
        let e = args(json!({"limit": 3})).unwrap_err();
        assert_eq!(e.details()["field"], "title");
        let e = args(json!({"title": "x", "limit": "sk-EXAMPLE0000EXAMPLE0000"})).unwrap_err();
        assert!(!e.to_string().contains("sk-EXAMPLE"));
        assert_eq!(e.details()["field"], "limit");
        let e = args(json!({"title": "x", "actor": "root"})).unwrap_err();
        assert_eq!(e.details()["field"], "actor");
        let e =
            args(json!({"title": "x", "ghp_EXAMPLE0EXAMPLE0EXAMPLE0EXAMPLE00000": 1})).unwrap_err();
        assert!(!format!("{e} {}", e.details()).contains("ghp_"));
        assert!(args(json!({"title": "x", "status": ["done"]})).is_err());
        assert!(args(json!({"title": "x", "limit": 1.5})).is_err());
    }
}
