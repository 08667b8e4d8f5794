//! docs/experiment-template.yaml is a valid experiment that uses every key the experiment
//! schema accepts, and the example in docs/your-own-experiment.md is a valid experiment.
//!
//! Exhaustiveness is checked against the schema itself, not a second hand-kept list of keys:
//! [`schema`] runs `Experiment`'s own `Deserialize` implementation against a recording
//! deserializer. serde's derive hands `deserialize_struct` every field name of a struct (as
//! spelled in the file, after renames) and `deserialize_enum` every variant name; the recorder
//! notes them, then feeds the struct's visitor every one of its fields so that it descends
//! into nested structs and enums as well, noting which field leads to which type. The
//! template's YAML is then walked along those edges, and every (struct, field) and every enum
//! value the schema has must occur in it. A field added to any struct of the schema, or a
//! new claim or mechanism kind, fails this test until the template has it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use echolab_core::experiment::Experiment;
use serde::de::value::{Error, StrDeserializer};
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};
use serde::Deserialize;

fn template_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/experiment-template.yaml")
}

/// The schema as serde sees it.
#[derive(Debug, Default)]
struct Schema {
    /// Struct name -> its fields.
    structs: BTreeMap<&'static str, Vec<&'static str>>,
    /// Enum name -> its variants.
    enums: BTreeMap<&'static str, Vec<&'static str>>,
    /// (struct, field) -> the struct or enum its value is (through Option and Vec).
    edges: BTreeMap<(&'static str, &'static str), &'static str>,
    /// For values read with `deserialize_any` (the unit types: durations, sizes,
    /// percentages, tolerances): which of [`ANY_CANDIDATES`] the field accepts, learnt by
    /// retrying the walk when one is refused.
    any_choice: BTreeMap<(&'static str, &'static str), usize>,
    /// The field whose `deserialize_any` value was refused in this walk.
    refused: Option<(&'static str, &'static str)>,
}

/// Values offered to a `deserialize_any` field, in turn, until its type accepts one.
const ANY_CANDIDATES: [&str; 4] = ["0", "5%", "1s", "1"];

/// A deserializer that produces a value of any shape the visitor asks for, recording what it
/// is asked. `parent` is the (struct, field) whose value it is.
struct Recorder<'a> {
    schema: &'a RefCell<Schema>,
    parent: Option<(&'static str, &'static str)>,
}

impl<'a> Recorder<'a> {
    fn child(&self, parent: Option<(&'static str, &'static str)>) -> Recorder<'a> {
        Recorder {
            schema: self.schema,
            parent,
        }
    }

    fn edge(&self, to: &'static str) {
        if let Some(p) = self.parent {
            self.schema.borrow_mut().edges.insert(p, to);
        }
    }
}

impl<'de> Deserializer<'de> for Recorder<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        let key = self.parent.unwrap_or(("", ""));
        let choice = *self.schema.borrow().any_choice.get(&key).unwrap_or(&0);
        let candidate = ANY_CANDIDATES
            .get(choice)
            .ok_or_else(|| de::Error::custom(format!("{key:?}: no candidate value is accepted")))?;
        let r = v.visit_str(candidate);
        if r.is_err() {
            self.schema.borrow_mut().refused.get_or_insert(key);
        }
        r
    }
    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_bool(false)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_u64(1)
    }
    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_f64(1.0)
    }
    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_str("x")
    }
    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_str("x")
    }
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        v.visit_some(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        // One element, so that a list of structs is descended into.
        v.visit_seq(OneElement(Some(self)))
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
        // Free-form maps (a figure's `values`) have no schema of their own.
        v.visit_map(Fields {
            recorder: self.child(None),
            owner: "",
            fields: &[],
            next: 0,
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        self.edge(name);
        self.schema
            .borrow_mut()
            .structs
            .insert(name, fields.to_vec());
        v.visit_map(Fields {
            recorder: self.child(None),
            owner: name,
            fields,
            next: 0,
        })
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Error> {
        self.edge(name);
        self.schema
            .borrow_mut()
            .enums
            .insert(name, variants.to_vec());
        v.visit_enum(FirstVariant(variants[0]))
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u32 u128 f32 char bytes byte_buf unit unit_struct
        newtype_struct tuple tuple_struct identifier ignored_any
    }
}

/// A struct's fields, each once, as a map.
struct Fields<'a> {
    recorder: Recorder<'a>,
    owner: &'static str,
    fields: &'static [&'static str],
    next: usize,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(&field) = self.fields.get(self.next) else {
            return Ok(None);
        };
        let key: StrDeserializer<'_, Error> = field.into_deserializer();
        seed.deserialize(key).map(Some)
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, Error> {
        let field = self.fields[self.next];
        self.next += 1;
        seed.deserialize(self.recorder.child(Some((self.owner, field))))
    }
}

/// A list of one element.
struct OneElement<'a>(Option<Recorder<'a>>);

impl<'de> SeqAccess<'de> for OneElement<'_> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0.take().map(|r| seed.deserialize(r)).transpose()
    }
}

/// An enum's first variant; every enum of the schema has unit variants only.
struct FirstVariant(&'static str);

impl<'de> EnumAccess<'de> for FirstVariant {
    type Error = Error;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let name: StrDeserializer<'_, Error> = self.0.into_deserializer();
        Ok((seed.deserialize(name)?, self))
    }
}

impl<'de> VariantAccess<'de> for FirstVariant {
    type Error = Error;
    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _: T) -> Result<T::Value, Error> {
        Err(de::Error::custom(
            "the schema's enums have unit variants only",
        ))
    }
    fn tuple_variant<V: Visitor<'de>>(self, _: usize, _: V) -> Result<V::Value, Error> {
        Err(de::Error::custom(
            "the schema's enums have unit variants only",
        ))
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Error> {
        Err(de::Error::custom(
            "the schema's enums have unit variants only",
        ))
    }
}

/// The experiment schema: every struct with its fields, every enum with its variants, and
/// which field leads to which, from `Experiment`'s `Deserialize` implementation.
fn schema() -> Schema {
    let schema = RefCell::new(Schema::default());
    // Each refused `deserialize_any` value moves that field to its next candidate; the walk
    // ends when every value is accepted (the fields are all recorded by then).
    for _ in 0..32 {
        {
            let mut s = schema.borrow_mut();
            s.refused = None;
        }
        let result = Experiment::deserialize(Recorder {
            schema: &schema,
            parent: None,
        });
        let refused = schema.borrow().refused;
        match (result, refused) {
            (Ok(_), _) => return schema.into_inner(),
            (Err(_), Some(key)) => *schema.borrow_mut().any_choice.entry(key).or_insert(0) += 1,
            (Err(e), None) => panic!("the recording deserializer failed: {e}"),
        }
    }
    panic!("the recording deserializer did not settle")
}

/// What the template's YAML uses: (struct, field) pairs and (enum, value) pairs.
#[derive(Debug, Default)]
struct Used {
    fields: BTreeSet<(String, String)>,
    values: BTreeSet<(String, String)>,
}

/// Walks `v`, a value of schema type `ty`, along the schema's edges.
fn walk(schema: &Schema, ty: &str, v: &serde_yaml::Value, used: &mut Used) {
    match v {
        serde_yaml::Value::Sequence(items) => {
            for item in items {
                walk(schema, ty, item, used);
            }
        }
        serde_yaml::Value::Mapping(m) if schema.structs.contains_key(ty) => {
            for (k, child) in m {
                let k = k.as_str().expect("string keys");
                used.fields.insert((ty.to_string(), k.to_string()));
                let to = schema
                    .edges
                    .iter()
                    .find(|((s, f), _)| *s == ty && *f == k)
                    .map(|(_, to)| *to);
                if let Some(to) = to {
                    walk(schema, to, child, used);
                }
            }
        }
        serde_yaml::Value::String(s) if schema.enums.contains_key(ty) => {
            used.values.insert((ty.to_string(), s.clone()));
        }
        _ => {}
    }
}

#[test]
fn the_template_loads_as_a_users_experiment_does() {
    // The launcher's own call (echolab-up's catalog::load_experiment): read, parse, validate.
    let e = Experiment::load(&template_path()).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(e.name, "experiment-template", "name is the file's stem");
    // Small enough to run in about a minute: 13 cells (2 of them probes), timed windows of at most 0.3 s, and at
    // least the 0.1 s below which the report calls a cell too short to be stable.
    assert_eq!(e.cells().len(), 13);
    // A server of your own is a mapping, which the schema walk (offering strings) does not
    // reach: held here instead.
    let own = e.custom_servers();
    assert_eq!(own.len(), 1, "the template shows a server of your own");
    assert!(!own[0].command.is_empty() && own[0].port > 0);
    let window = e.window.expect("the template sets window").0;
    assert!(
        window >= std::time::Duration::from_millis(100)
            && window <= std::time::Duration::from_secs(1)
    );
    assert!(e.max_repetitions() <= 3);
    for c in e.cells() {
        if let Some(d) = c.duration {
            assert!(d.0 <= std::time::Duration::from_millis(300), "{}", c.id());
        }
    }
}

#[test]
fn the_template_uses_every_key_and_value_of_the_schema() {
    let schema = schema();
    // The recorder must have seen the whole schema, or the comparison below proves nothing.
    for s in [
        "Experiment",
        "MatrixBlock",
        "ServerOpts",
        "ClientOpts",
        "Reference",
    ] {
        assert!(
            schema.structs.contains_key(s),
            "{s} not reached: {:?}",
            schema.structs.keys()
        );
    }
    for s in [
        "ReferenceFigure",
        "CellSelector",
        "ReferenceClaim",
        "Bound",
        "SeedSetup",
        "Mechanism",
    ] {
        assert!(
            schema.structs.contains_key(s),
            "{s} not reached: {:?}",
            schema.structs.keys()
        );
    }
    assert_eq!(
        schema.enums["ClaimKind"],
        ["magnitude", "direction", "shape", "spread"]
    );
    assert!(schema.enums["MechanismKind"].contains(&"syscall-time"));

    let text = std::fs::read_to_string(template_path()).unwrap();
    let yaml: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let mut used = Used::default();
    walk(&schema, "Experiment", &yaml, &mut used);

    let missing_fields: Vec<String> = schema
        .structs
        .iter()
        .flat_map(|(s, fields)| fields.iter().map(move |f| (*s, *f)))
        .filter(|(s, f)| !used.fields.contains(&(s.to_string(), f.to_string())))
        .map(|(s, f)| format!("{s}.{f}"))
        .collect();
    assert!(
        missing_fields.is_empty(),
        "docs/experiment-template.yaml lacks these keys of the schema (struct.field): {missing_fields:?}"
    );

    // Claim and mechanism kinds must each be used, so that each is shown valid in a real claim
    // or mechanism. Other enums (bench.engine, setup.timing, setup.client) have one value per
    // file; a value the template does not use must be named in its comments.
    let comments: String = text
        .lines()
        .filter_map(|l| l.find('#').map(|i| &l[i..]))
        .collect::<Vec<_>>()
        .join("\n");
    let named = |word: &str| {
        comments
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .any(|w| w == word)
    };
    let mut missing_values = Vec::new();
    for (e, variants) in &schema.enums {
        for v in variants {
            let is_used = used.values.contains(&(e.to_string(), v.to_string()));
            let must_be_used = matches!(*e, "ClaimKind" | "MechanismKind");
            if !(is_used || (!must_be_used && named(v))) {
                missing_values.push(format!("{e}::{v}"));
            }
        }
    }
    assert!(
        missing_values.is_empty(),
        "docs/experiment-template.yaml lacks these values (claim and mechanism kinds used, the rest at least named in a comment): {missing_values:?}"
    );
}

/// The short example of docs/your-own-experiment.md, verbatim between its markers.
#[test]
fn the_walkthrough_example_is_a_valid_experiment() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/your-own-experiment.md"),
    )
    .unwrap();
    let start = doc
        .find("<!-- example:begin -->\n```yaml\n")
        .expect("the example's begin marker")
        + "<!-- example:begin -->\n```yaml\n".len();
    let end = start
        + doc[start..]
            .find("```\n<!-- example:end -->")
            .expect("the example's end marker");
    let e = Experiment::parse(&doc[start..end], "your-own-experiment.md")
        .unwrap_or_else(|err| panic!("{err}"));
    assert!(e.reference.claims.is_empty() && e.reference.source.is_empty());
    assert!(e.window.is_some());
    assert_eq!(e.cells().len(), 4);
}
