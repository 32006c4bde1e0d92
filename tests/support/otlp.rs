//! An OTLP/HTTP trace receiver on loopback for the gateway's tests: it takes `POST /v1/traces`
//! (protobuf, as the exporter sends it), decodes each request with the OpenTelemetry project's
//! message types and keeps every span, flattened.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// One received span.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: HashMap<String, String>,
    /// The span ids it links to, with each link's attributes.
    pub links: Vec<(String, HashMap<String, String>)>,
    pub events: Vec<String>,
    /// 2 is error (the OTLP status code).
    pub status_code: i32,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    /// The service name of its resource.
    pub service: String,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// A running receiver.
#[derive(Clone)]
pub struct Receiver {
    pub addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    /// What it refused to decode (a test fails on any).
    errors: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }
}

fn attributes(kv: &[KeyValue]) -> HashMap<String, String> {
    kv.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn flatten(req: ExportTraceServiceRequest) -> Vec<Span> {
    let mut out = Vec::new();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .and_then(|a| a.get("service.name").cloned())
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Span {
                    name: s.name,
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent_span_id: hex::encode(&s.parent_span_id),
                    attributes: attributes(&s.attributes),
                    links: s
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.span_id), attributes(&l.attributes)))
                        .collect(),
                    events: s.events.iter().map(|e| e.name.clone()).collect(),
                    status_code: s.status.as_ref().map_or(0, |st| st.code),
                    start_unix_nano: s.start_time_unix_nano,
                    end_unix_nano: s.end_time_unix_nano,
                    service: service.clone(),
                });
            }
        }
    }
    out
}

/// Starts a receiver on a free loopback port (on the current runtime).
pub async fn start() -> Receiver {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let receiver = Receiver {
        addr: listener.local_addr().unwrap(),
        spans: Arc::default(),
        errors: Arc::default(),
    };
    let r = receiver.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let r = r.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let r = r.clone();
                        async move {
                            let path = req.uri().path().to_owned();
                            let body = req.into_body().collect().await?.to_bytes();
                            let status =
                                match (path.as_str(), ExportTraceServiceRequest::decode(body)) {
                                    ("/v1/traces", Ok(decoded)) => {
                                        r.spans.lock().unwrap().extend(flatten(decoded));
                                        200
                                    }
                                    (p, Err(e)) => {
                                        r.errors.lock().unwrap().push(format!("{p}: {e}"));
                                        400
                                    }
                                    (p, Ok(_)) => {
                                        r.errors
                                            .lock()
                                            .unwrap()
                                            .push(format!("unexpected path {p}"));
                                        404
                                    }
                                };
                            let answer = ExportTraceServiceResponse::default().encode_to_vec();
                            let mut resp = hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::from(answer),
                            ));
                            *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            resp.headers_mut().insert(
                                hyper::header::CONTENT_TYPE,
                                hyper::header::HeaderValue::from_static("application/x-protobuf"),
                            );
                            Ok::<_, hyper::Error>(resp)
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    receiver
}
