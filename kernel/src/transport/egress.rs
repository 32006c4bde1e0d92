//! Egress: where a tool's request may go, judged on the URL as it will be sent.
//!
//! Takes in: a rendered URL (or an MCP endpoint) and the tool's `network` policy. Hands on: the
//! parsed [`Url`] that may be sent — the very value the HTTP client sends, never a string parsed
//! again — or why it may not; and, with the `http` or `mcp` feature, the one HTTP client every
//! outgoing request goes through (`client`).
//!
//! The rules (semantics section 6):
//!
//! - **One parse.** A URL is parsed once, by the WHATWG parser of the `url` crate (the parser
//!   reqwest uses); that parse's scheme (`http` or `https`), host and port are what is checked
//!   and what is sent. A backslash, `@`, `#`, `?`, a tab or a percent-encoded separator can only
//!   ever be read one way.
//! - **Canonical hosts.** An IP address in any spelling — decimal `2130706433`, hex `0x7f000001`,
//!   octal `0177.0.0.1`, short `127.1`, IPv4-mapped IPv6 `[::ffff:127.0.0.1]` — is compared in its
//!   canonical form; names compare ASCII case-insensitively, one trailing dot ignored. Allowlist
//!   entries are read by the same parser ([`canonical_host`]).
//! - **Metadata, always refused** (unless the embedder opts in): 169.254.0.0/16 (169.254.169.254,
//!   169.254.170.2), 100.100.100.200, fd00:ec2::254, IPv6 link-local fe80::/10, and the names
//!   `metadata.google.internal`, `metadata.goog`, `metadata` — as the URL's host in any spelling,
//!   and on every address a name resolves to. The client's resolver checks the addresses and hands
//!   exactly those to the connector, so the connection goes to an address that was checked (no
//!   second lookup, no DNS rebinding between check and connect).
//! - **No redirects**, and **no proxy** unless the deployer opts in ([`EgressOptions`]); with a
//!   proxy the host checks still apply to the URL, but the proxy resolves the name.

use std::net::{IpAddr, Ipv6Addr};

use url::{Host, Url};

use crate::model::{canonical, canonical_host, NetworkPolicy};

/// How outgoing requests are allowed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EgressOptions {
    /// Allow requests to cloud metadata addresses. Default `false`.
    pub allow_metadata: bool,
    /// Use the proxy the environment names (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`). Default
    /// `false`: requests go straight to the checked address.
    pub proxy_from_env: bool,
}

impl EgressOptions {
    /// Allow (or not) requests to cloud metadata addresses.
    pub fn with_allow_metadata(mut self, allow: bool) -> Self {
        self.allow_metadata = allow;
        self
    }

    /// Use (or not) the proxy the environment names.
    pub fn with_proxy_from_env(mut self, proxy: bool) -> Self {
        self.proxy_from_env = proxy;
        self
    }
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
            let aws = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
            (v6.segments()[0] & 0xffc0) == 0xfe80 || v6 == aws
        }
    }
}

/// A host the URL parser read, canonical ([`canonical`]).
fn canonical_of(host: &Host<&str>) -> Host<String> {
    canonical(host.to_owned()).unwrap_or(Host::Domain(String::new()))
}

/// Whether a host (as the URL parser read it) names a cloud metadata service.
pub fn is_metadata_host(host: &Host<&str>) -> bool {
    match canonical_of(host) {
        Host::Domain(d) => matches!(
            d.as_str(),
            "metadata.google.internal" | "metadata.goog" | "metadata"
        ),
        Host::Ipv4(a) => is_metadata_ip(IpAddr::V4(a)),
        Host::Ipv6(a) => is_metadata_ip(IpAddr::V6(a)),
    }
}

/// The egress decision for a URL as it will be sent: `Err` says why nothing may be sent.
pub fn check_url(
    url: &Url,
    network: Option<&NetworkPolicy>,
    allow_metadata: bool,
) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the URL's scheme `{}` is not http or https",
            url.scheme()
        ));
    }
    let Some(host) = url.host() else {
        return Err("the URL has no host".into());
    };
    if !allow_metadata && is_metadata_host(&host) {
        return Err(format!(
            "`{host}` is a cloud metadata address, refused unless the embedder allows it"
        ));
    }
    match network {
        None | Some(NetworkPolicy::Unrestricted {}) => Ok(()),
        Some(NetworkPolicy::None {}) => Err("the tool declares `network: none`".into()),
        Some(NetworkPolicy::Allowlist { hosts }) => {
            let want = canonical_of(&host);
            if hosts
                .iter()
                .any(|h| canonical_host(h).is_some_and(|h| h == want))
            {
                Ok(())
            } else {
                Err(format!("`{host}` is not on the tool's allowlist"))
            }
        }
    }
}

/// Parses a rendered URL once and judges it: the [`Url`] to send, or why not.
pub fn judge(
    rendered: &str,
    network: Option<&NetworkPolicy>,
    allow_metadata: bool,
) -> Result<Url, String> {
    let url = Url::parse(rendered).map_err(|e| format!("the URL does not parse: {e}"))?;
    check_url(&url, network, allow_metadata)?;
    Ok(url)
}

/// The one HTTP client of outgoing requests: rustls, no redirects, no proxy unless opted in, and
/// a resolver that refuses names resolving to metadata addresses and pins the connection to the
/// addresses it checked.
#[cfg(any(feature = "http", feature = "mcp", feature = "pack"))]
pub fn client(options: EgressOptions) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(std::sync::Arc::new(GuardedResolver {
            allow_metadata: options.allow_metadata,
        }));
    if !options.proxy_from_env {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|e| format!("the HTTP client cannot be built: {e}"))
}

/// Resolves a name once, refuses it when any address is a metadata address, and hands the
/// checked addresses to the connector (which connects to one of them and looks nothing up).
#[cfg(any(feature = "http", feature = "mcp", feature = "pack"))]
#[derive(Debug)]
struct GuardedResolver {
    allow_metadata: bool,
}

#[cfg(any(feature = "http", feature = "mcp", feature = "pack"))]
impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        let allow = self.allow_metadata;
        Box::pin(async move {
            let named = Host::Domain(host.as_str());
            if !allow && is_metadata_host(&named) {
                return Err(format!("`{host}` is a cloud metadata name").into());
            }
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if !allow && addrs.iter().any(|a| is_metadata_ip(a.ip())) {
                return Err(format!("`{host}` resolves to a cloud metadata address").into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// An error and its causes, as one line (`connect failed: Connection refused`): how a failed
/// request is told in a call's message.
#[cfg(any(feature = "http", feature = "pack"))]
pub(crate) fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(hosts: &[&str]) -> NetworkPolicy {
        NetworkPolicy::Allowlist {
            hosts: hosts
                .iter()
                .map(|h| crate::model::NonEmptyString::new(*h).unwrap())
                .collect(),
        }
    }

    #[test]
    fn every_spelling_of_an_address_is_one_address() {
        let p = allow(&["127.0.0.1"]);
        for u in [
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f000001/",
            "http://0177.0.0.1/",
            "http://127.1/",
            "http://[::ffff:127.0.0.1]/",
            "HTTP://127.0.0.1:8080/x",
        ] {
            assert!(judge(u, Some(&p), false).is_ok(), "{u}");
        }
        let names = allow(&["Ok.Example."]);
        for u in [
            "http://ok.example/",
            "http://OK.EXAMPLE./",
            "https://ok.example:1/",
        ] {
            assert!(judge(u, Some(&names), false).is_ok(), "{u}");
        }
        for u in [
            "http://sub.ok.example/",
            "http://ok.example.evil/",
            "http://127.0.0.1/",
        ] {
            assert!(judge(u, Some(&names), false).is_err(), "{u}");
        }
    }

    #[test]
    fn the_host_is_the_one_the_parser_reads() {
        let p = allow(&["ok.example"]);
        for u in [
            "http://127.0.0.1:9\\@ok.example/",
            "http://127.0.0.1:9#@ok.example/",
            "http://127.0.0.1:9?@ok.example/",
            "http://127.0.0.1\t:9/@ok.example/",
            "ftp://ok.example/",
        ] {
            assert!(judge(u, Some(&p), false).is_err(), "{u}");
        }
        // `@` before the host is userinfo, percent-encoded separators too: the host is
        // ok.example, and the request goes nowhere else.
        for u in [
            "http://127.0.0.1:9@ok.example/",
            "http://127.0.0.1%2F@ok.example/",
        ] {
            assert_eq!(
                judge(u, Some(&p), false).unwrap().host_str(),
                Some("ok.example"),
                "{u}"
            );
        }
    }

    #[test]
    fn metadata_is_refused_in_every_spelling_under_every_policy() {
        for u in [
            "http://169.254.169.254/",
            "http://0xa9fea9fe/",
            "http://2852039166/",
            "http://0251.0376.0251.0376/",
            "http://169.254.43518/",
            "http://[::ffff:169.254.169.254]/",
            "http://[fd00:ec2::254]/",
            "http://metadata.google.internal./",
            "http://METADATA.GOOG/",
            "http://100.100.100.200/",
            "http://\t/169.254.169.254",
        ] {
            let url = Url::parse(u).unwrap();
            assert!(is_metadata_host(&url.host().unwrap()), "{u} reads as {url}");
            assert!(check_url(&url, None, false).is_err(), "{u}");
            assert!(check_url(&url, None, true).is_ok(), "{u}");
        }
        assert!(judge("http://0xa9fea9fe/", None, false).is_err());
    }
}
