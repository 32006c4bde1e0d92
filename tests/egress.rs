//! Egress that cannot be tricked (issue 17, and issue 22's findings 1 and 2): every trick of the
//! family — backslash, `@`, `#`, `?`, tab, percent-encoded separators, upper-case scheme, IPv4 in
//! decimal, hex, octal or short form, IPv4-mapped IPv6, trailing dots — sends nothing to a host
//! the allowlist does not name. A loopback recorder counts every connection and request; the
//! positive controls (the same spellings with the recorder's address on the allowlist) prove it
//! would have seen them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use serde_json::{json, Value};
use sluice_kernel::model::{Manifest, ManifestSource};
use sluice_kernel::run::Kernel;
use sluice_kernel::transport::http::{HttpOptions, HttpSynthesizer};
use sluice_kernel::transport::Tool;
use sluice_kernel::{Batch, Call, Status};
use support::http_server::{self, Server};
use support::sluice;

fn manifest(template: &str, network: Value, limits: Option<Value>) -> Value {
    let mut m = json!({"id": "t.get", "description": "egress test tool", "version": "1.0.0",
        "input": {"type": "object"}, "output": {}, "mutating": false, "effects": [],
        "network": network,
        "spec": {"kind": "http", "method": "GET", "urlTemplate": template}});
    if let Some(l) = limits {
        m["limits"] = l;
    }
    m
}

fn allow(hosts: &[&str]) -> Value {
    json!({"kind": "allowlist", "hosts": hosts})
}

/// The tool, or why the manifest was refused.
fn tool(m: Value) -> Result<Tool, String> {
    let manifest = Manifest::from_value(m).map_err(|e| e.to_string())?;
    Tool::new(manifest, ManifestSource::built_in(), None).map_err(|e| e.to_string())
}

/// Runs one call of `t.get` with `input`.
async fn call(t: Tool, input: Value) -> sluice_kernel::CallResult {
    let k = Kernel::builder().tool(t).build().unwrap();
    let r = k
        .run(Batch::new("t", vec![Call::new("c", "t.get", input)]).unwrap())
        .await
        .unwrap();
    r.results.into_iter().next().unwrap()
}

fn port(s: &Server) -> u16 {
    s.addr.port()
}

#[tokio::test]
async fn templates_the_url_parser_reads_otherwise_are_refused_when_the_tool_is_loaded() {
    let s = http_server::start().await;
    let p = port(&s);
    for template in [
        format!("http://127.0.0.1:{p}\\@ok.example/"),
        format!("http://127.0.0.1:{p}\\\\@ok.example/"),
        format!("http://127.0.0.1:{p}@ok.example/"),
        format!("http://127.0.0.1%3A{p}@ok.example/"),
        format!("http://127.0.0.1%2F:{p}/"),
        format!("http://ok.example\t.127.0.0.1:{p}/"),
        format!("http://127.0.0.1:{p}\n/"),
        "http://\t/{q}".to_string(),
        "http://\t/{q}metadata.google.internal".to_string(),
        format!("https://\\127.1example.com:{p}/"),
        "hTtPs://169.254.169.254\\[".to_string(),
        "hTtPs://127.1127.1\texample.com".to_string(),
        "http://%2e ".to_string(),
    ] {
        let m = manifest(&template, allow(&["ok.example"]), None);
        let refused = tool(m.clone());
        assert!(refused.is_err(), "{template:?} was accepted");
        // `sluice validate` says where.
        let dir = support::temp_dir("egress-validate");
        let file = dir.join("m.json");
        std::fs::write(&file, m.to_string()).unwrap();
        let v = sluice(
            &["validate", "--format", "json", file.to_str().unwrap()],
            None,
            None,
        );
        assert_eq!(v.code, 1, "{template:?}: {}", v.stdout);
        let errors = &v.json()["manifests"][0]["errors"];
        assert!(
            errors
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["pointer"] == "/spec/urlTemplate"),
            "{template:?}: {errors}"
        );
    }
    assert_eq!(s.connection_count(), 0, "nothing was sent anywhere");
}

#[tokio::test]
async fn every_spelling_of_the_recorders_address_is_denied_unless_allowed() {
    let s = http_server::start().await;
    let p = port(&s);
    let spellings = [
        format!("http://127.0.0.1:{p}/echo"),
        format!("HTTP://127.0.0.1:{p}/echo"),
        format!("http://2130706433:{p}/echo"),
        format!("http://0x7f000001:{p}/echo"),
        format!("http://0177.0.0.1:{p}/echo"),
        format!("http://127.1:{p}/echo"),
        format!("http://127.0.0.1.:{p}/echo"),
        format!("http://[::ffff:127.0.0.1]:{p}/echo"),
        format!("http://localhost.:{p}/echo"),
        format!("http://LOCALHOST:{p}/echo"),
    ];
    for u in &spellings {
        let r = call(
            tool(manifest(u, allow(&["ok.example"]), None)).unwrap(),
            json!({}),
        )
        .await;
        assert_eq!(r.status, Status::Error, "{u}");
        assert_eq!(r.error.as_ref().unwrap().code, "egress-denied", "{u}");
        for none in [json!({"kind": "none"}), allow(&[])] {
            let r = call(tool(manifest(u, none, None)).unwrap(), json!({})).await;
            assert_eq!(r.error.as_ref().unwrap().code, "egress-denied", "{u}");
        }
    }
    assert_eq!(s.connection_count(), 0, "denied requests sent nothing");

    // Positive controls: the recorder's address on the allowlist, in another spelling than the
    // URL's, is the same address; and a name with a trailing dot is the name.
    let mut sent = 0;
    for u in &spellings {
        let hosts: &[&str] = if u.contains("localhost.") {
            continue; // this machine's resolver does not answer for `localhost.`
        } else if u.contains("ocalhost") {
            &["localhost."]
        } else if u.contains("::ffff") {
            continue; // whether ::ffff:127.0.0.1 reaches an IPv4 listener is the OS's choice
        } else {
            &["0x7f.0.0.1", "localhost"]
        };
        let r = call(tool(manifest(u, allow(hosts), None)).unwrap(), json!({})).await;
        assert_eq!(r.status, Status::Ok, "{u}: {:?}", r.error);
        sent += 1;
    }
    assert_eq!(s.requests().len(), sent);
}

#[tokio::test]
async fn inputs_never_reach_the_host_and_metadata_is_refused_in_every_spelling() {
    let s = http_server::start().await;
    let p = port(&s);
    // Whatever the input holds, the request goes to the template's host and path.
    let t = || {
        tool(manifest(
            &format!("http://127.0.0.1:{p}/echo/{{q}}"),
            allow(&["127.0.0.1"]),
            None,
        ))
        .unwrap()
    };
    for q in [
        "@169.254.169.254",
        "\\@ok.example",
        "..\\..\\x",
        "#@evil",
        "?@evil",
        "\t169.254.169.254",
        "%2F%2Fevil",
        "//evil/",
    ] {
        let r = call(t(), json!({"q": q})).await;
        assert_eq!(r.status, Status::Ok, "{q}: {:?}", r.error);
        let target = r.output.unwrap()["target"].as_str().unwrap().to_owned();
        assert!(target.starts_with("/echo/"), "{q} -> {target}");
        assert!(!target[6..].contains('/'), "{q} -> {target}");
    }
    // Metadata: refused under every policy, however spelled; nothing is sent (nothing listens
    // there, but a connection attempt would be an `http-failed`, not an `egress-denied`).
    for u in [
        "http://169.254.169.254/latest/meta-data/",
        "http://0xa9fea9fe/",
        "http://2852039166/",
        "http://0251.0376.0251.0376/",
        "http://169.254.43518/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00:ec2::254]/",
        "http://metadata.google.internal./",
        "http://METADATA.goog/",
        "http://100.100.100.200/",
    ] {
        for network in [
            json!({"kind": "unrestricted"}),
            allow(&[u.split('/').nth(2).unwrap()]),
        ] {
            let r = call(tool(manifest(u, network, None)).unwrap(), json!({})).await;
            assert_eq!(r.error.as_ref().unwrap().code, "egress-denied", "{u}");
            assert!(
                r.error.as_ref().unwrap().message.contains("metadata"),
                "{u}: {:?}",
                r.error
            );
        }
    }
}

#[tokio::test]
async fn redirects_are_not_followed_and_bodies_are_capped() {
    let s = http_server::start().await;
    let other = http_server::start().await;
    let p = port(&s);
    let r = call(
        tool(manifest(
            &format!("http://127.0.0.1:{p}/away/{}", port(&other)),
            json!({"kind": "unrestricted"}),
            None,
        ))
        .unwrap(),
        json!({}),
    )
    .await;
    assert_eq!(r.error.as_ref().unwrap().code, "http-status");
    assert_eq!(other.connection_count(), 0, "the redirect went nowhere");

    // limits.memMB 1: a 2 MiB body (announced, or chunked) is `too-large`; 512 KiB is fine.
    let limits = Some(json!({"memMB": 1, "cpuMs": 1000}));
    for (path, code) in [
        ("/big/2097152", Some("too-large")),
        ("/bigchunked/2097152", Some("too-large")),
        ("/big/524288", None),
    ] {
        let t = tool(manifest(
            &format!("http://127.0.0.1:{p}{path}"),
            json!({"kind": "unrestricted"}),
            limits.clone(),
        ))
        .unwrap();
        let r = call(t, json!({})).await;
        assert_eq!(
            r.error.as_ref().map(|e| e.code.as_str()),
            code,
            "{path}: {:?}",
            r.error
        );
    }
    // Without limits the cap is 16 MiB: 17 MiB is too large.
    let t = tool(manifest(
        &format!("http://127.0.0.1:{p}/bigchunked/{}", 17 * 1024 * 1024),
        json!({"kind": "unrestricted"}),
        None,
    ))
    .unwrap();
    assert_eq!(call(t, json!({})).await.error.unwrap().code, "too-large");
}

#[tokio::test]
async fn a_proxy_from_the_environment_is_not_used_unless_opted_in() {
    let target = http_server::start().await;
    let proxy = http_server::start().await;
    // The variables are read when the client is built; set them before the kernel exists.
    std::env::set_var("HTTP_PROXY", proxy.url(""));
    std::env::set_var("http_proxy", proxy.url(""));
    let t = tool(manifest(&target.url("/echo"), allow(&["127.0.0.1"]), None)).unwrap();
    let r = call(t, json!({})).await;
    std::env::remove_var("HTTP_PROXY");
    std::env::remove_var("http_proxy");
    assert_eq!(
        r.status,
        Status::Ok,
        "{:?} target saw {:?}, proxy saw {:?}",
        r.error,
        target
            .requests()
            .iter()
            .map(|s| s.target.clone())
            .collect::<Vec<_>>(),
        proxy
            .requests()
            .iter()
            .map(|s| s.target.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(target.requests().len(), 1);
    assert_eq!(proxy.connection_count(), 0, "the proxy was not used");

    // Opted in, the request goes to the proxy (absolute-form target), not to the host.
    std::env::set_var("HTTP_PROXY", proxy.url(""));
    std::env::set_var("http_proxy", proxy.url(""));
    let synth = HttpSynthesizer::new(HttpOptions::default().with_proxy_from_env(true)).unwrap();
    std::env::remove_var("HTTP_PROXY");
    std::env::remove_var("http_proxy");
    let t = tool(manifest(&target.url("/echo"), allow(&["127.0.0.1"]), None)).unwrap();
    let k = Kernel::builder()
        .synthesizer("http", synth)
        .tool(t)
        .build()
        .unwrap();
    let r = k
        .run(Batch::new("t", vec![Call::new("c", "t.get", json!({}))]).unwrap())
        .await
        .unwrap();
    // The recorder is no real proxy: it answers 404 to the absolute-form request.
    assert_eq!(r.results[0].error.as_ref().unwrap().code, "http-status");
    assert_eq!(target.requests().len(), 1, "not sent to the host directly");
    let via = proxy.requests();
    assert_eq!(via.len(), 1);
    assert_eq!(via[0].target, target.url("/echo"));
}

#[tokio::test]
async fn mcp_endpoints_get_the_same_egress_checks() {
    let m = json!({"id": "m.echo", "description": "an MCP tool", "version": "1.0.0",
        "input": {"type": "object"}, "output": {}, "mutating": false, "effects": [],
        "transport": "mcp", "mcpEndpoint": "mcp+http://169.254.169.254/mcp"});
    let t = tool(m).unwrap();
    let k = Kernel::builder().tool(t).build().unwrap();
    let r = k
        .run(Batch::new("t", vec![Call::new("c", "m.echo", json!({}))]).unwrap())
        .await
        .unwrap();
    let e = r.results[0].error.as_ref().unwrap();
    assert_eq!(e.code, "mcp-unavailable", "{e:?}");
    assert!(e.message.contains("metadata"), "{}", e.message);
}
