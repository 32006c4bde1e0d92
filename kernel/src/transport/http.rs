//! Declarative HTTP tools: the `http` spec synthesizer.
//!
//! Takes in: a manifest with `spec: {kind: "http"}`. Hands on: a handler that, for each call,
//! checks egress, resolves the secret, builds the request from the input and judges the response:
//!
//! 1. **Egress, before anything is sent** ([`super::egress`]). The URL is rendered, then parsed
//!    once by the WHATWG parser reqwest uses; that parsed URL is checked and is what is sent. Its
//!    host and port must be the template's (an input can never move the request elsewhere);
//!    `network: none` refuses every request; an `allowlist` allows only its hosts — compared in
//!    canonical form (IP addresses in any spelling, names ASCII case-insensitive with one trailing
//!    dot ignored); a subdomain is another host; absent or `unrestricted` allows. Cloud metadata
//!    addresses are refused unless [`HttpOptions::allow_metadata`] opts in, as the URL's host and
//!    on every address a name resolves to (the connection goes to an address that was checked).
//!    A refused request sends nothing (`egress-denied`).
//! 2. **Secrets**: `bearer` and `header` authorization resolve their secret through the call's
//!    context at call time; a missing secret fails the call (`secret-unavailable`) before anything
//!    is sent. Secret values never appear in errors or records (the kernel redacts them).
//! 3. **URL**: each `{name}` takes the input's value, which must be a string, number or boolean
//!    (else `invalid-input` naming it); every byte outside `A-Z a-z 0-9 - . _ ~` is percent-encoded
//!    (`a/b?c` -> `a%2Fb%3Fc`), so no input can change the scheme, host, port, path structure or
//!    query; a value of exactly `.` or `..` in the path is refused. Header values are substituted
//!    as they are (not encoded); a value with CR or LF is refused.
//! 4. **Body**: GET and DELETE send none unless `requestBody` says so; POST, PUT and PATCH default
//!    to `json-input` (the input minus the keys the URL consumed); `input-passthrough` sends the
//!    whole input; `text` fills its template — by the URL's rules, values percent-encoded, as the
//!    schema's text says "the same holds for a text body template" — and sends `text/plain`.
//!    `Content-Type` is set unless a header sets it.
//! 5. **Response**: a status within `successStatus` (default 200..=299) is a success; any other
//!    (redirects included: they are never followed) is an `http-status` error with the status and
//!    the first 512 bytes of the body. With `parseJson` (default true) the body is parsed (empty is
//!    `null`; bad JSON is an `invalid-response` error); without it the output is the body as a
//!    string. `timeoutMs` (default 30,000) bounds the whole exchange; passing it is `timeout`.
//!    The body is read up to `limits.memMB` MiB (16 MiB when undeclared); past it the call fails
//!    with `too-large` and the rest is not read.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::context::ToolContext;
use super::egress::{self, source_chain, EgressOptions};
use super::handler::{Handler, HandlerFuture, SpecSynthesizer, ToolError};
use crate::error::ErrorCode;
use crate::model::{canonical, TextPart, TextTemplate, UrlTemplate};
use crate::model::{
    HttpAuthSpec, HttpMethod, HttpRequestBodySpec, HttpToolSpec, Manifest, NetworkPolicy, ToolSpec,
};

/// Options of the HTTP synthesizer: where its requests may go ([`EgressOptions`]: metadata
/// addresses, the environment's proxy).
pub type HttpOptions = EgressOptions;

/// The response body cap when a tool declares no `limits.memMB`.
pub const DEFAULT_BODY_CAP: u64 = 16 * 1024 * 1024;

/// The `http` spec synthesizer: one shared client for every HTTP tool.
#[derive(Debug, Clone)]
pub struct HttpSynthesizer {
    client: reqwest::Client,
    options: HttpOptions,
}

impl HttpSynthesizer {
    /// A synthesizer with its own egress-checked client ([`egress::client`]: rustls, no
    /// redirects, no proxy unless opted in, a resolver that refuses metadata addresses unless
    /// allowed).
    pub fn new(options: HttpOptions) -> Result<Self, String> {
        let client = egress::client(options)?;
        Ok(HttpSynthesizer { client, options })
    }
}

impl SpecSynthesizer for HttpSynthesizer {
    fn synthesize(&self, manifest: &Arc<Manifest>) -> Result<Arc<dyn Handler>, crate::Error> {
        let unusable = |why: String| crate::Error::SpecUnusable { why };
        let Some(ToolSpec::Http(spec)) = &manifest.spec else {
            return Err(unusable("the manifest has no http spec".into()));
        };
        let tool =
            HttpTool::new(self.client.clone(), spec, manifest, self.options).map_err(unusable)?;
        Ok(Arc::new(HttpHandler(Arc::new(tool))))
    }
}

/// One HTTP tool's handler.
#[derive(Debug)]
struct HttpTool {
    client: reqwest::Client,
    spec: HttpToolSpec,
    url: UrlTemplate,
    body: Option<TextTemplate>,
    headers: Vec<(String, TextTemplate)>,
    network: Option<NetworkPolicy>,
    options: HttpOptions,
    /// The most response bytes read.
    body_cap: u64,
}

/// Percent-encodes every byte outside `A-Z a-z 0-9 - . _ ~`, with uppercase hex.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn invalid(message: String) -> ToolError {
    ToolError::new(ErrorCode::InvalidInput, message)
}

/// The text of a placeholder's value: a primitive, or `invalid-input` naming it.
fn primitive(input: &Value, name: &str) -> Result<String, ToolError> {
    match input.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(v.to_string()),
        None => Err(invalid(format!(
            "the input has no `{name}`, which the request needs"
        ))),
        Some(_) => Err(invalid(format!(
            "`/{name}` must be a string, number or boolean to fill the request"
        ))),
    }
}

/// Fills a template. `encode`: percent-encode values; `url`: refuse `.` and `..` in the path.
fn fill(
    t: &TextTemplate,
    input: &Value,
    encode: bool,
    url: bool,
    consumed: &mut Vec<String>,
) -> Result<String, ToolError> {
    let mut out = String::new();
    let mut in_path = url;
    for part in t.parts() {
        match part {
            TextPart::Lit(l) => {
                if l.contains(['?', '#']) {
                    in_path = false;
                }
                out.push_str(l);
            }
            TextPart::Var(name) => {
                let v = primitive(input, name)?;
                if in_path && (v == "." || v == "..") {
                    return Err(invalid(format!(
                        "`/{name}` is `{v}`, which would be a dot segment in the URL's path"
                    )));
                }
                if !consumed.contains(name) {
                    consumed.push(name.clone());
                }
                out.push_str(&if encode { percent_encode(&v) } else { v });
            }
        }
    }
    Ok(out)
}

pub use super::egress::is_metadata_ip;

fn has_header(headers: &[(String, String)], name: &str) -> bool {
    headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// A request as it will be sent, before any I/O: what [`HttpTool::build_request`] makes of a
/// call's input.
#[derive(Debug, Clone, PartialEq)]
struct OutgoingRequest {
    method: reqwest::Method,
    /// The URL as the parser read it: checked, and sent as it is.
    url: url::Url,
    headers: Vec<(String, String)>,
    /// The body and its default content type.
    body: Option<(Vec<u8>, &'static str)>,
}

impl HttpTool {
    /// Compiles a tool's HTTP spec (its templates parsed once).
    fn new(
        client: reqwest::Client,
        spec: &HttpToolSpec,
        manifest: &Manifest,
        options: HttpOptions,
    ) -> Result<Self, String> {
        let url =
            UrlTemplate::parse(&spec.url_template).map_err(|e| format!("the URL template {e}"))?;
        let body = match &spec.request_body {
            Some(HttpRequestBodySpec::Text { template }) => {
                Some(TextTemplate::parse(template).map_err(|e| format!("the body template {e}"))?)
            }
            _ => None,
        };
        let headers = spec
            .headers
            .iter()
            .flatten()
            .map(|h| {
                TextTemplate::parse(&h.value)
                    .map(|t| (h.name.to_string(), t))
                    .map_err(|e| format!("the header `{}` {e}", h.name.as_str()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let body_cap = manifest.limits.as_ref().map_or(DEFAULT_BODY_CAP, |l| {
            l.mem_mb.get().saturating_mul(1024 * 1024)
        });
        Ok(HttpTool {
            client,
            spec: spec.clone(),
            url,
            body,
            headers,
            network: manifest.network.clone(),
            options,
            body_cap,
        })
    }

    /// The request, judged by egress as it will be sent, then the exchange under the tool's
    /// timeout, then the verdict on the response.
    async fn call(&self, ctx: ToolContext, input: Value) -> Result<Value, ToolError> {
        let request = self.build_request(&ctx, &input)?;
        let (status, bytes) = self.exchange(request).await?;
        self.judge_response(status, &bytes)
    }

    /// The request a call's input makes: the secret's header, the URL and headers filled in
    /// (values percent-encoded in the URL), the body. No I/O.
    fn build_request(
        &self,
        ctx: &ToolContext,
        input: &Value,
    ) -> Result<OutgoingRequest, ToolError> {
        let mut headers: Vec<(String, String)> = Vec::new();
        match &self.spec.authorization {
            Some(HttpAuthSpec::Bearer { secret_ref }) => {
                let s = secret(ctx, secret_ref.name.as_str())?;
                headers.push(("Authorization".into(), format!("Bearer {s}")));
            }
            Some(HttpAuthSpec::Header {
                header_name,
                secret_ref,
            }) => {
                let s = secret(ctx, secret_ref.name.as_str())?;
                headers.push((header_name.to_string(), s));
            }
            None => {}
        }
        let mut consumed = Vec::new();
        let rendered = fill(self.url.template(), input, true, true, &mut consumed)?;
        let url = self.judge_url(&rendered)?;
        for (name, t) in &self.headers {
            let v = fill(t, input, false, false, &mut Vec::new())?;
            if v.contains(['\r', '\n']) {
                return Err(invalid(format!(
                    "the header `{name}` would hold a CR or LF"
                )));
            }
            headers.push((name.clone(), v));
        }
        // The call's idempotency key, unless the manifest sends one of its own: a service that
        // deduplicates by it applies a retried call once.
        if !has_header(&headers, "idempotency-key") {
            headers.push(("Idempotency-Key".into(), ctx.idempotency_key()));
        }
        let method = match self.spec.method {
            HttpMethod::Get => reqwest::Method::GET,
            HttpMethod::Post => reqwest::Method::POST,
            HttpMethod::Put => reqwest::Method::PUT,
            HttpMethod::Patch => reqwest::Method::PATCH,
            HttpMethod::Delete => reqwest::Method::DELETE,
        };
        Ok(OutgoingRequest {
            method,
            url,
            headers,
            body: self.body(input, &consumed)?,
        })
    }

    /// The rendered URL, parsed once and judged: the same scheme, host and port as the template,
    /// then the tool's network policy and the metadata refusal. `egress-denied` sends nothing.
    fn judge_url(&self, rendered: &str) -> Result<url::Url, ToolError> {
        let denied = |why: String| {
            ToolError::new(
                ErrorCode::EgressDenied,
                format!("the request was not sent: {why}"),
            )
        };
        let url = url::Url::parse(rendered)
            .map_err(|e| denied(format!("the URL does not parse: {e}")))?;
        let host = url.host().map(|h| h.to_owned()).and_then(canonical);
        if host.as_ref() != Some(self.url.parsed_host())
            || url.port_or_known_default() != Some(self.url.port())
            || url.scheme() != self.url.scheme()
        {
            return Err(denied(format!(
                "the filled-in URL would go to `{}`, not to the template's `{}`",
                url.host_str().unwrap_or(""),
                self.url.host()
            )));
        }
        egress::check_url(&url, self.network.as_ref(), self.options.allow_metadata)
            .map_err(denied)?;
        Ok(url)
    }

    /// The body: the declared kind, else the input as JSON for POST, PUT and PATCH (without the
    /// properties the URL consumed).
    fn body(
        &self,
        input: &Value,
        consumed: &[String],
    ) -> Result<Option<(Vec<u8>, &'static str)>, ToolError> {
        let kind = match (&self.spec.request_body, self.spec.method) {
            (Some(b), _) => Some(b.clone()),
            (None, HttpMethod::Post | HttpMethod::Put | HttpMethod::Patch) => {
                Some(HttpRequestBodySpec::JsonInput {})
            }
            (None, _) => None,
        };
        Ok(match kind {
            None => None,
            Some(HttpRequestBodySpec::JsonInput {}) => {
                let mut rest: Map<String, Value> = input.as_object().cloned().unwrap_or_default();
                for k in consumed {
                    rest.remove(k);
                }
                Some((
                    Value::Object(rest).to_string().into_bytes(),
                    "application/json",
                ))
            }
            Some(HttpRequestBodySpec::InputPassthrough {}) => {
                Some((input.to_string().into_bytes(), "application/json"))
            }
            Some(HttpRequestBodySpec::Text { .. }) => {
                let t = self.body.as_ref().map_or(Ok(String::new()), |t| {
                    fill(t, input, true, false, &mut Vec::new())
                })?;
                Some((t.into_bytes(), "text/plain; charset=utf-8"))
            }
        })
    }

    /// Sends the request and reads the whole response within the tool's `timeoutMs`.
    async fn exchange(&self, request: OutgoingRequest) -> Result<(u16, Vec<u8>), ToolError> {
        let mut req = self.client.request(request.method, request.url);
        if let Some((bytes, content_type)) = request.body {
            if !has_header(&request.headers, "content-type") {
                req = req.header("Content-Type", content_type);
            }
            req = req.body(bytes);
        }
        for (n, v) in &request.headers {
            req = req.header(n.as_str(), v.as_str());
        }
        let timeout = Duration::from_millis(self.spec.timeout_ms.map_or(30_000, |t| t.get()));
        let cap = self.body_cap;
        let exchange = async {
            let mut resp = req.send().await.map_err(Read::Http)?;
            let status = resp.status().as_u16();
            if resp.content_length().is_some_and(|n| n > cap) {
                return Err(Read::TooLarge);
            }
            let mut bytes = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(Read::Http)? {
                if (bytes.len() + chunk.len()) as u64 > cap {
                    return Err(Read::TooLarge);
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok((status, bytes))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Err(_) => Err(ToolError::new(
                ErrorCode::Timeout,
                format!("no complete response within {} ms", timeout.as_millis()),
            )),
            Ok(Err(Read::TooLarge)) => Err(ToolError::new(
                ErrorCode::TooLarge,
                format!(
                    "the response body is larger than {} bytes (limits.memMB, or 16 MiB)",
                    cap
                ),
            )),
            Ok(Err(Read::Http(e))) => {
                let why = if e.is_connect() {
                    format!("cannot connect: {}", source_chain(&e))
                } else {
                    source_chain(&e)
                };
                Err(ToolError::new(ErrorCode::HttpFailed, why))
            }
            Ok(Ok(r)) => Ok(r),
        }
    }

    /// The verdict on a response: a status outside the success range is `http-status`; the body
    /// is JSON (empty is `null`) unless `parseJson: false` makes it a string. No I/O.
    fn judge_response(&self, status: u16, bytes: &[u8]) -> Result<Value, ToolError> {
        /// The first 512 bytes of a body, for a message.
        fn head_of(bytes: &[u8]) -> &[u8] {
            bytes.get(..512).unwrap_or(bytes)
        }
        let (min, max) = self
            .spec
            .success_status
            .map_or((200, 299), |s| (s.min.get(), s.max.get()));
        if status < min || status > max {
            let head = String::from_utf8_lossy(head_of(bytes)).into_owned();
            return Err(ToolError::new(
                ErrorCode::HttpStatus,
                format!("the server answered {status} (success is {min}..={max}): {head}"),
            ));
        }
        if !self.spec.parse_json.unwrap_or(true) {
            return Ok(Value::String(String::from_utf8_lossy(bytes).into_owned()));
        }
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(bytes).map_err(|e| {
            ToolError::new(
                ErrorCode::InvalidResponse,
                format!(
                    "the response body is not JSON ({e}): {}",
                    String::from_utf8_lossy(head_of(bytes))
                ),
            )
        })
    }
}

/// Why reading a response stopped.
enum Read {
    Http(reqwest::Error),
    TooLarge,
}

fn secret(ctx: &ToolContext, name: &str) -> Result<String, ToolError> {
    let s = ctx.resolve_secret(name).map_err(|e| {
        ToolError::new(
            ErrorCode::SecretUnavailable,
            format!("the request was not sent: {e}"),
        )
    })?;
    if s.contains(['\r', '\n']) {
        return Err(ToolError::new(
            ErrorCode::SecretUnavailable,
            format!("the request was not sent: the secret `{name}` holds a CR or LF"),
        ));
    }
    Ok(s)
}

/// The handler: a shared [`HttpTool`].
#[derive(Debug)]
struct HttpHandler(Arc<HttpTool>);

impl Handler for HttpHandler {
    fn call(&self, ctx: ToolContext, input: Value) -> HandlerFuture {
        let tool = self.0.clone();
        Box::pin(async move { tool.call(ctx, input).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_keeps_inputs_in_their_place() {
        assert_eq!(percent_encode("a/b?c"), "a%2Fb%3Fc");
        assert_eq!(percent_encode("a b"), "a%20b");
        assert_eq!(percent_encode("../x#y%z"), "..%2Fx%23y%25z");
        assert_eq!(percent_encode("é"), "%C3%A9");
        assert_eq!(percent_encode("A-z_0.9~"), "A-z_0.9~");
    }

    #[test]
    fn metadata_addresses_are_recognized_without_any_traffic() {
        for h in [
            "169.254.169.254",
            "169.254.170.2",
            "100.100.100.200",
            "[fd00:ec2::254]",
            "[fe80::1]",
            "metadata.google.internal",
            "METADATA.GOOGLE.INTERNAL.",
            "[::ffff:169.254.169.254]",
        ] {
            let url = format!("http://{h}/");
            assert!(egress::judge(&url, None, false).is_err(), "{h}");
            assert!(
                egress::judge(&url, None, true).is_ok(),
                "{h} with the opt-in"
            );
        }
        for h in ["127.0.0.1", "example.com", "[::1]", "10.0.0.1"] {
            assert!(
                egress::judge(&format!("http://{h}/"), None, false).is_ok(),
                "{h}"
            );
        }
    }

    #[test]
    fn allowlists_match_exactly() {
        let list = NetworkPolicy::Allowlist {
            hosts: vec![crate::model::NonEmptyString::new("api.example.com").unwrap()],
        };
        let judge =
            |p: &NetworkPolicy, h: &str| egress::judge(&format!("http://{h}/"), Some(p), false);
        assert!(judge(&list, "API.example.com").is_ok());
        assert!(judge(&list, "x.api.example.com").is_err());
        assert!(judge(&list, "example.com").is_err());
        assert!(judge(&NetworkPolicy::None {}, "127.0.0.1").is_err());
        assert!(judge(&NetworkPolicy::Unrestricted {}, "127.0.0.1").is_ok());
    }

    fn tool(spec: serde_json::Value) -> (HttpTool, Arc<Manifest>) {
        let m = Manifest::from_value(serde_json::json!({
            "id": "t.http", "description": "d", "version": "1.0.0",
            "input": {"type": "object"}, "output": {}, "spec": spec
        }))
        .unwrap();
        let Some(ToolSpec::Http(spec)) = &m.spec else {
            unreachable!()
        };
        let t = HttpTool::new(reqwest::Client::new(), spec, &m, HttpOptions::default()).unwrap();
        (t, Arc::new(m))
    }

    /// The request is built without any I/O: URL values percent-encoded and consumed, headers
    /// filled, the rest of the input as the JSON body of a POST.
    #[test]
    fn a_request_is_built_from_the_input_alone() {
        let (t, m) = tool(serde_json::json!({
            "kind": "http", "method": "POST",
            "urlTemplate": "https://api.example.com/items/{id}",
            "headers": [{"name": "X-Note", "value": "n={note}"}]
        }));
        let ctx = ToolContext::detached("acme", "c1", m);
        let input = serde_json::json!({"id": "a/b", "note": "hi", "qty": 2});
        let r = t.build_request(&ctx, &input).unwrap();
        assert_eq!(r.method, reqwest::Method::POST);
        assert_eq!(r.url.as_str(), "https://api.example.com/items/a%2Fb");
        assert_eq!(
            r.headers,
            vec![
                ("X-Note".to_string(), "n=hi".to_string()),
                ("Idempotency-Key".to_string(), ctx.idempotency_key()),
            ]
        );
        let (body, content_type) = r.body.unwrap();
        assert_eq!(content_type, "application/json");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, serde_json::json!({"note": "hi", "qty": 2}));

        // A manifest that sends its own key keeps it.
        let (own, m) = tool(serde_json::json!({
            "kind": "http", "method": "POST", "urlTemplate": "https://api.example.com/x",
            "headers": [{"name": "Idempotency-Key", "value": "{key}"}]
        }));
        let ctx2 = ToolContext::detached("acme", "c1", m);
        let r = own
            .build_request(&ctx2, &serde_json::json!({"key": "mine"}))
            .unwrap();
        assert_eq!(
            r.headers,
            vec![("Idempotency-Key".to_string(), "mine".to_string())]
        );

        let bad = serde_json::json!({"id": "x", "note": "a\r\nX-Evil: 1"});
        let e = t.build_request(&ctx, &bad).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput);
    }

    /// The verdict on a response needs only its status and body.
    #[test]
    fn a_response_is_judged_by_its_status_and_body() {
        let (t, _) = tool(serde_json::json!({
            "kind": "http", "method": "GET", "urlTemplate": "https://api.example.com/x",
            "successStatus": {"min": 200, "max": 204}
        }));
        assert_eq!(
            t.judge_response(200, b"{\"a\": 1}").unwrap(),
            serde_json::json!({"a": 1})
        );
        assert_eq!(t.judge_response(204, b"  ").unwrap(), Value::Null);
        let e = t.judge_response(205, b"nope").unwrap_err();
        assert_eq!(e.code, ErrorCode::HttpStatus);
        assert!(
            e.message.contains("205") && e.message.contains("nope"),
            "{}",
            e.message
        );
        let e = t.judge_response(200, b"<html>").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidResponse);

        let (raw, _) = tool(serde_json::json!({
            "kind": "http", "method": "GET", "urlTemplate": "https://api.example.com/x",
            "parseJson": false
        }));
        assert_eq!(
            raw.judge_response(200, b"<html>").unwrap(),
            Value::String("<html>".into())
        );
    }
}
