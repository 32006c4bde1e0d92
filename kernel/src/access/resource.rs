//! Resource templates: a manifest's `resource` text with `{name}` placeholders, expanded against
//! a call's input into pattern texts whose values stay literal.

use serde_json::Value;

use super::pattern;
use crate::model::template::{self, TextPart as Part};

/// The most combinations several array placeholders in one resource may produce.
pub const MAX_COMBINATIONS: usize = 64;

/// A parsed resource template such as `fs:/repo/{path}` or `kv:{bucket}/{key}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceTemplate {
    /// Literal parts are pattern text (escapes kept).
    parts: Vec<Part>,
}

/// Why a resource template is not well formed (the same error as a text template's).
pub type TemplateError = template::TemplateSyntaxError;

impl ResourceTemplate {
    /// Parses a template: pattern text with `{name}` placeholders (name: ASCII letters, digits,
    /// `_`). A `{` that does not open a placeholder, a lone `}` or a trailing `\` is an error;
    /// write `\{`, `\}`, `\\` for the literal characters.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        Ok(ResourceTemplate {
            parts: template::scan(text, true)?,
        })
    }

    /// The distinct placeholder names, in order of first use.
    pub fn placeholders(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for p in &self.parts {
            if let Part::Var(n) = p {
                if !names.contains(&n.as_str()) {
                    names.push(n);
                }
            }
        }
        names
    }

    /// Expands the template against `input`, giving zero or more pattern texts (see the module
    /// docs for the rules).
    pub fn expand(&self, input: &Value) -> Vec<String> {
        // The common case, without the general machinery: one placeholder, one scalar value.
        if let [Part::Lit(head), Part::Var(name)] = self.parts.as_slice() {
            if let Some(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) =
                input.get(name)
            {
                let mut s = String::with_capacity(head.len() + 16);
                s.push_str(head);
                match v {
                    Value::String(v) => {
                        for c in v.chars() {
                            pattern::push_literal_char(&mut s, c);
                        }
                    }
                    v => s.push_str(&pattern::escape(&v.to_string())),
                }
                return vec![s];
            }
        }
        let names = self.placeholders();
        if names.is_empty() {
            return vec![self.render(&[], &[])];
        }
        let mut values: Vec<Binding> = names.iter().map(|n| bind(input.get(*n))).collect();
        if values
            .iter()
            .any(|b| matches!(b, Binding::Many(v) if v.is_empty()))
        {
            return Vec::new();
        }
        let combos = values.iter().try_fold(1usize, |acc, b| match b {
            Binding::Many(v) => acc.checked_mul(v.len()),
            _ => Some(acc),
        });
        if combos.is_none_or(|n| n > MAX_COMBINATIONS) {
            for b in &mut values {
                if matches!(b, Binding::Many(_)) {
                    *b = Binding::One("*".into());
                }
            }
        }
        // An odometer over the array placeholders.
        let mut digits = vec![0usize; values.len()];
        let mut out = Vec::new();
        loop {
            let chosen: Vec<&str> = values
                .iter()
                .zip(&digits)
                .map(|(b, d)| match b {
                    Binding::One(s) => s.as_str(),
                    // Each digit counts below its array's length (the odometer below).
                    Binding::Many(v) => v.get(*d).map_or("", String::as_str),
                })
                .collect();
            out.push(self.render(&names, &chosen));
            // The next reading: the first array whose digit can go up does, the ones before it
            // wrap to 0; when none can, every combination has been rendered.
            let mut turned = false;
            for (value, digit) in values.iter().zip(digits.iter_mut()) {
                if let Binding::Many(v) = value {
                    *digit += 1;
                    if *digit < v.len() {
                        turned = true;
                        break;
                    }
                    *digit = 0;
                }
            }
            if !turned {
                return out;
            }
        }
    }

    fn render(&self, names: &[&str], chosen: &[&str]) -> String {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit(t) => s.push_str(t),
                Part::Var(n) => {
                    if let Some(c) = names
                        .iter()
                        .position(|x| x == n)
                        .and_then(|i| chosen.get(i))
                    {
                        s.push_str(c);
                    }
                }
            }
        }
        s
    }
}

/// What a placeholder stands for: one pattern text, or one per array element.
enum Binding {
    One(String),
    Many(Vec<String>),
}

/// A scalar as escaped pattern text; anything else as `*`.
fn scalar_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => pattern::escape(s),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => pattern::escape(&v.to_string()),
        _ => "*".into(),
    }
}

fn bind(v: Option<&Value>) -> Binding {
    match v {
        Some(Value::Array(items)) => {
            Binding::Many(items.iter().map(|i| scalar_text(Some(i))).collect())
        }
        v => Binding::One(scalar_text(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn texts(t: &str, input: Value) -> Vec<String> {
        ResourceTemplate::parse(t).unwrap().expand(&input)
    }

    #[test]
    fn values_are_escaped_literals() {
        assert_eq!(texts("kv:{k}", json!({"k": "a*?"})), vec!["kv:a\\*\\?"]);
        assert_eq!(texts("kv:{k}", json!({"k": 4.5})), vec!["kv:4.5"]);
        assert_eq!(texts("kv:{k}", json!({"k": true})), vec!["kv:true"]);
        assert_eq!(texts("kv:{k}", json!({"k": {"x": 1}})), vec!["kv:*"]);
        assert_eq!(texts("kv:{k}", json!({})), vec!["kv:*"]);
        assert_eq!(texts("kv:{k}", json!({"k": null})), vec!["kv:*"]);
    }

    #[test]
    fn arrays_expand_and_repeat_consistently() {
        assert_eq!(
            texts("kv:{k}", json!({"k": ["a", "b"]})),
            vec!["kv:a", "kv:b"]
        );
        assert_eq!(texts("kv:{k}", json!({"k": []})), Vec::<String>::new());
        assert_eq!(
            texts("{a}/{b}/{a}", json!({"a": ["x", "y"], "b": ["1", "2"]})),
            vec!["x/1/x", "y/1/y", "x/2/x", "y/2/y"]
        );
        let big: Vec<u32> = (0..9).collect();
        assert_eq!(
            texts("{a}{b}", json!({"a": big, "b": big})),
            vec!["**".to_string()]
        );
    }

    #[test]
    fn malformed_templates_are_refused() {
        assert!(ResourceTemplate::parse("kv:{").is_err());
        assert!(ResourceTemplate::parse("kv:{a-b}").is_err());
        assert!(ResourceTemplate::parse("kv:}").is_err());
        assert!(ResourceTemplate::parse("kv:{}").is_err());
        assert!(ResourceTemplate::parse("kv:\\").is_err());
        assert!(ResourceTemplate::parse("kv:\\{x\\}").is_ok());
    }
}
