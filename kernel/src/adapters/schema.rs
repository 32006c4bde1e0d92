//! Input schemas as each API takes them: the root an object, OpenAI's strict subset, Gemini's
//! OpenAPI subset. Every conversion says what it changed, at which JSON pointer of the input
//! schema; none of it loosens what Sluice accepts (a call's input is still checked against the
//! tool's own schema), it only changes what the model is shown.

use serde_json::{json, Map, Value};

use crate::error::escape_pointer;

/// One thing a conversion changed in a tool's input schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The API name of the tool.
    pub tool: String,
    /// JSON pointer into the tool's input schema.
    pub pointer: String,
    /// What changed, for a person.
    pub what: String,
}

/// Collects changes as a conversion walks a schema.
#[derive(Debug, Default)]
pub(crate) struct Notes(pub(crate) Vec<(String, String)>);

impl Notes {
    fn add(&mut self, pointer: &str, what: impl Into<String>) {
        self.0.push((pointer.to_owned(), what.into()));
    }
}

/// A tool's input schema as every API takes it: without `$schema`, and with `type: "object"` at
/// the root when it has none (the APIs refuse a root that does not say it is an object).
pub(crate) fn object_root(schema: &Map<String, Value>, notes: &mut Notes) -> Map<String, Value> {
    let mut s = schema.clone();
    s.remove("$schema");
    if !s.contains_key("type") && !s.contains_key("anyOf") && !s.contains_key("oneOf") {
        s.insert("type".into(), json!("object"));
        notes.add(
            "",
            "`type: \"object\"` added at the root: the APIs require it",
        );
    }
    s
}

/// The string formats OpenAI's strict mode takes.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Keywords OpenAI's strict mode does not take (they are dropped; Sluice still checks them).
const STRICT_UNSUPPORTED: &[&str] = &[
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "patternProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "default",
    "examples",
    "$comment",
    "$id",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// The schema as OpenAI's strict function calling takes it (structured outputs' subset): every
/// object closed (`additionalProperties: false`) with every property required, an optional
/// property made nullable instead (a `null` from the model is read back as absent, see
/// [`strip_optional_nulls`]), `oneOf` as `anyOf`, unsupported keywords dropped. `Err` says why
/// the schema cannot be strict (its root is not an object); the tool is then offered with
/// `strict: false`.
pub(crate) fn openai_strict(
    schema: &Map<String, Value>,
    notes: &mut Notes,
) -> Result<Value, String> {
    let mut root = schema.clone();
    let is_object = match root.get("type") {
        Some(Value::String(t)) => t == "object",
        None => !root.contains_key("anyOf") && !root.contains_key("oneOf"),
        _ => false,
    };
    if !is_object {
        return Err("its input schema's root is not an object".into());
    }
    root.insert("type".into(), json!("object"));
    strict_node(&mut root, "", notes);
    Ok(Value::Object(root))
}

fn strict_node(node: &mut Map<String, Value>, at: &str, notes: &mut Notes) {
    for key in STRICT_UNSUPPORTED {
        if node.remove(*key).is_some() {
            notes.add(at, format!("`{key}` dropped: strict mode does not take it"));
        }
    }
    if let Some(one_of) = node.remove("oneOf") {
        node.insert("anyOf".into(), one_of);
        notes.add(at, "`oneOf` offered as `anyOf`: strict mode has no `oneOf`");
    }
    if let Some(Value::String(f)) = node.get("format") {
        if !STRICT_FORMATS.contains(&f.as_str()) {
            notes.add(
                at,
                format!("`format: {f}` dropped: strict mode does not know it"),
            );
            node.remove("format");
        }
    }
    let objectish = node.contains_key("properties")
        || match node.get("type") {
            Some(Value::String(t)) => t == "object",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
            _ => false,
        };
    if objectish {
        close_object(node, at, notes);
    }
    for_each_subschema(node, at, |child, ptr| strict_node(child, ptr, notes));
}

/// Closes an object for strict mode: no additional properties, every property required (the
/// optional ones nullable).
fn close_object(node: &mut Map<String, Value>, at: &str, notes: &mut Notes) {
    if node.get("additionalProperties") != Some(&Value::Bool(false)) {
        notes.add(
            at,
            "`additionalProperties: false` set: strict mode takes only closed objects",
        );
        node.insert("additionalProperties".into(), Value::Bool(false));
    }
    let required: Vec<String> = node
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let mut all = Vec::new();
    if let Some(Value::Object(props)) = node.get_mut("properties") {
        for (name, prop) in props.iter_mut() {
            all.push(json!(name));
            if !required.contains(name) {
                let ptr = format!("{at}/properties/{}", escape_pointer(name));
                make_nullable(prop);
                notes.add(
                    &ptr,
                    "optional, so made required and nullable: strict mode requires every \
                     property (a null is read back as absent)",
                );
            }
        }
    }
    node.insert("required".into(), Value::Array(all));
}

/// Lets a schema also take `null`.
fn make_nullable(schema: &mut Value) {
    let Value::Object(s) = schema else {
        *schema = json!({"anyOf": [schema.clone(), {"type": "null"}]});
        return;
    };
    let has_choice = s.contains_key("anyOf") || s.contains_key("const");
    match s.get_mut("type") {
        Some(Value::String(t)) if !has_choice => {
            if t != "null" {
                let t = t.clone();
                s.insert("type".into(), json!([t, "null"]));
            }
        }
        Some(Value::Array(ts)) if !has_choice => {
            if !ts.iter().any(|t| t == "null") {
                ts.push(json!("null"));
            }
        }
        _ => {
            let inner = Value::Object(std::mem::take(s));
            s.insert("anyOf".into(), json!([inner, {"type": "null"}]));
            return;
        }
    }
    if let Some(Value::Array(e)) = s.get_mut("enum") {
        if !e.contains(&Value::Null) {
            e.push(Value::Null);
        }
    }
}

/// Calls `f` on every direct subschema (properties, items, anyOf branches, definitions).
fn for_each_subschema(
    node: &mut Map<String, Value>,
    at: &str,
    mut f: impl FnMut(&mut Map<String, Value>, &str),
) {
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(map)) = node.get_mut(key) {
            for (name, child) in map.iter_mut() {
                if let Value::Object(c) = child {
                    f(c, &format!("{at}/{key}/{}", escape_pointer(name)));
                }
            }
        }
    }
    if let Some(Value::Object(c)) = node.get_mut("items") {
        f(c, &format!("{at}/items"));
    }
    if let Some(Value::Array(list)) = node.get_mut("anyOf") {
        for (i, child) in list.iter_mut().enumerate() {
            if let Value::Object(c) = child {
                f(c, &format!("{at}/anyOf/{i}"));
            }
        }
    }
}

/// Removes, from a call's input, each `null` given for a property its schema neither requires
/// nor lets be `null`: how a model in OpenAI's strict mode says "absent". Other values are left
/// for the schema check to judge.
pub fn strip_optional_nulls(input: &mut Value, schema: &Value) {
    let (Value::Object(obj), Value::Object(s)) = (input, schema) else {
        return;
    };
    let required: Vec<&str> = s
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(Value::Object(props)) = s.get("properties") else {
        return;
    };
    obj.retain(|k, v| {
        !(v.is_null()
            && !required.contains(&k.as_str())
            && props.get(k).is_some_and(|p| !takes_null(p)))
    });
    for (k, v) in obj.iter_mut() {
        if let Some(p) = props.get(k) {
            strip_optional_nulls(v, p);
        }
    }
}

/// Whether a (property) schema visibly lets `null` through.
fn takes_null(schema: &Value) -> bool {
    match schema {
        Value::Bool(b) => *b,
        Value::Object(s) => {
            if s.is_empty() {
                return true;
            }
            let typed = match s.get("type") {
                Some(Value::String(t)) => t == "null",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "null"),
                None => !s.contains_key("enum") && !s.contains_key("const"),
                _ => false,
            };
            let branch = ["anyOf", "oneOf"].iter().any(|k| {
                s.get(*k)
                    .and_then(Value::as_array)
                    .is_some_and(|b| b.iter().any(takes_null))
            });
            let listed = s
                .get("enum")
                .and_then(Value::as_array)
                .is_some_and(|e| e.contains(&Value::Null))
                || s.get("const") == Some(&Value::Null);
            typed || branch || listed
        }
        _ => false,
    }
}

/// Keys Gemini's `Schema` takes as they are.
const GEMINI_KEEP: &[&str] = &[
    "title",
    "description",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "default",
    "nullable",
];

/// Keys dropped without a note: they say nothing the model needs.
const GEMINI_SILENT: &[&str] = &["$schema", "$id", "$comment", "$defs", "definitions"];

/// Deepest `$ref` inlining before a (recursive) reference is cut.
const MAX_REF_DEPTH: usize = 8;

/// The schema as Gemini's `FunctionDeclaration.parameters` takes it (its OpenAPI 3.0 subset):
/// types in capitals, `["T", "null"]` as `nullable`, local `$ref`s inlined, `oneOf` as `anyOf`,
/// `const` as a one-value `enum`, exclusive bounds as inclusive ones, and what the subset cannot
/// say dropped. `None` when the tool takes no parameters (Gemini refuses an `OBJECT` without
/// properties).
pub(crate) fn gemini(schema: &Map<String, Value>, notes: &mut Notes) -> Option<Value> {
    let defs: Map<String, Value> = ["$defs", "definitions"]
        .iter()
        .filter_map(|k| schema.get(*k).and_then(Value::as_object))
        .flat_map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())))
        .collect();
    let mut g = Gemini {
        defs: &defs,
        notes,
        stack: Vec::new(),
    };
    let mut root = g.node(&Value::Object(schema.clone()), "");
    if root.get("type").is_none() && root.get("anyOf").is_none() {
        if let Some(o) = root.as_object_mut() {
            o.insert("type".into(), json!("OBJECT"));
        }
    }
    let empty = root.get("type") == Some(&json!("OBJECT"))
        && root
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty);
    if empty {
        g.notes.add(
            "",
            "no `parameters`: the tool takes no properties, and Gemini refuses an OBJECT without any",
        );
        return None;
    }
    Some(root)
}

/// What Gemini can offer for "any value".
fn any_scalar() -> Value {
    json!({"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}, {"type": "BOOLEAN"}]})
}

/// An `OBJECT` with no properties: Gemini refuses it.
fn is_free_object(schema: &Value) -> bool {
    schema.get("type") == Some(&json!("OBJECT"))
        && schema
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
}

struct Gemini<'a> {
    defs: &'a Map<String, Value>,
    notes: &'a mut Notes,
    /// The `$ref`s being inlined, outermost first.
    stack: Vec<String>,
}

impl Gemini<'_> {
    fn node(&mut self, schema: &Value, at: &str) -> Value {
        let s = match schema {
            Value::Object(s) => s,
            Value::Bool(true) => return json!({}),
            _ => {
                self.notes
                    .add(at, "a schema that takes nothing offered as any value");
                return json!({});
            }
        };
        if let Some(Value::String(r)) = s.get("$ref") {
            return self.reference(r, s, at);
        }
        let mut out = Map::new();
        for (key, value) in s {
            let ptr = format!("{at}/{}", escape_pointer(key));
            match key.as_str() {
                k if GEMINI_KEEP.contains(&k) => {
                    out.insert(k.into(), value.clone());
                }
                k if GEMINI_SILENT.contains(&k) => {}
                "type" => self.types(value, &mut out, at),
                "format" => {}
                "enum" => match value.as_array() {
                    Some(vals) if vals.iter().all(Value::is_string) => {
                        out.insert("enum".into(), value.clone());
                    }
                    _ => self
                        .notes
                        .add(&ptr, "`enum` dropped: Gemini's enum takes strings only"),
                },
                "const" => match value {
                    Value::String(_) => {
                        out.insert("enum".into(), json!([value]));
                        self.notes
                            .add(&ptr, "`const` offered as a one-value `enum`");
                    }
                    _ => self
                        .notes
                        .add(&ptr, "`const` dropped: Gemini's enum takes strings only"),
                },
                "properties" => {
                    let required = s.get("required").and_then(Value::as_array);
                    let mut props = Map::new();
                    for (name, p) in value.as_object().into_iter().flatten() {
                        let pp = format!("{ptr}/{}", escape_pointer(name));
                        let converted = self.node(p, &pp);
                        let is_required =
                            required.is_some_and(|r| r.iter().any(|n| n == name.as_str()));
                        if is_free_object(&converted) && !is_required {
                            self.notes.add(
                                &pp,
                                "optional property left out: a free-form object, which Gemini \
                                 cannot describe (an OBJECT needs properties)",
                            );
                            continue;
                        }
                        props.insert(name.clone(), converted);
                    }
                    out.insert("properties".into(), Value::Object(props));
                }
                "required" => {}
                "items" if value.is_object() || value.is_boolean() => {
                    out.insert("items".into(), self.node(value, &ptr));
                }
                "anyOf" | "oneOf" => {
                    if key == "oneOf" {
                        self.notes
                            .add(&ptr, "`oneOf` offered as `anyOf`: Gemini has no `oneOf`");
                    }
                    let branches: Vec<Value> = value
                        .as_array()
                        .into_iter()
                        .flatten()
                        .enumerate()
                        .map(|(i, b)| self.node(b, &format!("{ptr}/{i}")))
                        .collect();
                    out.insert("anyOf".into(), Value::Array(branches));
                }
                "allOf" => match value.as_array().map(Vec::as_slice) {
                    Some([only]) => {
                        if let Value::Object(m) = self.node(only, &format!("{ptr}/0")) {
                            for (k, v) in m {
                                out.entry(k).or_insert(v);
                            }
                        }
                    }
                    _ => self.notes.add(
                        &ptr,
                        "`allOf` dropped: Gemini cannot combine schemas (Sluice still checks it)",
                    ),
                },
                "exclusiveMinimum" | "exclusiveMaximum" if value.is_number() => {
                    let bound = if key == "exclusiveMinimum" {
                        "minimum"
                    } else {
                        "maximum"
                    };
                    out.entry(bound).or_insert_with(|| value.clone());
                    self.notes.add(
                        &ptr,
                        format!("`{key}` offered as an inclusive `{bound}`: Gemini has no exclusive bounds"),
                    );
                }
                "examples" => {
                    if let Some(first) = value.as_array().and_then(|e| e.first()) {
                        out.insert("example".into(), first.clone());
                    }
                }
                _ => self.notes.add(
                    &ptr,
                    format!(
                        "`{key}` dropped: Gemini's schema cannot say it (Sluice still checks it)"
                    ),
                ),
            }
        }
        if let Some(Value::String(f)) = s.get("format") {
            self.format(f, &mut out, &format!("{at}/format"));
        }
        if let Some(Value::Object(props)) = out.get("properties") {
            let kept: Vec<Value> = s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|n| n.as_str().is_some_and(|n| props.contains_key(n)))
                .cloned()
                .collect();
            if !kept.is_empty() {
                out.insert("required".into(), Value::Array(kept));
            }
        }
        if out.get("type") == Some(&json!("ARRAY")) && !out.contains_key("items") {
            out.insert("items".into(), any_scalar());
            self.notes.add(
                at,
                "an array of anything offered as an array of strings, numbers or booleans: \
                 Gemini needs `items`",
            );
        }
        let untyped = ["type", "anyOf", "enum", "properties", "items"]
            .iter()
            .all(|k| !out.contains_key(*k));
        if untyped {
            if let Value::Object(any) = any_scalar() {
                out.extend(any);
            }
            self.notes.add(
                at,
                "any value offered as a string, number or boolean: Gemini's schema has no \
                 \"anything\"",
            );
        }
        if !out.contains_key("type") && !out.contains_key("anyOf") {
            if out.contains_key("enum") {
                out.insert("type".into(), json!("STRING"));
            } else if out.contains_key("properties") {
                out.insert("type".into(), json!("OBJECT"));
            } else if out.contains_key("items") {
                out.insert("type".into(), json!("ARRAY"));
            }
        }
        Value::Object(out)
    }

    /// `type`, in Gemini's capitals; `["T", "null"]` is `T` and `nullable`; several types are
    /// `anyOf`.
    fn types(&mut self, value: &Value, out: &mut Map<String, Value>, at: &str) {
        let names: Vec<&str> = match value {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let nullable = names.contains(&"null");
        let real: Vec<String> = names
            .iter()
            .filter(|t| **t != "null")
            .map(|t| t.to_ascii_uppercase())
            .collect();
        if nullable {
            out.insert("nullable".into(), json!(true));
        }
        match real.as_slice() {
            [] => {}
            [one] => {
                out.insert("type".into(), json!(one));
            }
            many => {
                let branches: Vec<Value> = many.iter().map(|t| json!({"type": t})).collect();
                out.insert("anyOf".into(), Value::Array(branches));
                self.notes.add(
                    &format!("{at}/type"),
                    "several types offered as `anyOf`: Gemini's `type` is one type",
                );
            }
        }
    }

    /// `format`, kept where Gemini knows it for the type.
    fn format(&mut self, f: &str, out: &mut Map<String, Value>, at: &str) {
        let ok = match out.get("type").and_then(Value::as_str) {
            Some("STRING") => matches!(f, "enum" | "date-time"),
            Some("INTEGER") => matches!(f, "int32" | "int64"),
            Some("NUMBER") => matches!(f, "float" | "double"),
            _ => false,
        };
        if ok {
            out.insert("format".into(), json!(f));
        } else {
            self.notes.add(
                at,
                format!("`format: {f}` dropped: Gemini does not know it here"),
            );
        }
    }

    /// A local `$ref` (`#/$defs/…`, `#/definitions/…`), inlined; a recursive or unknown one cut.
    fn reference(&mut self, r: &str, s: &Map<String, Value>, at: &str) -> Value {
        let name = r
            .strip_prefix("#/$defs/")
            .or_else(|| r.strip_prefix("#/definitions/"))
            .map(|n| n.replace("~1", "/").replace("~0", "~"));
        let target = name
            .as_ref()
            .and_then(|n| self.defs.get(n).map(|d| (n.clone(), d)));
        let Some((name, def)) = target else {
            self.notes.add(
                at,
                format!("`$ref: {r}` dropped: only local definitions are inlined"),
            );
            return json!({});
        };
        if self.stack.contains(&name) || self.stack.len() >= MAX_REF_DEPTH {
            self.notes.add(
                at,
                format!("`$ref: {r}` cut: it is recursive, and Gemini's schema cannot refer"),
            );
            return json!({"type": "OBJECT"});
        }
        self.stack.push(name);
        let mut inlined = self.node(def, at);
        self.stack.pop();
        if let (Value::Object(m), Some(Value::String(d))) = (&mut inlined, s.get("description")) {
            m.insert("description".into(), json!(d));
        }
        inlined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn strict_closes_objects_and_makes_optional_properties_nullable() {
        let mut notes = Notes::default();
        let s = openai_strict(
            &obj(json!({"type": "object", "properties": {
                "a": {"type": "string", "minLength": 1},
                "b": {"type": "integer", "enum": [1, 2]},
                "c": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "d": {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}
            }, "required": ["a"]})),
            &mut notes,
        )
        .unwrap();
        assert_eq!(
            s,
            json!({"type": "object", "additionalProperties": false,
                   "required": ["a", "b", "c", "d"], "properties": {
                "a": {"type": "string"},
                "b": {"type": ["integer", "null"], "enum": [1, 2, null]},
                "c": {"anyOf": [{"anyOf": [{"type": "string"}, {"type": "number"}]}, {"type": "null"}]},
                "d": {"type": ["object", "null"], "properties": {"x": {"type": "boolean"}},
                      "required": ["x"], "additionalProperties": false}
            }})
        );
        let pointers: Vec<&str> = notes.0.iter().map(|(p, _)| p.as_str()).collect();
        assert!(pointers.contains(&"/properties/a"), "{pointers:?}"); // minLength dropped
        assert!(pointers.contains(&"/properties/b"));
        assert!(openai_strict(&obj(json!({"type": "array"})), &mut notes).is_err());
    }

    #[test]
    fn nulls_for_optional_properties_read_as_absent() {
        let schema = json!({"type": "object", "required": ["a"], "properties": {
            "a": {"type": ["string", "null"]}, "b": {"type": "string"},
            "c": {"type": "object", "properties": {"d": {"type": "integer"}}}}});
        let mut input = json!({"a": null, "b": null, "c": {"d": null}});
        strip_optional_nulls(&mut input, &schema);
        assert_eq!(input, json!({"a": null, "c": {}}));
    }

    #[test]
    fn gemini_takes_its_subset() {
        let mut notes = Notes::default();
        let g = gemini(
            &obj(
                json!({"type": "object", "$defs": {"P": {"type": "string", "format": "uri"}},
                "properties": {
                    "p": {"$ref": "#/$defs/P", "description": "a page"},
                    "n": {"type": ["integer", "null"], "exclusiveMinimum": 0},
                    "k": {"const": "fixed"},
                    "m": {"type": "object", "additionalProperties": {"type": "string"}}
                }, "required": ["p", "zz"], "additionalProperties": false}),
            ),
            &mut notes,
        )
        .unwrap();
        assert_eq!(
            g,
            json!({"type": "OBJECT", "required": ["p"], "properties": {
                "p": {"type": "STRING", "description": "a page"},
                "n": {"type": "INTEGER", "nullable": true, "minimum": 0},
                "k": {"type": "STRING", "enum": ["fixed"]}
            }})
        );
        assert!(notes.0.len() >= 5, "{notes:?}");
        assert!(gemini(&obj(json!({"type": "object"})), &mut notes).is_none());
        // A recursive reference is cut, not followed forever.
        let r = gemini(
            &obj(
                json!({"type": "object", "properties": {"t": {"$ref": "#/$defs/T"}},
                "$defs": {"T": {"type": "object", "properties": {"kids": {"type": "array",
                    "items": {"$ref": "#/$defs/T"}}}}}}),
            ),
            &mut notes,
        )
        .unwrap();
        assert_eq!(
            r["properties"]["t"]["properties"]["kids"]["items"],
            json!({"type": "OBJECT"})
        );
    }
}
