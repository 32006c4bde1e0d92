//! The MCP transport against a server nobody here wrote: the reference server
//! `@modelcontextprotocol/server-everything` (npm), over stdio and over the legacy SSE transport.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use sluice_kernel::model::McpEndpoint;
use sluice_kernel::run::Kernel;
use sluice_kernel::transport::mcp::{import_manifests, EffectsCatalog, ImportOptions};
use sluice_kernel::{Batch, Call, Status};
use support::mcp::{everything_stdio, kernel_of, mcp_manifest, run_one, unresolved_tool};

fn text_of(output: &Value) -> String {
    output
        .as_array()
        .and_then(|a| a.first())
        .and_then(|c| c["text"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Waits until the endpoint has a live session (its server started), up to a generous bound.
async fn live_pid(kernel: &Kernel, endpoint: &str) -> u32 {
    for _ in 0..600 {
        let status = kernel.mcp_status();
        let s = status
            .iter()
            .find(|s| s.endpoint == endpoint)
            .expect("the endpoint is known");
        if let (true, Some(pid)) = (s.live, s.pid) {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the MCP server of {endpoint} never started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_and_get_sum_run_on_one_shared_session() {
    let e = everything_stdio("");
    let k = kernel_of(vec![
        mcp_manifest("ev.echo", &e, json!({})),
        mcp_manifest("ev.sum", &e, json!({"metadata": {"mcpTool": "get-sum"}})),
    ]);
    let r = k
        .run(
            Batch::new(
                "t",
                vec![
                    Call::new("e", "ev.echo", json!({"message": "hello"})),
                    Call::new("s", "ev.sum", json!({"a": 2, "b": 40})),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    assert_eq!(
        text_of(r.results[0].output.as_ref().unwrap()),
        "Echo: hello"
    );
    assert_eq!(r.results[1].status, Status::Ok, "{:?}", r.results[1].error);
    assert_eq!(
        text_of(r.results[1].output.as_ref().unwrap()),
        "The sum of 2 and 40 is 42."
    );
    let status = k.mcp_status();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].starts, 1, "both tools share one session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_calls_share_one_session() {
    let e = everything_stdio("");
    let k = kernel_of(vec![mcp_manifest("ev.echo", &e, json!({}))]);
    let calls = (0..200)
        .map(|i| {
            Call::new(
                format!("c{i}"),
                "ev.echo",
                json!({"message": format!("m{i}")}),
            )
        })
        .collect();
    let r = k.run(Batch::new("t", calls).unwrap()).await.unwrap();
    for (i, c) in r.results.iter().enumerate() {
        assert_eq!(c.status, Status::Ok, "{}: {:?}", c.id, c.error);
        assert_eq!(text_of(c.output.as_ref().unwrap()), format!("Echo: m{i}"));
    }
    assert_eq!(k.mcp_status()[0].starts, 1, "one session for all 200 calls");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_call_times_out_and_the_session_stays_usable() {
    let e = everything_stdio("");
    let k = kernel_of(vec![
        mcp_manifest(
            "ev.long",
            &e,
            json!({"metadata": {"mcpTool": "trigger-long-running-operation"},
                   "limits": {"memMB": 4096, "cpuMs": 300}}),
        ),
        mcp_manifest("ev.echo", &e, json!({})),
    ]);
    let r = run_one(&k, "long", "ev.long", json!({"duration": 30, "steps": 3})).await;
    assert_eq!(
        r.results[0].status,
        Status::Timeout,
        "{:?}",
        r.results[0].error
    );
    let r = run_one(&k, "after", "ev.echo", json!({"message": "still here"})).await;
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    assert_eq!(
        k.mcp_status()[0].starts,
        1,
        "a timeout does not restart the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_fails_that_call_and_restarts_on_the_next() {
    let e = everything_stdio("");
    let k = kernel_of(vec![
        mcp_manifest(
            "ev.long",
            &e,
            json!({"metadata": {"mcpTool": "trigger-long-running-operation"}}),
        ),
        mcp_manifest("ev.echo", &e, json!({})),
    ]);
    let handle = k
        .submit(
            Batch::new(
                "t",
                vec![Call::new(
                    "long",
                    "ev.long",
                    json!({"duration": 60, "steps": 2}),
                )],
            )
            .unwrap(),
        )
        .unwrap();
    let pid = live_pid(&k, &e).await;
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let r = handle.finish().await;
    let long = &r.results[0];
    assert_eq!(long.status, Status::Error);
    let err = long.error.as_ref().unwrap();
    assert_eq!(err.code, "mcp-server-exited", "{}", err.message);
    assert!(
        err.message.contains(&e),
        "names the endpoint: {}",
        err.message
    );

    let r = run_one(&k, "next", "ev.echo", json!({"message": "again"})).await;
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    let status = &k.mcp_status()[0];
    assert_eq!(status.starts, 2, "the next call started the server again");
    assert_ne!(status.pid, Some(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_past_its_memory_cap_is_killed_and_its_calls_fail_with_limits_exceeded() {
    // Node's resident memory is tens of MiB: a 1 MiB cap is exceeded at the first reading.
    let e = everything_stdio("");
    let k = kernel_of(vec![mcp_manifest(
        "ev.long",
        &e,
        json!({"metadata": {"mcpTool": "trigger-long-running-operation"},
               "limits": {"memMB": 1, "cpuMs": 60000}}),
    )]);
    let r = run_one(&k, "long", "ev.long", json!({"duration": 60, "steps": 2})).await;
    let c = &r.results[0];
    assert_eq!(c.status, Status::Error);
    let err = c.error.as_ref().unwrap();
    assert_eq!(err.code, "limits-exceeded", "{}", err.message);
    assert!(err.message.contains("memMB"), "{}", err.message);
    let status = &k.mcp_status()[0];
    assert_eq!(status.mem_cap_mb, Some(1));
    assert!(!status.live, "the server was killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_strict_sandbox_the_server_sees_only_the_declared_environment() {
    // `cargo test` sets CARGO_MANIFEST_DIR for this process; a strict server must not see it.
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());
    let e = everything_stdio("");
    let path = std::env::var("PATH").unwrap();
    let k = Kernel::builder()
        .tool(unresolved_tool(mcp_manifest(
            "ev.get-env",
            &e,
            json!({"sandbox": "strict",
                   "needsSpec": {"env": {"PATH": {"type": "string"},
                                         "SLUICE_PROBE": {"type": "string", "default": "declared"}}}}),
        )))
        .env("PATH", &path)
        .build()
        .unwrap();
    let r = run_one(&k, "env", "ev.get-env", json!({})).await;
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    let env: Value = serde_json::from_str(&text_of(r.results[0].output.as_ref().unwrap())).unwrap();
    assert_eq!(env["SLUICE_PROBE"], "declared");
    assert_eq!(env["PATH"], path.as_str());
    assert!(env.get("CARGO_MANIFEST_DIR").is_none(), "{env}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_cannot_start_fails_its_calls_clearly() {
    let k = kernel_of(vec![
        mcp_manifest(
            "gone.echo",
            "mcp+stdio:///nonexistent/mcp-server",
            json!({}),
        ),
        mcp_manifest("quits.echo", "mcp+stdio://true", json!({})),
    ]);
    let r = k
        .run(
            Batch::new(
                "t",
                vec![
                    Call::new("a", "gone.echo", json!({})),
                    Call::new("b", "quits.echo", json!({})),
                ],
            )
            .unwrap(),
        )
        .await
        .unwrap();
    for c in &r.results {
        assert_eq!(c.status, Status::Error);
        let err = c.error.as_ref().unwrap();
        assert_eq!(err.code, "mcp-unavailable", "{}", err.message);
    }
    let gone = &r.results[0].error.as_ref().unwrap().message;
    assert!(gone.contains("/nonexistent/mcp-server"), "{gone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_makes_valid_conservative_manifests() {
    let e = McpEndpoint::parse(&everything_stdio("")).unwrap();
    // The hints alone (no catalog: docs/mcp-effects.md; tests/mcp_effects.rs holds the catalog).
    let options = ImportOptions::default()
        .with_prefix("ev")
        .with_catalog(EffectsCatalog::empty());
    let imported = import_manifests(&e, &options).await.unwrap();
    assert_eq!(imported.prefix, "ev");
    let by_id = |id: &str| {
        imported
            .manifests
            .iter()
            .find(|m| m["id"] == id)
            .unwrap_or_else(|| panic!("{id} imported"))
    };
    for m in &imported.manifests {
        let report = sluice_kernel::model::validate(m, Default::default());
        assert!(report.is_valid(), "{}: {:?}", m["id"], report.errors);
        let hinted = m["metadata"]["mcpAnnotations"]["readOnlyHint"] == true;
        assert_eq!(m["mutating"], !hinted, "{}", m["id"]);
    }
    let sum = by_id("ev.get-sum");
    assert_eq!(
        sum["effects"],
        json!([{"kind": "reads", "resource": "ev:*",
                                       "notes": "imported: the server hints readOnlyHint"}])
    );
    assert_eq!(sum["input"]["required"], json!(["a", "b"]));
    let toggle = by_id("ev.toggle-simulated-logging");
    assert!(toggle.get("effects").is_none(), "{toggle}");

    // The imported tools run as they are.
    let k = kernel_of(imported.manifests.clone());
    let r = run_one(&k, "s", "ev.get-sum", json!({"a": 1, "b": 2})).await;
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
}

/// The reference server in its SSE mode on a free loopback port, killed when dropped.
struct SseServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for SseServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn sse_server() -> SseServer {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(support::mcp::everything_bin())
        .arg("sse")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = SseServer { child, port };
    for _ in 0..600 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the SSE server never listened on port {port}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_sse_transport_carries_calls() {
    let server = sse_server().await;
    let e = format!("mcp+sse://127.0.0.1:{}/sse", server.port);
    let k = kernel_of(vec![
        mcp_manifest("ev.echo", &e, json!({})),
        mcp_manifest("ev.get-sum", &e, json!({})),
    ]);
    let calls = (0..20)
        .map(|i| Call::new(format!("s{i}"), "ev.get-sum", json!({"a": i, "b": 1})))
        .chain([Call::new("e", "ev.echo", json!({"message": "over sse"}))])
        .collect();
    let r = k.run(Batch::new("t", calls).unwrap()).await.unwrap();
    for (i, c) in r.results.iter().take(20).enumerate() {
        assert_eq!(c.status, Status::Ok, "{}: {:?}", c.id, c.error);
        assert_eq!(
            text_of(c.output.as_ref().unwrap()),
            format!("The sum of {i} and 1 is {}.", i + 1)
        );
    }
    assert_eq!(
        text_of(r.results[20].output.as_ref().unwrap()),
        "Echo: over sse"
    );
    assert_eq!(k.mcp_status()[0].starts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_while_the_server_starts_does_not_abandon_the_start() {
    let e = everything_stdio("");
    let k = kernel_of(vec![
        mcp_manifest(
            "ev.hasty",
            &e,
            json!({"metadata": {"mcpTool": "echo"},
                                            "limits": {"memMB": 4096, "cpuMs": 1}}),
        ),
        mcp_manifest("ev.echo", &e, json!({})),
    ]);
    let r = run_one(&k, "h", "ev.hasty", json!({"message": "x"})).await;
    assert_eq!(
        r.results[0].status,
        Status::Timeout,
        "{:?}",
        r.results[0].error
    );
    // The start the hasty call began goes on and is shared by the next call.
    live_pid(&k, &e).await;
    let r = run_one(&k, "e", "ev.echo", json!({"message": "y"})).await;
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    assert_eq!(k.mcp_status()[0].starts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_strict_the_server_inherits_the_environment_plus_the_declared_values() {
    let e = everything_stdio("");
    let k = Kernel::builder()
        .tool(unresolved_tool(mcp_manifest(
            "ev.get-env",
            &e,
            json!({"needsSpec": {"env": {"SLUICE_GIVEN": {"type": "string"}}}}),
        )))
        .env("SLUICE_GIVEN", "from the embedder")
        .build()
        .unwrap();
    let r = run_one(&k, "env", "ev.get-env", json!({})).await;
    assert_eq!(r.results[0].status, Status::Ok, "{:?}", r.results[0].error);
    let env: Value = serde_json::from_str(&text_of(r.results[0].output.as_ref().unwrap())).unwrap();
    assert_eq!(env["SLUICE_GIVEN"], "from the embedder");
    assert!(env.get("CARGO_MANIFEST_DIR").is_some(), "inherited: {env}");
}
