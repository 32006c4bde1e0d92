//! Text templates with `{name}` placeholders: HTTP URL templates, header values and text bodies.
//!
//! Takes in: template text. Hands on: its literal and placeholder parts, and — for URL templates —
//! the checks that keep an input from choosing where a request goes: the scheme is `http` or
//! `https`, there is a host, and no placeholder sits in the scheme, userinfo, host or port.
//! (Resource templates, whose literal text is a pattern with escapes, are parsed by
//! [`crate::access::ResourceTemplate`].)

use std::fmt;

/// One piece of a text template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextPart {
    /// Literal text.
    Lit(String),
    /// `{name}`: name is ASCII letters, digits and `_`.
    Var(String),
}

/// A parsed text template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextTemplate {
    parts: Vec<TextPart>,
}

/// What is wrong with a template, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSyntaxError {
    /// Byte offset of the problem.
    pub offset: usize,
    /// What is wrong, for a person.
    pub message: String,
}

impl fmt::Display for TemplateSyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for TemplateSyntaxError {}

impl TextTemplate {
    /// Parses `{name}` placeholders (name: word characters). A brace that opens no placeholder
    /// is a literal character, so `{"q": "{q}"}` substitutes `q` and keeps the rest.
    ///
    /// ```
    /// use sluice_kernel::model::{TextPart, TextTemplate};
    /// let t = TextTemplate::parse(r#"{"q": "{q}"}"#).unwrap();
    /// assert_eq!(t.placeholders(), ["q"]);
    /// assert_eq!(t.parts()[0], TextPart::Lit(r#"{"q": ""#.into()));
    /// ```
    pub fn parse(text: &str) -> Result<Self, TemplateSyntaxError> {
        Ok(TextTemplate {
            parts: scan(text, false)?,
        })
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[TextPart] {
        &self.parts
    }

    /// The distinct placeholder names, in order of first use.
    pub fn placeholders(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for p in &self.parts {
            if let TextPart::Var(n) = p {
                if !names.contains(&n.as_str()) {
                    names.push(n);
                }
            }
        }
        names
    }
}

/// The distinct placeholder names of a resource template (pattern text, escapes kept), in order
/// of first use; or why the template is not well formed. Validation needs no more of a resource
/// template; expanding one against an input is [`crate::access::ResourceTemplate`]'s work.
pub fn resource_placeholders(text: &str) -> Result<Vec<String>, TemplateSyntaxError> {
    let mut names: Vec<String> = Vec::new();
    for part in scan(text, true)? {
        if let TextPart::Var(n) = part {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    Ok(names)
}

/// Splits template text into literal parts and `{name}` placeholders (name: ASCII letters, digits
/// and `_`). With `escapes`, a `\` keeps itself and the next character in the literal (pattern
/// text keeps its escapes) and a trailing `\` is an error. Shared by text templates and resource
/// templates ([`crate::access::ResourceTemplate`]).
pub(crate) fn scan(text: &str, escapes: bool) -> Result<Vec<TextPart>, TemplateSyntaxError> {
    let hint = |what: &str| {
        if escapes {
            format!("{what} (write `\\{{` or `\\}}` for a literal brace)")
        } else {
            what.to_owned()
        }
    };
    let err = |offset: usize, message: String| TemplateSyntaxError { offset, message };
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut it = text.char_indices();
    while let Some((at, c)) = it.next() {
        match c {
            '\\' if escapes => match it.next() {
                Some((_, e)) => {
                    lit.push('\\');
                    lit.push(e);
                }
                None => {
                    return Err(err(
                        at,
                        "ends with a `\\` that escapes nothing (write `\\\\` for a backslash)"
                            .into(),
                    ))
                }
            },
            '{' if !escapes => match placeholder_at(&text[at + 1..]) {
                // A brace that opens no `{name}` is a literal character (a text body may be
                // JSON); so is a lone `}`.
                Some(name) => {
                    for _ in 0..=name.len() {
                        it.next();
                    }
                    if !lit.is_empty() {
                        parts.push(TextPart::Lit(std::mem::take(&mut lit)));
                    }
                    parts.push(TextPart::Var(name.to_owned()));
                }
                None => lit.push('{'),
            },
            '{' => {
                let mut name = String::new();
                let mut closed = false;
                for (_, n) in it.by_ref() {
                    if n == '}' {
                        closed = true;
                        break;
                    }
                    if !(n.is_ascii_alphanumeric() || n == '_') {
                        return Err(err(
                            at,
                            hint(&format!(
                                "`{{` opens a placeholder whose name holds `{n}`: names are \
                                 letters, digits and `_`"
                            )),
                        ));
                    }
                    name.push(n);
                }
                if !closed {
                    return Err(err(at, hint("a placeholder `{` is never closed")));
                }
                if name.is_empty() {
                    return Err(err(at, "`{}` names no input property".into()));
                }
                if !lit.is_empty() {
                    parts.push(TextPart::Lit(std::mem::take(&mut lit)));
                }
                parts.push(TextPart::Var(name));
            }
            '}' if escapes => return Err(err(at, hint("a `}` closes no placeholder"))),
            c => lit.push(c),
        }
    }
    if !lit.is_empty() {
        parts.push(TextPart::Lit(lit));
    }
    Ok(parts)
}

/// The name of the `{name}` placeholder `rest` starts with (`rest` follows a `{`): one or more
/// word characters (ASCII letters, digits, `_`) and a `}`.
fn placeholder_at(rest: &str) -> Option<&str> {
    let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
    (end > 0 && rest[end..].starts_with('}')).then(|| &rest[..end])
}

/// A URL template whose scheme, host and port are fixed — and read the same way by these rules
/// and by the WHATWG URL parser that sends the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlTemplate {
    template: TextTemplate,
    /// `http` or `https`, lowercase.
    scheme: String,
    /// The host as written (brackets kept for IPv6).
    host: String,
    /// The host as the URL parser reads it.
    parsed_host: url::Host<String>,
    /// The port the URL parser reads (the scheme's default when none is written).
    port: u16,
}

/// A host as the WHATWG URL parser reads it, canonical: names lowercase without one trailing
/// dot; IPv4 in any spelling as its address; an IPv4-mapped IPv6 address as the IPv4 address it
/// reaches. `None` when the text is not a host.
pub fn canonical_host(text: &str) -> Option<url::Host<String>> {
    canonical(url::Host::parse(text).ok()?)
}

/// [`canonical_host`] of a host the URL parser already read.
pub fn canonical(host: url::Host<String>) -> Option<url::Host<String>> {
    Some(match host {
        url::Host::Domain(d) => {
            let d = d.to_ascii_lowercase();
            url::Host::Domain(d.strip_suffix('.').map(str::to_owned).unwrap_or(d))
        }
        url::Host::Ipv4(a) => url::Host::Ipv4(a),
        url::Host::Ipv6(a) => match a.to_ipv4_mapped() {
            Some(v4) => url::Host::Ipv4(v4),
            None => url::Host::Ipv6(a),
        },
    })
}

impl UrlTemplate {
    /// Parses and checks a URL template.
    ///
    /// ```
    /// use sluice_kernel::model::UrlTemplate;
    /// assert!(UrlTemplate::parse("https://api.example.com/users/{id}?q={q}").is_ok());
    /// assert!(UrlTemplate::parse("https://{host}/x").is_err());
    /// assert!(UrlTemplate::parse("ftp://example.com/").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, TemplateSyntaxError> {
        let err = |offset: usize, message: &str| TemplateSyntaxError {
            offset,
            message: message.to_owned(),
        };
        let Some(sep) = text.find("://") else {
            return Err(err(0, "is not an absolute http or https URL (no `://`)"));
        };
        // What the URL parser reads otherwise than these rules: it drops tabs and newlines
        // anywhere, and reads a backslash as `/` (so it would end the authority).
        if let Some(at) = text.find(['\t', '\n', '\r', '\\']) {
            let c = text[at..].chars().next().unwrap_or(' ');
            return Err(err(
                at,
                &format!(
                    "holds {c:?}, which the URL parser reads otherwise (a tab or newline is \
                     dropped, a backslash is `/`): it could move the host"
                ),
            ));
        }
        let scheme = &text[..sep];
        if scheme.contains('{') {
            return Err(err(0, "a placeholder may not stand in the scheme"));
        }
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(err(
                0,
                &format!("the scheme `{scheme}` is not http or https"),
            ));
        }
        let start = sep + 3;
        let rest = &text[start..];
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        let (userinfo, hostport) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        if userinfo.is_some_and(|u| u.contains(['{', '}'])) {
            return Err(err(start, "a placeholder may not stand in the userinfo"));
        }
        if let Some(at) = authority.find('@') {
            return Err(err(
                start + at,
                "has an `@` in its authority: a URL template may not carry userinfo, and an `@` \
                 can make the URL parser read another host",
            ));
        }
        if let Some((at, c)) = authority.char_indices().find(|(_, c)| {
            !(c.is_alphanumeric()
                || matches!(c, '-' | '.' | '_' | '~' | ':' | '[' | ']' | '{' | '}'))
        }) {
            return Err(err(
                start + at,
                &format!(
                    "holds {c:?} in its authority, which the URL parser may read otherwise: a \
                     host is letters, digits, `-`, `.`, brackets for IPv6, and a port"
                ),
            ));
        }
        let host_end = if hostport.starts_with('[') {
            hostport.find(']').map(|i| i + 1).unwrap_or(hostport.len())
        } else {
            hostport.find(':').unwrap_or(hostport.len())
        };
        let (host, port) = (&hostport[..host_end], &hostport[host_end..]);
        if host.contains(['{', '}']) {
            return Err(err(start, "a placeholder may not stand in the host"));
        }
        if port.contains(['{', '}']) {
            return Err(err(start, "a placeholder may not stand in the port"));
        }
        if host.is_empty() {
            return Err(err(start, "the URL has no host"));
        }
        if let Some(p) = port.strip_prefix(':') {
            if !p.is_empty()
                && (p.parse::<u16>().is_err() || !p.bytes().all(|b| b.is_ascii_digit()))
            {
                return Err(err(
                    start,
                    &format!("the port `{p}` is not a number 0-65535"),
                ));
            }
        }
        let template = TextTemplate::parse(text)?;
        // The template with every placeholder filled, read by the URL parser, must name the same
        // scheme, host and port as these rules read.
        let sample: String = template
            .parts()
            .iter()
            .map(|p| match p {
                TextPart::Lit(l) => l.as_str(),
                TextPart::Var(_) => "x",
            })
            .collect();
        let parsed = url::Url::parse(&sample)
            .map_err(|e| err(start, &format!("does not parse as a URL: {e}")))?;
        let written = canonical_host(host)
            .ok_or_else(|| err(start, &format!("the host `{host}` is not a valid host")))?;
        let read = parsed.host().map(|h| h.to_owned()).and_then(canonical);
        if read.as_ref() != Some(&written) || parsed.scheme() != scheme {
            return Err(err(
                start,
                &format!(
                    "names the host `{host}`, but the URL parser reads `{}`",
                    parsed.host_str().unwrap_or("")
                ),
            ));
        }
        let port = parsed.port_or_known_default().unwrap_or(0);
        Ok(UrlTemplate {
            template,
            scheme,
            host: host.to_owned(),
            parsed_host: written,
            port,
        })
    }

    /// The parsed template.
    pub fn template(&self) -> &TextTemplate {
        &self.template
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The host (IPv6 hosts keep their brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The host as the URL parser reads it ([`canonical_host`]).
    pub fn parsed_host(&self) -> &url::Host<String> {
        &self.parsed_host
    }

    /// The port the URL parser reads (the scheme's default when none is written).
    pub fn port(&self) -> u16 {
        self.port
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_rules() {
        assert!(UrlTemplate::parse("http://127.0.0.1:8080/a/{b}").is_ok());
        assert!(UrlTemplate::parse("http://[::1]:80/{b}").is_ok());
        assert!(UrlTemplate::parse("{s}://x/").is_err());
        assert!(UrlTemplate::parse("http://{u}@x/").is_err());
        assert!(UrlTemplate::parse("http://x:{p}/").is_err());
        assert!(UrlTemplate::parse("http:///path").is_err());
        assert!(UrlTemplate::parse("http://x:99999/").is_err());
        // A brace that opens no `{name}` is a literal character.
        for literal in [
            "http://x/{a b}",
            "http://x/}",
            "http://x/{}",
            "http://x/?q={\"a\":1}",
        ] {
            let t = UrlTemplate::parse(literal).unwrap();
            assert!(t.template().placeholders().is_empty(), "{literal}");
        }
        let t = UrlTemplate::parse("http://x/{{id}}").unwrap();
        assert_eq!(t.template().placeholders(), ["id"]);
        assert_eq!(t.template().parts()[0], TextPart::Lit("http://x/{".into()));
        assert_eq!(
            UrlTemplate::parse("HTTPS://Example.com/{id}")
                .unwrap()
                .template()
                .placeholders(),
            vec!["id"]
        );
    }
}
