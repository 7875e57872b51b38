//! The one JSON reader for documents: like `serde_json::from_slice::<Value>`, but a key that
//! appears twice in one object is an error (serde_json keeps the last one silently, so
//! `{"config": "", "config": {…}}` would mean different things to different readers).
//! Every document parse — the validator, the job picker, D-Bus submissions — goes through
//! [`parse_value`], so they all give the same verdict.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use std::fmt;

/// Parses JSON text into a [`Value`], rejecting duplicate keys at any depth. Nesting is
/// bounded by serde_json's own recursion limit (128), as before.
pub fn parse_value(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = de.deserialize_any(ValueVisitor)?;
    de.end()?;
    Ok(v)
}

struct ValueVisitor;

struct Seed;

impl<'de> de::DeserializeSeed<'de> for Seed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor)
    }
}

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
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
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
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(Seed)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let shown: String = key.chars().take(100).collect();
                return Err(de::Error::custom(format!("duplicate key {shown:?}")));
            }
            let v = map.next_value_seed(Seed)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_rejected_at_any_depth() {
        for bad in [
            r#"{"a":1,"a":2}"#,
            r#"{"config":"","config":{}}"#,
            r#"{"x":{"y":[{"z":1,"z":1}]}}"#,
        ] {
            let e = parse_value(bad.as_bytes()).unwrap_err().to_string();
            assert!(e.contains("duplicate key"), "{bad}: {e}");
        }
        let ok = parse_value(br#"{"a":{"a":1},"b":[1,2.5,null,true,"s"]}"#).unwrap();
        assert_eq!(ok["a"]["a"], 1);
        assert!(parse_value(b"{} x").is_err());
        assert!(parse_value(&[b'['; 200]).is_err());
    }
}
