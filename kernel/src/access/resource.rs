//! Resource templates: a manifest's `resource` text with `{name}` placeholders, expanded against
//! a call's input into pattern texts whose values stay literal.

use serde_json::Value;

use super::pattern::{self, Pattern, Token};
use crate::model::template::{self, TextPart as Part};

/// The most combinations several array placeholders in one resource may produce.
pub const MAX_COMBINATIONS: usize = 64;

/// A parsed resource template such as `fs:/repo/{path}` or `kv:{bucket}/{key}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceTemplate {
    /// Literal parts are pattern text (escapes kept).
    parts: Vec<Part>,
    /// The same parts prepared once for expansion straight into tokens: literal text parsed,
    /// placeholders by name.
    pieces: Vec<Piece>,
}

/// A part of a template prepared for expansion into tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// Literal pattern text, as tokens, and as its one string when it holds no wildcard.
    Lit(Box<[Token]>, Option<Box<str>>),
    Var(Box<str>),
}

/// Why a resource template is not well formed (the same error as a text template's).
pub type TemplateError = template::TemplateSyntaxError;

impl ResourceTemplate {
    /// Parses a template: pattern text with `{name}` placeholders (name: ASCII letters, digits,
    /// `_`). A `{` that does not open a placeholder, a lone `}` or a trailing `\` is an error;
    /// write `\{`, `\}`, `\\` for the literal characters.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let parts = template::scan(text, true)?;
        let pieces = parts
            .iter()
            .map(|p| match p {
                Part::Lit(t) => {
                    let mut tokens = Vec::with_capacity(t.len());
                    // The scanner keeps each escape whole inside one literal part, so the part
                    // parses; were it not to, `*` is the safe reading.
                    if pattern::push_tokens(&mut tokens, t).is_err() {
                        tokens = vec![Token::Star];
                    }
                    let text = tokens
                        .iter()
                        .map(|t| match t {
                            Token::Lit(c) => Some(*c),
                            _ => None,
                        })
                        .collect::<Option<String>>();
                    Piece::Lit(tokens.into_boxed_slice(), text.map(String::into_boxed_str))
                }
                Part::Var(n) => Piece::Var(n.as_str().into()),
            })
            .collect();
        Ok(ResourceTemplate { parts, pieces })
    }

    /// Expands the template against `input` straight into patterns, handing each to `each`: the
    /// patterns [`ResourceTemplate::expand`]'s texts parse to, in the same order, without
    /// rendering text and parsing it back (the planning hot path).
    pub fn expand_patterns(&self, input: &Value, mut each: impl FnMut(Pattern)) {
        // One pass to size the result and pick the path: an exact pattern is built as its one
        // string (literal parts without wildcards, scalar values), anything else as tokens.
        let (mut len, mut exact) = (0, true);
        for piece in &self.pieces {
            match piece {
                Piece::Lit(_, Some(text)) => len += text.len(),
                Piece::Lit(t, None) => (len, exact) = (len + t.len(), false),
                Piece::Var(n) => match input.get(&**n) {
                    Some(Value::Array(_)) => {
                        // Arrays multiply: the general path (rare).
                        for text in self.expand(input) {
                            each(Pattern::parse(&text).unwrap_or_else(|_| Pattern::any()));
                        }
                        return;
                    }
                    Some(Value::String(s)) => len += s.len(),
                    Some(Value::Number(_) | Value::Bool(_)) => len += 8,
                    _ => exact = false,
                },
            }
        }
        if exact {
            let mut text = String::with_capacity(len);
            for piece in &self.pieces {
                match (piece, piece_value(piece, input)) {
                    (Piece::Lit(_, Some(t)), _) => text.push_str(t),
                    (_, Some(Value::String(s))) => text.push_str(s),
                    (_, Some(v)) => text.push_str(&v.to_string()),
                    _ => {}
                }
            }
            each(Pattern::exact(text.into_boxed_str()));
            return;
        }
        let mut tokens = Vec::with_capacity(len + 1);
        for piece in &self.pieces {
            match piece {
                Piece::Lit(t, _) => tokens.extend_from_slice(t),
                Piece::Var(n) => push_value(&mut tokens, input.get(&**n)),
            }
        }
        each(Pattern::from_tokens(tokens));
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

/// The input's value for a placeholder piece.
fn piece_value<'a>(piece: &Piece, input: &'a Value) -> Option<&'a Value> {
    match piece {
        Piece::Var(n) => input.get(&**n),
        Piece::Lit(..) => None,
    }
}

/// A scalar's characters as literal tokens; anything else as `*` (as [`scalar_text`]).
fn push_value(tokens: &mut Vec<Token>, v: Option<&Value>) {
    match v {
        Some(Value::String(s)) => tokens.extend(s.chars().map(Token::Lit)),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => {
            tokens.extend(v.to_string().chars().map(Token::Lit))
        }
        _ => tokens.push(Token::Star),
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

    /// The token path is held to the text path: render, parse back, compare.
    #[test]
    fn patterns_are_the_parsed_texts() {
        let cases = [
            ("kv:{k}", json!({"k": "a*?\\{}"})),
            ("kv:{k}", json!({"k": 4.5})),
            ("kv:{k}", json!({"k": false})),
            ("kv:{k}", json!({"k": {"x": 1}})),
            ("kv:{k}", json!({})),
            ("kv:\\{{k}\\}/*", json!({"k": "x"})),
            ("fs:/r/{a}/{b}?", json!({"a": "p", "b": 7})),
            ("{a}/{b}/{a}", json!({"a": ["x", "y"], "b": ["1", [2]]})),
            ("kv:{k}", json!({"k": []})),
            ("**{k}**", json!({"k": "*"})),
            ("net:none", json!(null)),
        ];
        for (t, input) in cases {
            let template = ResourceTemplate::parse(t).unwrap();
            let want: Vec<Pattern> = template
                .expand(&input)
                .iter()
                .map(|s| Pattern::parse(s).unwrap())
                .collect();
            let mut got = Vec::new();
            template.expand_patterns(&input, |p| got.push(p));
            assert_eq!(got, want, "template {t} with {input}");
        }
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
