//! The serde path of an upload split: every body `fast` does not take,
//! every problem named in the words the element-by-element conversion uses.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use super::fast::vector_numbers;
use super::types::{Matrix, Problem, Split};

/// `split_upload` by serde: every body it takes, every problem named.
pub fn split_with_serde(body: &[u8]) -> Option<Split> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let mut top = deserializer.deserialize_map(TopVisitor).ok()?;
    deserializer.end().ok()?;
    let field = match (top.contains_key("items"), top.contains_key("vectors")) {
        (true, false) => "items",
        (false, true) => "vectors",
        _ => return None,
    };
    let Some(TopValue::Items(Some(mut objects))) = top.remove(field) else {
        return None;
    };
    let vectors = take_vectors(field, &mut objects)?;

    let mut rest = Vec::with_capacity(body.len() / 8 + 64);
    rest.push(b'{');
    push_key(&mut rest, field);
    rest.push(b'[');
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            rest.push(b',');
        }
        push_object(&mut rest, object);
    }
    rest.push(b']');
    for (key, value) in &top {
        let TopValue::Raw(value) = value else {
            unreachable!("only items and vectors are read as items")
        };
        rest.push(b',');
        push_key(&mut rest, key);
        rest.extend_from_slice(value.get().as_bytes());
    }
    rest.push(b'}');
    Some(Split {
        field,
        rest,
        vectors,
    })
}

/// An item's keys and their raw JSON values (the last of a repeated key wins,
/// as in Python's parse).
type Object<'a> = BTreeMap<String, &'a RawValue>;

enum TopValue<'a> {
    Raw(&'a RawValue),
    /// `items` or `vectors`: None when not an array of objects.
    Items(Option<Vec<Object<'a>>>),
}

/// The body's top level, read once: `items` and `vectors` as arrays of
/// objects, everything else as raw text.
struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = BTreeMap<String, TopValue<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut top = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = if key == "items" || key == "vectors" {
                TopValue::Items(map.next_value_seed(ItemsSeed)?)
            } else {
                TopValue::Raw(map.next_value()?)
            };
            top.insert(key, value);
        }
        Ok(top)
    }
}

struct ItemsSeed;

impl<'de> DeserializeSeed<'de> for ItemsSeed {
    type Value = Option<Vec<Object<'de>>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(ItemsVisitor)
    }
}

/// The scalar visits of a visitor whose value is None for anything but the
/// one kind of value it reads.
macro_rules! none_for_scalars {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    };
}

/// An array of objects, or None for anything else (read to its end).
struct ItemsVisitor;

impl<'de> Visitor<'de> for ItemsVisitor {
    type Value = Option<Vec<Object<'de>>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of objects")
    }
    none_for_scalars!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut objects = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        let mut all_objects = true;
        while let Some(item) = seq.next_element_seed(ObjectSeed)? {
            match item {
                Some(object) => objects.push(object),
                None => all_objects = false,
            }
        }
        Ok(all_objects.then_some(objects))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

struct ObjectSeed;

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = Option<Object<'de>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(ObjectVisitor)
    }
}

/// An object's entries as raw text, or None for anything else.
struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Option<Object<'de>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    none_for_scalars!();
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = BTreeMap::new();
        while let Some((key, value)) = map.next_entry::<String, &RawValue>()? {
            object.insert(key, value);
        }
        Ok(Some(object))
    }
}

fn push_key(out: &mut Vec<u8>, key: &str) {
    out.extend_from_slice(
        serde_json::to_string(key)
            .expect("a string serialises")
            .as_bytes(),
    );
    out.push(b':');
}

fn push_object(out: &mut Vec<u8>, object: &Object) {
    out.push(b'{');
    for (n, (key, value)) in object.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        push_key(out, key);
        out.extend_from_slice(value.get().as_bytes());
    }
    out.push(b'}');
}

/// Removes each item's `vector` (a null one counts as absent) and parses
/// them into one matrix. Every vector is removed and read even after a
/// problem: the rest of the body is validated first, and a number JSON
/// cannot hold (1e999) anywhere makes the whole body malformed (None).
fn take_vectors(field: &str, objects: &mut [Object]) -> Option<Result<Option<Matrix>, Problem>> {
    let raws: Vec<Option<&RawValue>> = objects
        .iter_mut()
        .map(|o| o.remove("vector").filter(|v| v.get() != "null"))
        .collect();
    if raws.iter().all(Option::is_none) {
        return Some(Ok(None));
    }
    let mut first_problem = raws.iter().position(Option::is_none).map(|i| {
        Problem::Mixed(format!(
            "{field}[{i}]: either every item carries a vector or none does"
        ))
    });
    let name = |i: usize| format!("{field}[{i}].vector");
    let mut values: Vec<f32> = Vec::new();
    let mut scratch: Vec<f32> = Vec::new();
    let mut dim = 0usize;
    for (i, raw) in raws.iter().flatten().enumerate() {
        let text = raw.get();
        if !text.starts_with('[') {
            serde_json::from_str::<Value>(text).ok()?;
            first_problem.get_or_insert_with(|| {
                Problem::NotNumbers(format!("{} must be a list of numbers", name(i)))
            });
            continue;
        }
        // Once there is a problem, rows are read only to find malformed numbers.
        let buffer = if first_problem.is_none() {
            &mut values
        } else {
            &mut scratch
        };
        let start = buffer.len();
        let problem = if vector_numbers(text.as_bytes(), buffer) {
            None
        } else {
            // not all float32 numbers: serde reads the row again and names why
            buffer.truncate(start);
            let row = Row {
                values: buffer,
                name: &name,
                index: i,
            };
            serde_json::Deserializer::from_str(text)
                .deserialize_seq(row)
                .ok()?
                .err()
        };
        if first_problem.is_some() {
            scratch.clear();
            continue;
        }
        let len = match problem {
            None => values.len() - start,
            Some(_) => serde_json::from_str::<Vec<IgnoredAny>>(text).ok()?.len(),
        };
        if i == 0 {
            dim = len;
            values.reserve(raws.len().saturating_sub(1) * dim);
        } else if len != dim {
            first_problem = Some(Problem::Dimension(format!(
                "{} has {len} dimensions, {} has {dim}",
                name(i),
                name(0)
            )));
            continue;
        }
        first_problem = problem;
    }
    Some(match first_problem {
        Some(problem) => Err(problem),
        None => Ok(Some(Matrix {
            rows: raws.len(),
            dim,
            values,
        })),
    })
}

/// One vector's numbers, appended to the matrix; the first element that is
/// not a float32 number stops it with a problem (the rest is skipped).
struct Row<'a, F: Fn(usize) -> String> {
    values: &'a mut Vec<f32>,
    name: &'a F,
    index: usize,
}

impl<'de, F: Fn(usize) -> String> Visitor<'de> for Row<'_, F> {
    type Value = Result<(), Problem>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of numbers")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut j = 0usize;
        while let Some(element) = seq.next_element_seed(ElementSeed)? {
            let problem = match element {
                Element::Number(value) => {
                    let narrowed = value as f32;
                    if narrowed.is_finite() {
                        self.values.push(narrowed);
                        j += 1;
                        continue;
                    }
                    Problem::NonFinite(format!(
                        "{}[{j}] = {value:e} is outside the float32 range",
                        (self.name)(self.index)
                    ))
                }
                Element::Other(kind) => Problem::NotNumbers(format!(
                    "{}[{j}] must be a number, got {kind}",
                    (self.name)(self.index)
                )),
            };
            // Read on, not skipped: a number JSON cannot hold still fails the body.
            while seq.next_element::<Value>()?.is_some() {}
            return Ok(Err(problem));
        }
        Ok(Ok(()))
    }
}

/// A vector element: a number, or the Python type name of what came instead
/// (the words the element-by-element conversion of parsed JSON used).
enum Element {
    Number(f64),
    Other(&'static str),
}

struct ElementSeed;

impl<'de> DeserializeSeed<'de> for ElementSeed {
    type Value = Element;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Element, D::Error> {
        deserializer.deserialize_any(ElementVisitor)
    }
}

struct ElementVisitor;

impl<'de> Visitor<'de> for ElementVisitor {
    type Value = Element;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Element, E> {
        Ok(Element::Number(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Element, E> {
        Ok(Element::Number(v as f64))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Element, E> {
        Ok(Element::Number(v as f64))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Element, E> {
        Ok(Element::Other("bool"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Element, E> {
        Ok(Element::Other("str"))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Element, E> {
        Ok(Element::Other("NoneType"))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Element, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        Ok(Element::Other("list"))
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Element, A::Error> {
        while map.next_entry::<Value, Value>()?.is_some() {}
        Ok(Element::Other("dict"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upload::split_upload;

    fn split(body: &str) -> Split {
        split_with_serde(body.as_bytes()).expect("handled")
    }

    fn rest(s: &Split) -> serde_json::Value {
        serde_json::from_slice(&s.rest).unwrap()
    }

    #[test]
    fn vectors_become_one_matrix_and_leave_the_rest() {
        let s = split(
            r#"{"store_mode":"vector","items":[{"id":"a","vector":[1,2.5,-3e-2],"metadata":{"k":"v"}},
                {"vector":[4,5,6],"id":"b\u00e9","text":"x \"q\""}]}"#,
        );
        assert_eq!(s.field, "items");
        let m = s.vectors.clone().unwrap().unwrap();
        assert_eq!((m.rows, m.dim), (2, 3));
        assert_eq!(m.values, vec![1.0, 2.5, -0.03, 4.0, 5.0, 6.0]);
        assert_eq!(
            rest(&s),
            serde_json::json!({"store_mode": "vector", "items": [
                {"id": "a", "metadata": {"k": "v"}}, {"id": "bé", "text": "x \"q\""}]})
        );
    }

    #[test]
    fn legacy_vectors_field_and_no_vectors_at_all() {
        let s = split(r#"{"vectors":[{"id":"a","vector":[1]}]}"#);
        assert_eq!(s.field, "vectors");
        assert_eq!(s.vectors.unwrap().unwrap().values, vec![1.0]);
        let s = split(r#"{"items":[{"id":"a","text":"t"},{"id":"b","vector":null}]}"#);
        assert_eq!(s.vectors, Ok(None));
        assert_eq!(rest(&s)["items"][1], serde_json::json!({"id": "b"}));
    }

    #[test]
    fn not_handled_falls_back() {
        for body in [
            "[1]",
            "{\"items\": 3}",
            "{\"x\": 1}",
            "{\"items\": [",
            "nope",
        ] {
            assert!(split_upload(body.as_bytes()).is_none(), "{body}");
        }
    }

    #[test]
    fn problems_name_the_item() {
        let problem = |body: &str| split(body).vectors.unwrap_err().message().to_string();
        assert_eq!(
            problem(r#"{"items":[{"vector":[1]},{"id":"b"}]}"#),
            "items[1]: either every item carries a vector or none does"
        );
        assert_eq!(
            problem(r#"{"items":[{"vector":[1,true]}]}"#),
            "items[0].vector[1] must be a number, got bool"
        );
        assert_eq!(
            problem(r#"{"items":[{"vector":[1]},{"vector":["1"]}]}"#),
            "items[1].vector[0] must be a number, got str"
        );
        assert_eq!(
            problem(r#"{"items":[{"vector":[[1],null]}]}"#),
            "items[0].vector[0] must be a number, got list"
        );
        assert_eq!(
            problem(r#"{"items":[{"vector":[1,2]},{"vector":[1,{},3]}]}"#),
            "items[1].vector has 3 dimensions, items[0].vector has 2"
        );
        assert_eq!(
            problem(r#"{"items":[{"vector":[1,2]},{"vector":[1,1e39]}]}"#),
            "items[1].vector[1] = 1e39 is outside the float32 range"
        );
        assert_eq!(
            problem(r#"{"vectors":[{"vector":"1,2"}]}"#),
            "vectors[0].vector must be a list of numbers"
        );
    }

    #[test]
    fn a_number_json_cannot_hold_in_any_vector_falls_back() {
        for body in [
            r#"{"items":[{"vector":[1e999]}]}"#,
            r#"{"items":[{"vector":[true,1e999]}]}"#,
            r#"{"items":[{"vector":[[1e999]]}]}"#,
            r#"{"items":[{"vector":[1]},{"vector":[1,2]},{"vector":[-1e999]}]}"#,
            r#"{"items":[{"vector":"x"},{"vector":{"a":1e999}}]}"#,
        ] {
            assert!(split_upload(body.as_bytes()).is_none(), "{body}");
        }
    }

    #[test]
    fn a_problem_still_strips_every_vector() {
        let s = split(r#"{"items":[{"id":"a","vector":[true]},{"id":"b","vector":[1]}]}"#);
        assert!(s.vectors.is_err());
        assert_eq!(
            rest(&s),
            serde_json::json!({"items": [{"id": "a"}, {"id": "b"}]})
        );
    }

    #[test]
    fn numbers_round_like_python_floats_narrowed() {
        let s = split(r#"{"items":[{"vector":[0.1,1e-50,3.4028235e38,16777217,-0,-0.0,-0e1]}]}"#);
        let values = s.vectors.unwrap().unwrap().values;
        assert_eq!(
            values,
            vec![0.1f64 as f32, 0.0, f32::MAX, 16777216.0, 0.0, -0.0, -0.0]
        );
        let signs: Vec<bool> = values[4..].iter().map(|v| v.is_sign_negative()).collect();
        assert_eq!(signs, vec![false, true, true]);
    }
}
