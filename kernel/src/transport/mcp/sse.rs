//! The older HTTP+SSE transport (`mcp+sse://`), which rmcp no longer carries.
//!
//! The client opens a `GET` event stream on the endpoint URL. The server's first event,
//! `endpoint`, names the URL (usually relative, with a session id) to which the client `POST`s
//! each JSON-RPC message; the server's messages, responses included, arrive as `message` events
//! on the stream. The stream ending ends the session.

use std::io;

use futures::StreamExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;
use sse_stream::SseStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// An MCP client transport over HTTP+SSE.
#[derive(Debug)]
pub struct SseClientTransport {
    client: reqwest::Client,
    post_url: reqwest::Url,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: JoinHandle<()>,
}

impl SseClientTransport {
    /// Opens the event stream at `url` and waits for the server's `endpoint` event.
    pub async fn connect(client: reqwest::Client, url: &str) -> io::Result<Self> {
        let base = reqwest::Url::parse(url)
            .map_err(|e| io::Error::other(format!("`{url}` is not a URL: {e}")))?;
        let response = client
            .get(base.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| io::Error::other(format!("cannot open the event stream: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            return Err(io::Error::other(format!(
                "the event stream was refused with HTTP {status}"
            )));
        }
        let mut events = SseStream::from_bytes_stream(response.bytes_stream());
        let post_url = loop {
            match events.next().await {
                Some(Ok(e)) if e.event.as_deref() == Some("endpoint") => {
                    let data = e.data.unwrap_or_default();
                    break base.join(data.trim()).map_err(|err| {
                        io::Error::other(format!(
                            "the server's endpoint event `{data}` is not a URL: {err}"
                        ))
                    })?;
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    return Err(io::Error::other(format!("the event stream broke: {e}")));
                }
                None => {
                    return Err(io::Error::other(
                        "the event stream ended before the server named its message endpoint",
                    ));
                }
            }
        };
        // The messages go where the stream came from: a server may not send them elsewhere (the
        // egress checks judged the stream's URL, not another host).
        if post_url.origin() != base.origin() {
            return Err(io::Error::other(format!(
                "the server's endpoint event names `{post_url}`, another origin than the event \
                 stream's: refused"
            )));
        }
        let (tx, incoming) = mpsc::channel(64);
        let reader = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let Ok(event) = event else { break };
                if !matches!(event.event.as_deref(), None | Some("message")) {
                    continue;
                }
                let Some(data) = event.data else { continue };
                match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                    Ok(message) => {
                        if tx.send(message).await.is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(target: "sluice::mcp", "an SSE message is not JSON-RPC: {e}")
                    }
                }
            }
        });
        Ok(SseClientTransport {
            client,
            post_url,
            incoming,
            reader,
        })
    }
}

impl Transport<RoleClient> for SseClientTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let request = self.client.post(self.post_url.clone()).json(&item);
        async move {
            let response = request
                .send()
                .await
                .map_err(|e| io::Error::other(format!("cannot post a message: {e}")))?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(io::Error::other(format!(
                    "the server refused a message with HTTP {status}"
                )))
            }
        }
    }

    fn receive(
        &mut self,
    ) -> impl std::future::Future<Output = Option<ServerJsonRpcMessage>> + Send {
        self.incoming.recv()
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.reader.abort();
        std::future::ready(Ok(()))
    }
}

impl Drop for SseClientTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}
