//! Decoding only the parts of a JSON document that are read: the webhook's answer costs what it
//! reads of a review, not what the review holds.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::value::SeqAccessDeserializer;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Which parts of a JSON document to build into a [`Value`]: all of it, or some keys of an object,
/// each with its own shape. Other keys are checked for syntax and skipped without allocating. A
/// value that is not an object where the shape names keys is built whole, so the rules still see
/// (and name) its real type.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    Whole,
    Keys(&'static [(&'static str, Shape)]),
}

impl Shape {
    /// Decodes one JSON document. Errors are serde_json's, including its nesting limit of 128
    /// levels in the parts built (skipped parts are scanned without recursion).
    pub fn decode(self, json: &str) -> serde_json::Result<Value> {
        let mut deserializer = serde_json::Deserializer::from_str(json);
        let value = self.deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(value)
    }
}

impl<'de> DeserializeSeed<'de> for Shape {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self {
            Shape::Whole => Value::deserialize(deserializer),
            Shape::Keys(keys) => deserializer.deserialize_any(KeysVisitor(keys)),
        }
    }
}

struct KeysVisitor(&'static [(&'static str, Shape)]);

impl<'de> Visitor<'de> for KeysVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut built = Map::new();
        while let Some(Key(key)) = map.next_key()? {
            match self.0.iter().find(|(name, _)| *name == key) {
                // Inserting keeps the last of duplicate keys, as serde_json's own Value does.
                Some((_, shape)) => drop(built.insert(key.into_owned(), map.next_value_seed(*shape)?)),
                None => drop(map.next_value::<IgnoredAny>()?),
            }
        }
        Ok(Value::Object(built))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        Value::deserialize(SeqAccessDeserializer::new(seq))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// An object key, borrowed from the input unless it had escapes: skipped keys cost no allocation.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }

            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}
