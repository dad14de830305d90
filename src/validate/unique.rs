//! JSON objects read with every key once.
//!
//! serde_json keeps the last of two equal keys in one object (`{"a":1,"a":2}`
//! reads as `{"a":2}`), so a value checked, redacted or stored after such a
//! parse is not the value the text holds: the redactor would check one
//! member while another copy of it reached a reader that keeps the first.
//! Every JSON text logbook reads as a whole — MCP messages (`mcp serve`'s
//! line layer), import lines and files, JSON-valued CLI flags — goes
//! through these readers instead, which refuse the second key.
//!
//! The refusal is a serde_json error of category `Data` whose message
//! starts with [`DUPLICATE_KEY`] and carries the line and column where the
//! second key ends; [`is_duplicate_key`] recognises it. It never names the
//! key (a key can hold anything, a secret included).

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::collections::BTreeMap;
use std::fmt;

/// The start of the error message for a key seen twice in one object.
pub const DUPLICATE_KEY: &str = "an object holds the same key twice";

/// Whether `e` is the refusal of a repeated key by [`unique_value`],
/// [`UniqueValue`] or [`UniqueMap`].
pub fn is_duplicate_key(e: &serde_json::Error) -> bool {
    e.classify() == serde_json::error::Category::Data && e.to_string().starts_with(DUPLICATE_KEY)
}

/// Parses JSON text into a value as `serde_json::from_slice::<Value>` does
/// (same numbers, same depth limit, same syntax errors), except that an
/// object holding one key twice is refused.
///
/// # Errors
/// serde_json's syntax errors; a duplicate key ([`is_duplicate_key`]).
pub fn unique_value(text: &[u8]) -> serde_json::Result<Value> {
    serde_json::from_slice::<UniqueValue>(text).map(|v| v.0)
}

/// Any JSON value, read with every object's keys unique (at every depth).
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueValue(pub Value);

/// A JSON object read into a map, its keys unique. Its values are read as
/// `V` reads them: with `V` = `&RawValue`, only this object's own keys are
/// checked (the raw values are checked when they are parsed in turn).
#[derive(Debug, Clone, PartialEq)]
pub struct UniqueMap<V>(pub BTreeMap<String, V>);

/// Where [`entries`] puts what it reads.
trait Entries<V> {
    fn has(&self, key: &str) -> bool;
    fn put(&mut self, key: String, value: V);
}

impl<V> Entries<V> for BTreeMap<String, V> {
    fn has(&self, key: &str) -> bool {
        self.contains_key(key)
    }
    fn put(&mut self, key: String, value: V) {
        self.insert(key, value);
    }
}

impl Entries<UniqueValue> for Map<String, Value> {
    fn has(&self, key: &str) -> bool {
        self.contains_key(key)
    }
    fn put(&mut self, key: String, value: UniqueValue) {
        self.insert(key, value.0);
    }
}

/// Reads every entry of `map` into `out`; a key already there is the
/// [`DUPLICATE_KEY`] error, raised where that key ends (before its value
/// is read).
fn entries<'de, A, V, M>(mut map: A, out: &mut M) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    V: Deserialize<'de>,
    M: Entries<V>,
{
    while let Some(key) = map.next_key::<String>()? {
        if out.has(&key) {
            return Err(de::Error::custom(DUPLICATE_KEY));
        }
        let value = map.next_value::<V>()?;
        out.put(key, value);
    }
    Ok(())
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct MapVisitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
            type Value = UniqueMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<UniqueMap<V>, A::Error> {
                let mut out = BTreeMap::new();
                entries(map, &mut out)?;
                Ok(UniqueMap(out))
            }
        }
        d.deserialize_map(MapVisitor(std::marker::PhantomData))
    }
}

impl<'de> Deserialize<'de> for UniqueValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor).map(UniqueValue)
    }
}

/// serde_json's own `Value` visitor, with [`entries`] for objects.
struct ValueVisitor;

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        UniqueValue::deserialize(d).map(|v| v.0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(UniqueValue(v)) = seq.next_element()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        entries::<A, UniqueValue, _>(map, &mut out)?;
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::value::RawValue;

    #[test]
    fn reads_as_serde_json_does_without_repeated_keys() {
        for text in [
            r#"{"a":1,"b":[1,-2,3.5,1e300,18446744073709551615,"x",null,true],"c":{"a":{}}}"#,
            r#"[{"a":1},{"a":1}]"#,
            r#""\ud83d\ude00""#,
            "-0.0",
            "9223372036854775808",
        ] {
            let want: Value = serde_json::from_str(text).unwrap();
            assert_eq!(unique_value(text.as_bytes()).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn a_repeated_key_at_any_depth_is_refused_with_its_place_and_no_name() {
        for (text, column) in [
            (r#"{"a":1,"a":2}"#, 10),
            (r#"{"x":{"sk-secret":1,"sk-secret":1}}"#, 31),
            (r#"[1,{"b":[{"c":0,"c":0}]}]"#, 19),
        ] {
            let e = unique_value(text.as_bytes()).unwrap_err();
            assert!(is_duplicate_key(&e), "{text}: {e}");
            assert_eq!((e.line(), e.column()), (1, column), "{text}: {e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        // Other errors are serde_json's own.
        let e = unique_value(br#"{"a":1,}"#).unwrap_err();
        assert!(!is_duplicate_key(&e));
        let e = unique_value(br#"{"a":"\ud83d"}"#).unwrap_err();
        assert!(!is_duplicate_key(&e));
    }

    #[test]
    fn a_unique_map_checks_its_own_keys_only() {
        let m: UniqueMap<&RawValue> = serde_json::from_str(r#"{"a":{"x":1,"x":2},"b":2}"#).unwrap();
        assert_eq!(m.0["a"].get(), r#"{"x":1,"x":2}"#);
        let e = serde_json::from_str::<UniqueMap<&RawValue>>(r#"{"a":1,"b":2,"a":3}"#).unwrap_err();
        assert!(is_duplicate_key(&e), "{e}");
        let e = serde_json::from_str::<UniqueMap<&RawValue>>("[1]").unwrap_err();
        assert!(!is_duplicate_key(&e));
    }

    #[test]
    fn the_depth_limit_is_serde_jsons() {
        let nested = |d: usize| format!("{}1{}", "[".repeat(d), "]".repeat(d));
        assert!(unique_value(nested(127).as_bytes()).is_ok());
        let e = unique_value(nested(128).as_bytes()).unwrap_err();
        assert!(e.to_string().starts_with("recursion limit exceeded"), "{e}");
    }
}
