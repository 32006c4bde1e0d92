//! Declarative HTTP tools against a real HTTP server on loopback that the tests start.
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
use sluice_kernel::transport::Tool;
use sluice_kernel::{Batch, BatchResult, Call, Status};
use support::http_server::{self, Server};

fn http_tool(id: &str, spec: Value, extra: Value) -> Tool {
    let mut m = json!({"id": id, "description": "http test tool", "version": "1.0.0",
        "input": {"type": "object"}, "output": {}, "mutating": false, "effects": [],
        "spec": spec});
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    Tool::new(
        Manifest::from_value(m).unwrap(),
        ManifestSource::built_in(),
        None,
    )
    .unwrap()
}

fn kernel(tools: Vec<Tool>) -> Kernel {
    let mut b = Kernel::builder().secrets(|_t: &str, name: &str, _e: Option<&str>| {
        (name == "token").then(|| "s3cret-t0ken".to_string())
    });
    for t in tools {
        b = b.tool(t);
    }
    b.build().unwrap()
}

async fn run(k: &Kernel, calls: Vec<(&str, &str, Value)>) -> BatchResult {
    let calls = calls
        .into_iter()
        .map(|(id, tool, input)| Call::new(id, tool, input))
        .collect();
    k.run(Batch::new("t", calls).unwrap()).await.unwrap()
}

fn get(server: &Server, path: &str) -> Value {
    json!({"kind": "http", "method": "GET", "urlTemplate": server.url(path)})
}

#[tokio::test]
async fn inputs_cannot_change_where_a_request_goes() {
    let s = http_server::start().await;
    let k = kernel(vec![http_tool(
        "h.get",
        get(&s, "/echo/{id}?q={q}"),
        json!({}),
    )]);
    let r = run(
        &k,
        vec![
            ("dots", "h.get", json!({"id": "../admin", "q": "a b"})),
            ("query", "h.get", json!({"id": "a/b?c", "q": "x&y=z#f"})),
            ("pct", "h.get", json!({"id": "%2e%2e", "q": "é"})),
            ("num", "h.get", json!({"id": 42, "q": true})),
        ],
    )
    .await;
    let targets: Vec<String> = r
        .results
        .iter()
        .map(|c| {
            c.output.as_ref().unwrap()["target"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(
        targets,
        [
            "/echo/..%2Fadmin?q=a%20b",
            "/echo/a%2Fb%3Fc?q=x%26y%3Dz%23f",
            "/echo/%252e%252e?q=%C3%A9",
            "/echo/42?q=true",
        ]
    );
    let before = s.requests().len();
    let r = run(
        &k,
        vec![
            ("dot", "h.get", json!({"id": ".", "q": "x"})),
            ("dotdot", "h.get", json!({"id": "..", "q": "x"})),
            ("missing", "h.get", json!({"id": "x"})),
            ("object", "h.get", json!({"id": {"a": 1}, "q": "x"})),
            ("dots-in-query", "h.get", json!({"id": "ok", "q": ".."})),
        ],
    )
    .await;
    for c in &r.results[..4] {
        assert_eq!(c.error.as_ref().unwrap().code, "invalid-input", "{}", c.id);
    }
    assert!(r.results[2].error.as_ref().unwrap().message.contains("`q`"));
    assert_eq!(
        r.results[4].status,
        Status::Ok,
        "`..` is only refused in the path"
    );
    assert_eq!(s.requests().len(), before + 1, "refused calls sent nothing");
}

#[tokio::test]
async fn both_auth_kinds_and_a_missing_secret() {
    let s = http_server::start().await;
    let auth = |a: Value| {
        let mut g = get(&s, "/echo");
        g["authorization"] = a;
        g
    };
    let k = kernel(vec![
        http_tool(
            "h.bearer",
            auth(json!({"kind": "bearer", "secretRef": {"envName": "T", "name": "token"}})),
            json!({}),
        ),
        http_tool(
            "h.header",
            auth(
                json!({"kind": "header", "headerName": "X-Api-Key", "secretRef": {"envName": "T", "name": "token"}}),
            ),
            json!({}),
        ),
        http_tool(
            "h.missing",
            auth(json!({"kind": "bearer", "secretRef": {"envName": "NOPE", "name": "other"}})),
            json!({}),
        ),
    ]);
    let r = run(
        &k,
        vec![
            ("b", "h.bearer", json!({})),
            ("h", "h.header", json!({})),
            ("m", "h.missing", json!({})),
        ],
    )
    .await;
    assert_eq!(
        r.results[0].output.as_ref().unwrap()["headers"]["authorization"],
        "Bearer s3cret-t0ken"
    );
    assert_eq!(
        r.results[1].output.as_ref().unwrap()["headers"]["x-api-key"],
        "s3cret-t0ken"
    );
    assert_eq!(
        r.results[2].error.as_ref().unwrap().code,
        "secret-unavailable"
    );
    assert_eq!(
        s.requests().len(),
        2,
        "the call without its secret sent nothing"
    );
}

#[tokio::test]
async fn each_body_kind() {
    let s = http_server::start().await;
    let spec = |method: &str, body: Option<Value>, headers: Option<Value>| {
        let mut v = json!({"kind": "http", "method": method, "urlTemplate": s.url("/echo/{id}")});
        if let Some(b) = body {
            v["requestBody"] = b;
        }
        if let Some(h) = headers {
            v["headers"] = h;
        }
        v
    };
    let k = kernel(vec![
        http_tool("h.post", spec("POST", None, None), json!({})),
        http_tool(
            "h.pass",
            spec("PUT", Some(json!({"kind": "input-passthrough"})), None),
            json!({}),
        ),
        http_tool(
            "h.text",
            spec(
                "PATCH",
                Some(json!({"kind": "text", "template": "hello {name}, see {id}"})),
                None,
            ),
            json!({}),
        ),
        http_tool("h.get", spec("GET", None, None), json!({})),
        http_tool(
            "h.typed",
            spec(
                "POST",
                None,
                Some(json!([{"name": "Content-Type", "value": "application/vnd.acme+json"}])),
            ),
            json!({}),
        ),
    ]);
    let r = run(
        &k,
        vec![
            ("p", "h.post", json!({"id": "1", "a": [1, 2]})),
            ("x", "h.pass", json!({"id": "2", "a": 1})),
            ("t", "h.text", json!({"id": "3", "name": "Ada Lovelace"})),
            ("g", "h.get", json!({"id": "4", "ignored": true})),
            ("c", "h.typed", json!({"id": "5"})),
        ],
    )
    .await;
    let out = |i: usize| r.results[i].output.clone().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(out(0)["body"].as_str().unwrap()).unwrap(),
        json!({"a": [1, 2]})
    );
    assert_eq!(out(0)["headers"]["content-type"], "application/json");
    assert_eq!(
        serde_json::from_str::<Value>(out(1)["body"].as_str().unwrap()).unwrap(),
        json!({"id": "2", "a": 1})
    );
    assert_eq!(out(2)["body"], "hello Ada%20Lovelace, see 3");
    assert_eq!(
        out(2)["headers"]["content-type"],
        "text/plain; charset=utf-8"
    );
    assert_eq!(out(3)["body"], "");
    assert!(out(3)["headers"].get("content-type").is_none());
    assert_eq!(
        out(4)["headers"]["content-type"],
        "application/vnd.acme+json"
    );
}

#[tokio::test]
async fn statuses_redirects_parsing_and_timeouts() {
    let s = http_server::start().await;
    let with = |path: &str, extra: Value| {
        let mut g = get(&s, path);
        for (k, v) in extra.as_object().unwrap() {
            g[k] = v.clone();
        }
        g
    };
    let k = kernel(vec![
        http_tool("h.404", with("/status/404", json!({})), json!({})),
        http_tool(
            "h.404ok",
            with(
                "/status/404",
                json!({"successStatus": {"min": 400, "max": 404}, "parseJson": false}),
            ),
            json!({}),
        ),
        http_tool("h.redirect", with("/redirect", json!({})), json!({})),
        http_tool("h.text", with("/text", json!({})), json!({})),
        http_tool(
            "h.raw",
            with("/text", json!({"parseJson": false})),
            json!({}),
        ),
        http_tool("h.empty", with("/empty", json!({})), json!({})),
        http_tool(
            "h.slow",
            with("/slow/3000", json!({"timeoutMs": 50})),
            json!({}),
        ),
        http_tool(
            "h.edge",
            with("/status/299", json!({"parseJson": false})),
            json!({}),
        ),
    ]);
    let r = run(
        &k,
        vec![
            ("a", "h.404", json!({})),
            ("b", "h.404ok", json!({})),
            ("c", "h.redirect", json!({})),
            ("d", "h.text", json!({})),
            ("e", "h.raw", json!({})),
            ("f", "h.empty", json!({})),
            ("g", "h.slow", json!({})),
            ("h", "h.edge", json!({})),
        ],
    )
    .await;
    let e = r.results[0].error.as_ref().unwrap();
    assert_eq!(e.code, "http-status");
    assert!(
        e.message.contains("404") && e.message.contains("status 404"),
        "{}",
        e.message
    );
    assert_eq!(r.results[1].output, Some(json!("status 404")));
    assert_eq!(
        r.results[2].error.as_ref().unwrap().code,
        "http-status",
        "redirects are not followed"
    );
    assert_eq!(
        r.results[3].error.as_ref().unwrap().code,
        "invalid-response"
    );
    assert_eq!(r.results[4].output, Some(json!("not json")));
    assert_eq!(r.results[5].output, Some(Value::Null));
    assert_eq!(r.results[6].status, Status::Timeout);
    assert!(r.results[6]
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("50 ms"));
    assert_eq!(
        r.results[7].status,
        Status::Ok,
        "299 is inside the default range"
    );
    assert!(
        s.requests().iter().all(|q| q.target != "/echo"),
        "the redirect was not followed"
    );
}

#[tokio::test]
async fn egress_is_enforced_before_any_connection() {
    let s = http_server::start().await;
    let k = kernel(vec![
        http_tool(
            "h.none",
            get(&s, "/echo"),
            json!({"network": {"kind": "none"}}),
        ),
        http_tool(
            "h.other",
            get(&s, "/echo"),
            json!({"network": {"kind": "allowlist", "hosts": ["api.example.com"]}}),
        ),
        http_tool(
            "h.empty",
            get(&s, "/echo"),
            json!({"network": {"kind": "allowlist", "hosts": []}}),
        ),
        http_tool(
            "h.listed",
            get(&s, "/echo"),
            json!({"network": {"kind": "allowlist", "hosts": ["127.0.0.1"]}}),
        ),
        http_tool(
            "h.open",
            get(&s, "/echo"),
            json!({"network": {"kind": "unrestricted"}}),
        ),
    ]);
    let r = run(
        &k,
        vec![
            ("n", "h.none", json!({})),
            ("o", "h.other", json!({})),
            ("e", "h.empty", json!({})),
            ("l", "h.listed", json!({})),
            ("u", "h.open", json!({})),
        ],
    )
    .await;
    for c in &r.results[..3] {
        assert_eq!(c.error.as_ref().unwrap().code, "egress-denied", "{}", c.id);
    }
    assert_eq!(r.results[3].status, Status::Ok);
    assert_eq!(r.results[4].status, Status::Ok);
    assert_eq!(s.requests().len(), 2, "refused requests sent nothing");
}

#[tokio::test]
async fn header_values_from_input_cannot_inject_headers() {
    let s = http_server::start().await;
    let mut spec = get(&s, "/echo");
    spec["headers"] = json!([{"name": "X-Trace", "value": "t-{trace}"}]);
    let k = kernel(vec![http_tool("h.trace", spec, json!({}))]);
    let r = run(
        &k,
        vec![
            ("ok", "h.trace", json!({"trace": "a/b c"})),
            ("bad", "h.trace", json!({"trace": "x\r\nX-Evil: 1"})),
        ],
    )
    .await;
    assert_eq!(
        r.results[0].output.as_ref().unwrap()["headers"]["x-trace"],
        "t-a/b c",
        "header values are not encoded"
    );
    assert_eq!(r.results[1].error.as_ref().unwrap().code, "invalid-input");
    assert_eq!(s.requests().len(), 1);
}

#[tokio::test]
async fn conflicting_requests_never_overlap_and_independent_ones_run_together() {
    let s = http_server::start().await;
    let effects =
        json!({"mutating": true, "effects": [{"kind": "writes", "resource": "res:{name}"}]});
    let k = kernel(vec![
        http_tool("h.hold", get(&s, "/hold/{name}"), effects.clone()),
        http_tool("h.barrier", get(&s, "/barrier/3?name={name}"), effects),
    ]);
    let r = run(
        &k,
        vec![
            ("a1", "h.hold", json!({"name": "a"})),
            ("a2", "h.hold", json!({"name": "a"})),
            ("a3", "h.hold", json!({"name": "a"})),
        ],
    )
    .await;
    assert!(r.results.iter().all(|c| c.status == Status::Ok));
    let mut seen = s.requests();
    seen.sort_by_key(|q| q.arrived);
    for w in seen.windows(2) {
        assert!(
            w[0].answered <= w[1].arrived,
            "two writes of res:a overlapped at the server"
        );
    }
    // Three writes of different resources: the server answers only when all three are in flight.
    let r = run(
        &k,
        vec![
            ("x", "h.barrier", json!({"name": "x"})),
            ("y", "h.barrier", json!({"name": "y"})),
            ("z", "h.barrier", json!({"name": "z"})),
        ],
    )
    .await;
    for c in &r.results {
        assert_eq!(c.status, Status::Ok, "{}: {:?}", c.id, c.error);
    }
}

#[tokio::test]
async fn the_cli_runs_http_tools_with_secrets_from_the_environment() {
    let s = http_server::start().await;
    let dir = support::temp_dir("http-cli");
    let manifest = json!({"id": "acme.whoami", "description": "Who am I", "version": "1.0.0",
        "input": {"type": "object", "properties": {"user": {"type": "string"}}}, "output": {},
        "mutating": false, "effects": [{"kind": "network", "resource": "net:127.0.0.1"}],
        "network": {"kind": "allowlist", "hosts": ["127.0.0.1"]},
        "spec": {"kind": "http", "method": "GET", "urlTemplate": s.url("/echo/{user}"),
                 "authorization": {"kind": "bearer", "secretRef": {"envName": "SLUICE_TEST_TOKEN", "name": "token"}}}});
    std::fs::write(dir.join("whoami.json"), manifest.to_string()).unwrap();
    let batch = json!({"tenant": "t", "calls": [{"id": "w", "tool": "acme.whoami", "input": {"user": "ada"}}]});
    let tools = dir.to_str().unwrap().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(["run", "--tools", &tools, "--batch", "-"])
            .env("SLUICE_TEST_TOKEN", "env-t0ken")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(batch.to_string().as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["results"][0]["status"], "ok", "{v}");
    assert_eq!(
        v["results"][0]["output"]["headers"]["authorization"],
        "Bearer env-t0ken"
    );
    assert_eq!(v["results"][0]["output"]["target"], "/echo/ada");
}
