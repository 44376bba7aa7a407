//! The serde plumbing that lets the derived wire types of [`super`] read a line of Pi's in one
//! pass, straight from its bytes. It knows no field names: the schema is the derives.
//!
//! - [`lenient`]: a field Pi may write with another type than expected takes its default.
//! - [`ByTag`]: an object told apart by one key (`type`, `role`), read where it lies.
//!   `#[serde(tag = "type")]` would first buffer the whole object into serde's `Content` tree:
//!   every skipped field built (a 20 MiB echoed attachment, a 100 000-deep array), and any
//!   value serde_json cannot build (`1e400`, a lone surrogate) failing the line where the runner
//!   never reads it. Here only the entries before the tag are held, as values (Pi writes the
//!   tag first, or right after `id`), and the rest goes straight to the derive, which skips
//!   what it does not know with [`IgnoredAny`].

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::StringDeserializer;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, IntoDeserializer, MapAccess,
    SeqAccess, VariantAccess, Visitor,
};
use serde::{Deserialize, forward_to_deserialize_any};
use serde_json::Value;

/// `deserialize_with` for a field whose type Pi does not guarantee (its events are not a
/// versioned schema, and a progress detail must never end a run). A scalar or `null` becomes
/// `T` where `serde_json::from_value` would make it one, else `T::default()`. An object is
/// read as `T` in place if `T` reads objects, else skipped unbuilt; an array is always skipped
/// unbuilt (no lenient field is a list; a derived struct would read one positionally).
pub(super) fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    d.deserialize_any(Lenient(PhantomData))
}

/// [`lenient`] for a field whose presence counts even when its value does not fit: `None`
/// only when absent (with `#[serde(default)]`).
pub(super) fn lenient_present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    lenient(d).map(Some)
}

struct Lenient<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de> + Default> DeserializeSeed<'de> for Lenient<T> {
    type Value = T;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T, D::Error> {
        d.deserialize_any(self)
    }
}

/// A scalar is small: converting it through a `Value` gives exactly `from_value`'s rules.
fn scalar<'de, T: Deserialize<'de> + Default, E>(v: Value) -> Result<T, E> {
    Ok(T::deserialize(v).unwrap_or_default())
}

impl<'de, T: Deserialize<'de> + Default> Visitor<'de> for Lenient<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<T, E> {
        scalar(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<T, E> {
        scalar(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<T, E> {
        scalar(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<T, E> {
        scalar(v.into())
    }
    fn visit_str<E>(self, v: &str) -> Result<T, E> {
        scalar(v.into())
    }
    fn visit_unit<E>(self) -> Result<T, E> {
        scalar(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
        IgnoredAny.visit_seq(seq)?;
        Ok(T::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let mut entries = Entries::new(Vec::new(), &mut map);
        let read = T::deserialize(&mut entries);
        let touched = entries.touched;
        drop(entries);
        match read {
            // Refused before asking for a key: `T` is not read from an object (a string, a
            // count), and the object is still whole, to be skipped.
            Err(_) if !touched => IgnoredAny.visit_map(map).map(|_| T::default()),
            read => read,
        }
    }
}

/// A JSON object being read, for a derive to read: `before` (held as values), then the rest of
/// `live`, less the key `skip` (its value skipped unbuilt).
struct Entries<A> {
    before: std::vec::IntoIter<(String, Value)>,
    /// The value of the key last taken from `before`.
    value: Option<Value>,
    live: A,
    skip: Option<&'static str>,
    /// Whether a key was asked for (see [`lenient`]).
    touched: bool,
}

impl<A> Entries<A> {
    fn new(before: Vec<(String, Value)>, live: A) -> Entries<A> {
        Entries {
            before: before.into_iter(),
            value: None,
            live,
            skip: None,
            touched: false,
        }
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        mut seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.touched = true;
        if let Some((key, value)) = self.before.next() {
            self.value = Some(value);
            return seed.deserialize(StringDeserializer::new(key)).map(Some);
        }
        let Some(skip) = self.skip else {
            return self.live.next_key_seed(seed);
        };
        loop {
            match self.live.next_key_seed(Unless { key: skip, seed })? {
                None => return Ok(None),
                Some(Ok(key)) => return Ok(Some(key)),
                Some(Err(back)) => {
                    self.live.next_value::<IgnoredAny>()?;
                    seed = back;
                }
            }
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(value).map_err(de::Error::custom),
            None => self.live.next_value_seed(seed),
        }
    }
}

impl<'de, A: MapAccess<'de>> Deserializer<'de> for &mut Entries<A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_some(self)
    }
    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// A map key: `key` (`Err`, handing the seed back) or another, read by `seed`.
struct Unless<K> {
    key: &'static str,
    seed: K,
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for Unless<K> {
    type Value = Result<K::Value, K>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for Unless<K> {
    type Value = Result<K::Value, K>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        if v == self.key {
            return Ok(Err(self.seed));
        }
        self.seed.deserialize(v.into_deserializer()).map(Ok)
    }
}

/// `map` read up to its key `tag`: that key's value (a string, else `None`), the entries
/// before it, and the map to go on with. Without the key, every entry is in the second.
type Split<A> = (Option<String>, Vec<(String, Value)>, A);

fn split_at<'de, A: MapAccess<'de>>(mut map: A, tag: &'static str) -> Result<Split<A>, A::Error> {
    let mut before = Vec::new();
    let seed = PhantomData::<String>;
    while let Some(key) = map.next_key_seed(Unless { key: tag, seed })? {
        match key {
            Ok(name) => before.push((name, map.next_value()?)),
            Err(_) => {
                let value = map.next_value_seed(Lenient::<Option<String>>(PhantomData))?;
                return Ok((value, before, map));
            }
        }
    }
    Ok((None, before, map))
}

/// The value of `tag` in a JSON object of which only the first bytes are at hand, when they
/// hold it (the cut-off text makes the parse fail after the tag was seen; what was seen is kept).
pub(super) fn sniff(prefix: &[u8], tag: &'static str) -> Option<String> {
    struct Sniff<'a>(&'static str, &'a mut Option<String>);
    impl<'de> Visitor<'de> for Sniff<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
            *self.1 = split_at(map, self.0)?.0;
            Ok(())
        }
    }
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(prefix);
    let _ = de.deserialize_map(Sniff(tag, &mut found));
    found
}

/// Reads a JSON object told apart by its key `tag`, for a derive with `#[serde(remote =
/// "Self")]` (whose inherent `deserialize` takes this deserializer):
/// - an enum (externally tagged): the tag, a string, names the variant (unknown ones go to
///   the `#[serde(other)]` variant) and the other keys are its fields; no string tag is an
///   error;
/// - a struct: the tag is one of its fields, and `skip` of its value names a key whose value
///   is skipped unbuilt when it comes after the tag.
pub(super) struct ByTag<D> {
    de: D,
    tag: &'static str,
    skip: fn(&str) -> Option<&'static str>,
}

impl<D> ByTag<D> {
    pub(super) fn new(de: D, tag: &'static str) -> ByTag<D> {
        ByTag {
            de,
            tag,
            skip: |_| None,
        }
    }

    pub(super) fn skipping(self, skip: fn(&str) -> Option<&'static str>) -> ByTag<D> {
        ByTag { skip, ..self }
    }

    fn read<'de, V: Visitor<'de>>(self, as_enum: bool, visitor: V) -> Result<V::Value, D::Error>
    where
        D: Deserializer<'de>,
    {
        let (tag, skip) = (self.tag, self.skip);
        self.de.deserialize_map(Tagged {
            tag,
            skip,
            as_enum,
            visitor,
        })
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ByTag<D> {
    type Error = D::Error;

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.read(true, visitor)
    }
    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.read(false, visitor)
    }
    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

struct Tagged<V> {
    tag: &'static str,
    skip: fn(&str) -> Option<&'static str>,
    as_enum: bool,
    visitor: V,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Tagged<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a JSON object with a `{}`", self.tag)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        let (tag, mut before, rest) = split_at(map, self.tag)?;
        if self.as_enum {
            let name = tag.ok_or_else(|| de::Error::custom(format!("no string `{}`", self.tag)))?;
            let fields = Entries::new(before, rest);
            return self.visitor.visit_enum(Variant { name, fields });
        }
        let skip = tag.as_deref().and_then(self.skip);
        // Back among the fields; a tag that was not a string reads as absent.
        if let Some(tag) = tag {
            before.push((self.tag.to_owned(), Value::String(tag)));
        }
        let mut fields = Entries::new(before, rest);
        fields.skip = skip;
        self.visitor.visit_map(fields)
    }
}

struct Variant<A> {
    name: String,
    fields: Entries<A>,
}

impl<'de, A: MapAccess<'de>> EnumAccess<'de> for Variant<A> {
    type Error = A::Error;
    type Variant = Entries<A>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let variant = seed.deserialize(StringDeserializer::new(self.name))?;
        Ok((variant, self.fields))
    }
}

/// The chosen variant's fields, read by the derive.
impl<'de, A: MapAccess<'de>> VariantAccess<'de> for Entries<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        IgnoredAny.visit_map(self).map(|_| ())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        mut self,
        seed: T,
    ) -> Result<T::Value, A::Error> {
        seed.deserialize(&mut self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, _: usize, visitor: V) -> Result<V::Value, A::Error> {
        Err(de::Error::invalid_type(de::Unexpected::Map, &visitor))
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }
}
