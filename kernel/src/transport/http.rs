//! Declarative HTTP tools: the `http` spec synthesizer.
//!
//! Takes in: a manifest with `spec: {kind: "http"}`. Hands on: a handler that, for each call,
//! checks egress, resolves the secret, builds the request from the input and judges the response:
//!
//! 1. **Egress, before anything is sent.** `network: none` refuses every request; an `allowlist`
//!    allows only its hosts — exact match, ASCII case-insensitive; a subdomain is another host and
//!    is not allowed by its parent; absent or `unrestricted` allows. Cloud metadata addresses are
//!    refused unless [`HttpOptions::allow_metadata`] opts in: the IPv4 link-local range
//!    169.254.0.0/16 (which holds 169.254.169.254 and 169.254.170.2), 100.100.100.200,
//!    fd00:ec2::254, IPv6 link-local fe80::/10, and the names `metadata.google.internal`,
//!    `metadata.goog` and `metadata` — as the URL's host, and again after name resolution, so a
//!    name that resolves there is refused too. A refused request sends nothing (`egress-denied`).
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

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use super::context::ToolContext;
use super::handler::{Handler, HandlerFuture, SpecSynthesizer, ToolError};
use crate::error::ErrorCode;
use crate::model::{
    HttpAuthSpec, HttpMethod, HttpRequestBodySpec, HttpToolSpec, Manifest, NetworkPolicy, ToolSpec,
};
use crate::model::{TextPart, TextTemplate, UrlTemplate};

/// Options of the HTTP synthesizer.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct HttpOptions {
    /// Allow requests to cloud metadata addresses. Default `false`.
    pub allow_metadata: bool,
}

impl HttpOptions {
    /// These options, allowing (or not) requests to cloud metadata addresses.
    pub fn with_allow_metadata(mut self, allow: bool) -> Self {
        self.allow_metadata = allow;
        self
    }
}

/// The `http` spec synthesizer: one shared client for every HTTP tool.
#[derive(Debug, Clone)]
pub struct HttpSynthesizer {
    client: reqwest::Client,
    options: HttpOptions,
}

impl HttpSynthesizer {
    /// A synthesizer with its own client (rustls, no redirects, no proxy, a resolver that refuses
    /// metadata addresses unless allowed).
    pub fn new(options: HttpOptions) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver {
                allow_metadata: options.allow_metadata,
            }))
            .build()
            .map_err(|e| format!("the HTTP client cannot be built: {e}"))?;
        Ok(HttpSynthesizer { client, options })
    }
}

impl SpecSynthesizer for HttpSynthesizer {
    fn synthesize(&self, manifest: &Arc<Manifest>) -> Result<Arc<dyn Handler>, String> {
        let Some(ToolSpec::Http(spec)) = &manifest.spec else {
            return Err("the manifest has no http spec".into());
        };
        let tool = HttpTool::new(self.client.clone(), spec, manifest, self.options)?;
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

/// Whether an address is a cloud metadata (or link-local) address.
pub fn is_metadata_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            (o[0] == 169 && o[1] == 254) || o == [100, 100, 100, 200]
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_metadata_ip(IpAddr::V4(v4));
            }
            let aws = std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
            (v6.segments()[0] & 0xffc0) == 0xfe80 || v6 == aws
        }
    }
}

/// Whether a URL host names a cloud metadata service.
pub fn is_metadata_host(host: &str) -> bool {
    let h = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let h = h.trim_end_matches('.');
    if matches!(h, "metadata.google.internal" | "metadata.goog" | "metadata") {
        return true;
    }
    h.parse::<IpAddr>().is_ok_and(is_metadata_ip)
}

/// The egress decision for a host: `Err` says why it is refused.
pub fn check_egress(
    network: Option<&NetworkPolicy>,
    host: &str,
    allow_metadata: bool,
) -> Result<(), String> {
    if !allow_metadata && is_metadata_host(host) {
        return Err(format!(
            "`{host}` is a cloud metadata address, refused unless the embedder allows it"
        ));
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match network {
        None | Some(NetworkPolicy::Unrestricted {}) => Ok(()),
        Some(NetworkPolicy::None {}) => Err("the tool declares `network: none`".into()),
        Some(NetworkPolicy::Allowlist { hosts }) => {
            if hosts.iter().any(|h| {
                h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .eq_ignore_ascii_case(bare)
            }) {
                Ok(())
            } else {
                Err(format!("`{host}` is not on the tool's allowlist"))
            }
        }
    }
}

/// A resolver that refuses names resolving to metadata addresses.
#[derive(Debug)]
struct GuardedResolver {
    allow_metadata: bool,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        let allow = self.allow_metadata;
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !allow && addrs.iter().any(|a| is_metadata_ip(a.ip())) {
                return Err(format!("`{host}` resolves to a cloud metadata address").into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

fn has_header(headers: &[(String, String)], name: &str) -> bool {
    headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// A request as it will be sent, before any I/O: what [`HttpTool::build_request`] makes of a
/// call's input.
#[derive(Debug, Clone, PartialEq)]
struct OutgoingRequest {
    method: reqwest::Method,
    url: String,
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
        Ok(HttpTool {
            client,
            spec: spec.clone(),
            url,
            body,
            headers,
            network: manifest.network.clone(),
            options,
        })
    }

    /// Egress first, then the request, then the exchange under the tool's timeout, then the
    /// verdict on the response.
    async fn call(&self, ctx: ToolContext, input: Value) -> Result<Value, ToolError> {
        check_egress(
            self.network.as_ref(),
            self.url.host(),
            self.options.allow_metadata,
        )
        .map_err(|why| {
            ToolError::new(
                ErrorCode::EgressDenied,
                format!("the request was not sent: {why}"),
            )
        })?;
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
        let url = fill(self.url.template(), input, true, true, &mut consumed)?;
        for (name, t) in &self.headers {
            let v = fill(t, input, false, false, &mut Vec::new())?;
            if v.contains(['\r', '\n']) {
                return Err(invalid(format!(
                    "the header `{name}` would hold a CR or LF"
                )));
            }
            headers.push((name.clone(), v));
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
        let mut req = self.client.request(request.method, &request.url);
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
        let exchange = async {
            let resp = req.send().await?;
            let status = resp.status().as_u16();
            // Without a copy when the body is one buffer.
            let bytes = Vec::from(resp.bytes().await?);
            Ok::<_, reqwest::Error>((status, bytes))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Err(_) => Err(ToolError::new(
                ErrorCode::Timeout,
                format!("no complete response within {} ms", timeout.as_millis()),
            )),
            Ok(Err(e)) => {
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
        let (min, max) = self
            .spec
            .success_status
            .map_or((200, 299), |s| (s.min.get(), s.max.get()));
        if status < min || status > max {
            let head = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned();
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
                    String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
                ),
            )
        })
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
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
            assert!(is_metadata_host(h), "{h}");
            assert!(check_egress(None, h, false).is_err(), "{h}");
            assert!(check_egress(None, h, true).is_ok(), "{h} with the opt-in");
        }
        for h in ["127.0.0.1", "example.com", "[::1]", "10.0.0.1"] {
            assert!(!is_metadata_host(h), "{h}");
        }
    }

    #[test]
    fn allowlists_match_exactly() {
        let list = NetworkPolicy::Allowlist {
            hosts: vec![crate::model::NonEmptyString::new("api.example.com").unwrap()],
        };
        assert!(check_egress(Some(&list), "API.example.com", false).is_ok());
        assert!(check_egress(Some(&list), "x.api.example.com", false).is_err());
        assert!(check_egress(Some(&list), "example.com", false).is_err());
        assert!(check_egress(Some(&NetworkPolicy::None {}), "127.0.0.1", false).is_err());
        assert!(check_egress(Some(&NetworkPolicy::Unrestricted {}), "127.0.0.1", false).is_ok());
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
        assert_eq!(r.url, "https://api.example.com/items/a%2Fb");
        assert_eq!(r.headers, vec![("X-Note".to_string(), "n=hi".to_string())]);
        let (body, content_type) = r.body.unwrap();
        assert_eq!(content_type, "application/json");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, serde_json::json!({"note": "hi", "qty": 2}));

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
