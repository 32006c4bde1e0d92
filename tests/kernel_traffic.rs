//! The kernel under concurrent traffic: many batches of one tenant at once, cancelled, dropped,
//! failing, panicking, waiting for approvals — on tokio's paused clock, from a seeded schedule.
//!
//! Each schedule is generated from one `u64` seed and run on a current-thread runtime whose clock
//! is paused, so virtual time advances only when every task waits: a handler that "takes 30 ms"
//! takes exactly 30 virtual ms, and the kernel's own work takes none. That makes the expected start
//! of every call computable exactly, and the checks below compare it with what the handlers saw:
//!
//! - **no overlap**: two conflicting calls that both ran did not run at the same time (compared by
//!   a global event counter, so that zero-length calls count too);
//! - **submission order**: of two conflicting calls, the one submitted first started first;
//! - **no false waits, no early starts**: every call started exactly when its last conflicting
//!   predecessor let go (or when it was submitted, or approved), not a virtual nanosecond later or
//!   earlier;
//! - **exactly once**: every accepted call is recorded exactly once, every batch ends once, and a
//!   batch read to the end reports every call once;
//! - **nothing left**: when the traffic is over, the tenant's load is (0, 0) and the kernel holds
//!   no state for any tenant.
//!
//! Two tenants share the traffic. Their calls of per-tenant tools never wait for each other; the
//! calls of the two shared tools (`h.sput`, `h.sget`: [`TenantScope::Shared`], one resource for
//! every tenant) are ordered across tenants too, exactly as a tenant's own calls are, and no edge
//! record ever joins two tenants.
//!
//! `SLUICE_SCHEDULES` (or `PROPTEST_CASES`) sets how many schedules run (default 1,000);
//! `SLUICE_SEED=<seed>` replays one. A failing schedule panics with its seed and the command that
//! replays it. docs/testing.md explains the harness.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};
use sluice_kernel::access::{Access, Normalizers, Pattern};
use sluice_kernel::authorize::{
    ApprovalFuture, ApprovalOutcome, ApprovalRequest, Approver, AuthRequest, Authorization,
    DecidedBy, Decision,
};
use sluice_kernel::order::first_conflict;
use sluice_kernel::order::shared::SharedDomain;
use sluice_kernel::provenance::Record;
use sluice_kernel::run::{BatchOptions, Kernel, OnFailure};
use sluice_kernel::transport::{handler, TenantScope, ToolContext, ToolError, ToolRegistry};
use sluice_kernel::{Batch, Call, CallResult, Status};
use tokio::time::Instant;

/// The handler deadline (`default_timeout`) and the approval timeout of the harness's kernel.
const DEADLINE: Duration = Duration::from_millis(200);
const APPROVAL_TIMEOUT: Duration = Duration::from_millis(300);
/// Every planned time is an even number of ms and every cancellation an odd one, so that a
/// cancellation never falls on the instant a call becomes ready or ends (tokio's timer counts
/// whole milliseconds).
const ODD_MS: Duration = Duration::from_millis(1);

// ---------------------------------------------------------------------------------------------
// What the handlers, the approver and the provenance sink saw.

#[derive(Debug, Default)]
struct Seen {
    /// A counter bumped at every start and end: a total order of handler events.
    events: u64,
    started: HashMap<String, (Duration, u64)>,
    /// Each started call's fencing token (with a shared domain: its admission number).
    tokens: HashMap<String, u64>,
    ended: HashMap<String, (Duration, u64)>,
    /// Each call's recorded outcome (known for dropped and detached batches too).
    outcomes: HashMap<String, Status>,
    /// Each call's recorded error message, if it has one.
    errors: HashMap<String, String>,
    /// Call records per call id, and batch records per batch id.
    call_records: HashMap<String, usize>,
    batch_records: HashMap<String, usize>,
    /// Edge records: (from call, to call).
    edges: Vec<(String, String)>,
    /// Each edge record with the number of call records placed before it, and each call
    /// record's place: the log's order, as the sink was handed it.
    edge_places: Vec<(String, usize)>,
    call_places: HashMap<String, usize>,
    /// When each batch was cancelled (by its token or by dropping its handle).
    cancelled_at: HashMap<usize, Duration>,
    /// What each submission returned: call id -> (batch, virtual time), in submission order.
    submitted: Vec<(String, usize, Duration)>,
    /// Results read back from the batches read to the end: call id -> times reported.
    reported: HashMap<String, usize>,
    /// Results read back, by call id.
    results: HashMap<String, CallResult>,
}

#[derive(Debug, Clone)]
struct World {
    t0: Instant,
    seen: Arc<Mutex<Seen>>,
    /// Held across a submission and its entry in `seen.submitted` (not `seen` itself: a
    /// submission may record a refused call at once, through the sink).
    submitting: Arc<Mutex<()>>,
}

impl World {
    fn new() -> Self {
        World {
            t0: Instant::now(),
            seen: Arc::default(),
            submitting: Arc::default(),
        }
    }

    fn now(&self) -> Duration {
        Instant::now() - self.t0
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn start(&self, call: &str, token: Option<u64>) {
        let now = self.now();
        let mut s = self.seen();
        s.events += 1;
        let at = (now, s.events);
        s.started.insert(call.to_owned(), at);
        if let Some(t) = token {
            s.tokens.insert(call.to_owned(), t);
        }
    }

    fn end(&self, call: &str) {
        let now = self.now();
        let mut s = self.seen();
        s.events += 1;
        let at = (now, s.events);
        s.ended.insert(call.to_owned(), at);
    }
}

/// Records a handler's end when its future finishes, panics or is dropped (deadline, cancel).
struct EndGuard {
    world: World,
    call: String,
}

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.world.end(&self.call);
    }
}

// ---------------------------------------------------------------------------------------------
// The tools, the authorizer, the normalizer and the approver of the harness.

/// `(id, effects, mutating)` of every harness tool. `h.ask` is asked about, `h.deny` denied,
/// `h.boom` makes the authorizer panic, `h.norm` a normalizer panic when its key is `bad`.
const TOOLS: &[(&str, &str, bool)] = &[
    (
        "h.put",
        r#"[{"kind": "writes", "resource": "r:{key}"}]"#,
        true,
    ),
    (
        "h.get",
        r#"[{"kind": "reads", "resource": "r:{key}"}]"#,
        false,
    ),
    (
        "h.scan",
        r#"[{"kind": "reads", "resource": "r:{p}*"}]"#,
        false,
    ),
    (
        "h.wipe",
        r#"[{"kind": "deletes", "resource": "r:{p}*"}]"#,
        true,
    ),
    (
        "h.move",
        r#"[{"kind": "reads", "resource": "r:{from}"}, {"kind": "writes", "resource": "r:{to}"}]"#,
        true,
    ),
    ("h.pure", r#"[]"#, false),
    (
        "h.ask",
        r#"[{"kind": "writes", "resource": "r:{key}"}]"#,
        true,
    ),
    (
        "h.deny",
        r#"[{"kind": "writes", "resource": "r:{key}"}]"#,
        true,
    ),
    (
        "h.boom",
        r#"[{"kind": "writes", "resource": "r:{key}"}]"#,
        true,
    ),
    (
        "h.norm",
        r#"[{"kind": "writes", "resource": "p:{key}"}]"#,
        true,
    ),
    (
        "h.sput",
        r#"[{"kind": "writes", "resource": "r:{key}"}]"#,
        true,
    ),
    (
        "h.sget",
        r#"[{"kind": "reads", "resource": "r:{key}"}]"#,
        false,
    ),
];

/// The harness tools whose resources every tenant shares.
const SHARED: &[&str] = &["h.sput", "h.sget"];

fn is_shared(tool: &str) -> bool {
    SHARED.contains(&tool)
}

/// One handler for every harness tool; it reaches its schedule's [`World`] through the need
/// slot `world`, so that the tools (and their compiled schemas) are built once per process.
fn behaviour() -> Arc<dyn sluice_kernel::transport::Handler> {
    handler(move |ctx: ToolContext, input: Value| {
        let world = ctx.need::<World>("world");
        async move {
            let world: Arc<World> = world.map_err(|e| ToolError::new("no-world", e.to_string()))?;
            let call = ctx.call_id().to_owned();
            world.start(&call, ctx.fencing_token());
            let _end = EndGuard {
                world: World::clone(&world),
                call,
            };
            if let Some(ms) = input["ms"].as_u64().filter(|ms| *ms > 0) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            if input["panic"] == true {
                panic!("harness: the handler panics on purpose");
            }
            if input["fail"] == true {
                return Err(ToolError::new("broken", "fails on purpose"));
            }
            Ok(json!({}))
        }
    })
}

fn authorize(req: &AuthRequest<'_>) -> Authorization {
    match req.tool.id.as_str() {
        "h.ask" => Authorization::new(Decision::Ask, DecidedBy::rule("ask-rule")),
        "h.deny" => Authorization::new(Decision::Deny, DecidedBy::rule("deny-rule")),
        "h.boom" => panic!("harness: the authorizer panics on purpose"),
        _ => Authorization::new(Decision::Allow, DecidedBy::rule("allow-rule")),
    }
}

fn normalizers() -> Normalizers {
    let mut n = Normalizers::default();
    n.register("p", |p: Pattern| {
        if p.to_text().contains("bad") {
            panic!("harness: the normalizer panics on purpose");
        }
        p
    });
    n
}

/// Answers by the call's input: `answer` is `yes`, `no`, `hang` or `panic`, after `ask_ms`.
#[derive(Debug)]
struct ScriptedApprover;

impl Approver for ScriptedApprover {
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        Box::pin(async move {
            let ms = request.input["ask_ms"].as_u64().unwrap_or(0);
            match request.input["answer"].as_str().unwrap_or("yes") {
                "panic" => panic!("harness: the approver panics on purpose"),
                "hang" => std::future::pending().await,
                answer => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(if answer == "yes" {
                        ApprovalOutcome::Approved {
                            by: "script".into(),
                        }
                    } else {
                        ApprovalOutcome::Rejected {
                            by: "script".into(),
                            reason: "scripted no".into(),
                        }
                    })
                }
            }
        })
    }
}

/// The harness tools, built once.
fn tools() -> ToolRegistry {
    static TOOLS_BUILT: OnceLock<ToolRegistry> = OnceLock::new();
    TOOLS_BUILT
        .get_or_init(|| {
            let mut registry = ToolRegistry::new();
            for (id, effects, mutating) in TOOLS {
                let effects: Value = serde_json::from_str(effects).expect("harness effects parse");
                let mut tool = support::tool(id, effects, *mutating, behaviour());
                if is_shared(id) {
                    tool = tool.with_scope(TenantScope::Shared);
                }
                registry
                    .insert(tool)
                    .expect("harness tool ids are distinct");
            }
            registry
        })
        .clone()
}

/// Concurrency caps for a schedule: the kernel-wide cap, and the cap of `h.put`.
#[derive(Debug, Clone, Copy)]
struct Caps {
    global: usize,
    put: usize,
}

fn kernel_with(world: &World, deadline: Option<Duration>, caps: Option<Caps>) -> Kernel {
    kernel_built(world, deadline, caps, true, None)
}

/// The harness kernel; `provenance`: whether it has a provenance sink (without one, a call
/// cancelled while it waits is reported at once).
fn kernel_built(
    world: &World,
    deadline: Option<Duration>,
    caps: Option<Caps>,
    provenance: bool,
    shared: Option<Arc<dyn SharedDomain>>,
) -> Kernel {
    let sink_world = world.clone();
    let mut builder = Kernel::builder();
    if let Some(d) = deadline {
        builder = builder.default_timeout(d);
    }
    if let Some(c) = caps {
        builder = builder
            .max_concurrency(c.global)
            .tool_concurrency("h.put", c.put);
    }
    if let Some(d) = shared {
        builder = builder.shared_domain(d);
    }
    builder = builder
        .tools(tools())
        .need("world", world.clone())
        .authorizer(authorize)
        .approver(ScriptedApprover)
        .normalizers(normalizers())
        .approval_timeout(APPROVAL_TIMEOUT);
    if provenance {
        builder = builder.provenance(move |record: Record| {
            let mut s = sink_world.seen();
            match record {
                Record::Call(c) => {
                    if let Some(m) = &c.error_message {
                        s.errors.insert(c.call.clone(), m.clone());
                    }
                    s.outcomes.insert(c.call.clone(), c.outcome);
                    let place = s.call_places.len();
                    s.call_places.insert(c.call.clone(), place);
                    *s.call_records.entry(c.call).or_default() += 1
                }
                Record::Batch(b) => *s.batch_records.entry(b.batch).or_default() += 1,
                Record::Edge(e) => {
                    let place = s.call_places.len();
                    s.edge_places.push((e.from.clone(), place));
                    s.edges.push((e.from, e.to))
                }
                // A closure sink is not durable first: the kernel hands it no intents.
                Record::Intent(_) => {}
            }
        });
    }
    builder.build().expect("the harness kernel builds")
}

/// Silences the panics the harness causes on purpose; every other panic prints as usual.
fn quiet_planned_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if !msg.starts_with("harness:") {
                default(info);
            }
        }));
    });
}

// ---------------------------------------------------------------------------------------------
// Schedules.

#[derive(Debug, Clone)]
struct PlannedCall {
    id: String,
    tool: &'static str,
    input: Value,
    /// Virtual ms to wait before submitting it.
    gap_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// Close, then wait for every result in submission order.
    Finish,
    /// Close, then read the completions as they come.
    Stream,
    /// Cancel through the batch's token this many ms after the batch opens (+1 ms), and still
    /// read every result.
    Cancel(u64),
    /// Drop the handle (+1 ms) after this many submissions, without closing it.
    Drop(usize),
    /// Close and detach: nobody reads the results.
    Detach,
}

#[derive(Debug, Clone)]
struct PlannedBatch {
    n: usize,
    tenant: &'static str,
    start_ms: u64,
    skip_dependents: bool,
    end: End,
    calls: Vec<PlannedCall>,
}

fn pick<'a, T>(rng: &mut Xoshiro256PlusPlus, weighted: &'a [(u32, T)]) -> &'a T {
    let total: u32 = weighted.iter().map(|(w, _)| w).sum();
    let mut at = rng.random_range(0..total);
    for (w, t) in weighted {
        if at < *w {
            return t;
        }
        at -= w;
    }
    &weighted[weighted.len() - 1].1
}

/// A quarter of the schedules run under concurrency caps (drawn from their own stream, so that
/// the batches of a seed do not depend on it).
fn caps(seed: u64) -> Option<Caps> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xca95_ca95);
    rng.random_bool(0.25).then(|| Caps {
        global: rng.random_range(1..5usize),
        put: rng.random_range(1..3usize),
    })
}

fn schedule(seed: u64) -> Vec<PlannedBatch> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let keys = ["a", "b", "c", "d"];
    let prefixes = ["", "a", "b"];
    let batches = rng.random_range(2..8usize);
    (0..batches)
        .map(|n| {
            let size = if rng.random_bool(0.2) {
                rng.random_range(65..90usize)
            } else {
                rng.random_range(1..16usize)
            };
            let calls = (0..size)
                .map(|i| {
                    let tool = *pick(
                        &mut rng,
                        &[
                            (25, "h.put"),
                            (25, "h.get"),
                            (7, "h.scan"),
                            (3, "h.wipe"),
                            (8, "h.move"),
                            (5, "h.pure"),
                            (9, "h.ask"),
                            (3, "h.deny"),
                            (2, "h.boom"),
                            (4, "h.norm"),
                            (8, "h.sput"),
                            (8, "h.sget"),
                        ],
                    );
                    let key = keys[rng.random_range(0..keys.len())];
                    let mut input = match tool {
                        "h.scan" | "h.wipe" => {
                            json!({"p": prefixes[rng.random_range(0..prefixes.len())]})
                        }
                        "h.move" => json!({
                            "from": keys[rng.random_range(0..keys.len())],
                            "to": keys[rng.random_range(0..keys.len())],
                        }),
                        "h.norm" if rng.random_bool(0.4) => json!({"key": "bad"}),
                        _ => json!({"key": key}),
                    };
                    let (quick, slow) = (
                        2 * rng.random_range(1..15u64),
                        2 * rng.random_range(150..400u64),
                    );
                    input["ms"] = json!(*pick(&mut rng, &[(40, 0u64), (45, quick), (15, slow)]));
                    input["fail"] = json!(rng.random_bool(0.08));
                    input["panic"] = json!(rng.random_bool(0.04));
                    if tool == "h.ask" {
                        input["answer"] = json!(*pick(
                            &mut rng,
                            &[(50, "yes"), (25, "no"), (12, "hang"), (13, "panic")]
                        ));
                        input["ask_ms"] = json!(2 * rng.random_range(0..125u64));
                    }
                    PlannedCall {
                        id: format!("b{n}c{i}"),
                        tool,
                        input,
                        gap_ms: if rng.random_bool(0.6) {
                            0
                        } else {
                            2 * rng.random_range(1..4u64)
                        },
                    }
                })
                .collect::<Vec<_>>();
            let (cancel_ms, drop_after) =
                (2 * rng.random_range(0..200u64), rng.random_range(0..=size));
            let end = *pick(
                &mut rng,
                &[
                    (35, End::Finish),
                    (20, End::Stream),
                    (20, End::Cancel(cancel_ms)),
                    (15, End::Drop(drop_after)),
                    (10, End::Detach),
                ],
            );
            PlannedBatch {
                n,
                tenant: if rng.random_bool(0.7) { "t" } else { "u" },
                start_ms: 2 * rng.random_range(0..75u64),
                skip_dependents: rng.random_bool(0.2),
                end,
                calls,
            }
        })
        .collect()
}

/// Runs one batch of a schedule: open, submit with gaps, then end it as planned.
async fn drive(kernel: Kernel, world: World, plan: PlannedBatch) {
    tokio::time::sleep(Duration::from_millis(plan.start_ms)).await;
    let mut options = BatchOptions::default();
    if plan.skip_dependents {
        options = options.with_on_failure(OnFailure::SkipDependents);
    }
    let mut handle = kernel
        .open_with(plan.tenant, options)
        .expect("a batch opens inside the runtime");
    if let End::Cancel(ms) = plan.end {
        let (token, world, n) = (handle.cancellation_token(), world.clone(), plan.n);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms) + ODD_MS).await;
            world.seen().cancelled_at.entry(n).or_insert(world.now());
            token.cancel();
        });
    }
    for (i, call) in plan.calls.iter().enumerate() {
        if plan.end == End::Drop(i) {
            break;
        }
        if call.gap_ms > 0 {
            tokio::time::sleep(Duration::from_millis(call.gap_ms)).await;
        }
        let now = world.now();
        // On a multi-threaded runtime (the PostgreSQL run) two drivers of one kernel log their
        // calls in the order the kernel took them.
        let order = world.submitting.lock().unwrap_or_else(|e| e.into_inner());
        handle
            .submit(Call::new(&call.id, call.tool, call.input.clone()))
            .expect("a fresh call id is accepted");
        world.seen().submitted.push((call.id.clone(), plan.n, now));
        drop(order);
    }
    let record = |world: &World, results: Vec<CallResult>| {
        let mut s = world.seen();
        for r in results {
            *s.reported.entry(r.id.clone()).or_default() += 1;
            s.results.insert(r.id.clone(), r);
        }
    };
    match plan.end {
        End::Finish | End::Cancel(_) => {
            let result = handle.finish().await;
            record(&world, result.results);
        }
        End::Stream => {
            handle.close();
            let results: Vec<CallResult> = (&mut handle).collect().await;
            record(&world, results);
        }
        End::Drop(_) => {
            tokio::time::sleep(ODD_MS).await;
            world
                .seen()
                .cancelled_at
                .entry(plan.n)
                .or_insert(world.now());
            drop(handle);
        }
        End::Detach => handle.detach(),
    }
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// Checks a schedule's run. Under caps a call may start later than it could (it waits for a
/// permit), so the exact-start check becomes "never early, and every call that could run ran".
fn check(
    plans: &[PlannedBatch],
    caps: Option<Caps>,
    kernel: &Kernel,
    world: &World,
) -> Result<(), String> {
    check_on(plans, caps, &[kernel], world)
}

/// [`check`] for batches spread over several kernels — processes — that share one conflict
/// domain (PostgreSQL, on a real clock): batch `n` ran on `kernels[n % kernels.len()]`. Times are
/// then real and include the database's round trips, so the exact-start checks give way; the
/// safety checks stay, with order between processes being the database's admission order (the
/// fencing tokens the handlers saw), as docs/scale.md promises.
fn check_on(
    plans: &[PlannedBatch],
    caps: Option<Caps>,
    kernels: &[&Kernel],
    world: &World,
) -> Result<(), String> {
    let shared = kernels.len() > 1;
    let process = |b: usize| b % kernels.len();
    let kernel = kernels[0];
    let s = world.seen();
    let norm = normalizers();
    let by_id: HashMap<&str, (&PlannedBatch, &PlannedCall)> = plans
        .iter()
        .flat_map(|b| b.calls.iter().map(move |c| (c.id.as_str(), (b, c))))
        .collect();

    // Exactly once: every submitted call has one call record; every batch one batch record
    // (a dropped or detached batch too); a batch read to the end reported each of its calls once.
    for (id, _, _) in &s.submitted {
        let n = s.call_records.get(id).copied().unwrap_or(0);
        if n != 1 {
            return Err(format!("call {id} was recorded {n} times"));
        }
    }
    if s.call_records.len() != s.submitted.len() {
        return Err("a call that was never submitted was recorded".into());
    }
    // Causal order: an edge record comes after the call record of the call it starts from.
    for (from, calls_before) in &s.edge_places {
        match s.call_places.get(from) {
            Some(place) if place < calls_before => {}
            _ => {
                return Err(format!(
                    "an edge from {from} was recorded before {from}'s own record"
                ))
            }
        }
    }
    if s.batch_records.len() != plans.len() || s.batch_records.values().any(|n| *n != 1) {
        return Err(format!(
            "{} batches, batch records {:?}",
            plans.len(),
            s.batch_records
        ));
    }
    for (id, b, _) in &s.submitted {
        let read = matches!(plans[*b].end, End::Finish | End::Stream | End::Cancel(_));
        let n = s.reported.get(id).copied().unwrap_or(0);
        if read && n != 1 {
            return Err(format!("call {id} was reported {n} times to its reader"));
        }
    }

    // The calls that entered a domain, in submission order, with their accesses.
    let mut domain: Vec<(&str, usize, Duration, Vec<Access>)> = Vec::new();
    for (id, b, at) in &s.submitted {
        let (_, call) = by_id[id.as_str()];
        let refused = matches!(call.tool, "h.deny" | "h.boom")
            || (call.tool == "h.norm" && call.input["key"] == "bad");
        if refused {
            if s.started.contains_key(id) {
                return Err(format!("refused call {id} ran"));
            }
            if let Some(r) = s.results.get(id) {
                let want = if call.tool == "h.deny" {
                    (Status::Denied, "denied")
                } else {
                    (Status::Error, "internal")
                };
                let code = r.error.as_ref().map(|e| e.code.as_str()).unwrap_or("");
                if (r.status, code) != want {
                    return Err(format!("{id}: {:?} {code}, expected {want:?}", r.status));
                }
            }
            continue;
        }
        let tool = kernel.tools().get(call.tool).expect("a harness tool");
        domain.push((id, *b, *at, tool.accesses(&call.input, &norm)));
    }

    // No false edges: every recorded edge joins two conflicting calls, earlier to later.
    let position: HashMap<&str, usize> = domain
        .iter()
        .enumerate()
        .map(|(i, (id, ..))| (*id, i))
        .collect();
    for (from, to) in &s.edges {
        let (Some(&i), Some(&j)) = (position.get(from.as_str()), position.get(to.as_str())) else {
            return Err(format!(
                "edge {from} -> {to} names a call outside the domain"
            ));
        };
        let same_tenant = plans[domain[i].1].tenant == plans[domain[j].1].tenant;
        if i >= j || !same_tenant || first_conflict(&domain[i].3, &domain[j].3).is_none() {
            return Err(format!("false edge {from} -> {to}"));
        }
    }

    // Expected times, in submission order, and the ordering invariants.
    // When each call lets its successors go.
    let mut release_at: Vec<Duration> = Vec::with_capacity(domain.len());
    for (j, (id, b, submitted, acc)) in domain.iter().enumerate() {
        let plan = &plans[*b];
        let (_, call) = by_id[*id];
        let mut ready = *submitted;
        for (i, (other, ob, _, oacc)) in domain[..j].iter().enumerate() {
            // Ordered: a tenant's own conflicting calls; and two calls of shared tools, of any
            // tenants, in one process (a process's commons; the shared domain across processes
            // is per tenant).
            let related = plans[*ob].tenant == plan.tenant
                || (is_shared(call.tool)
                    && is_shared(by_id[*other].1.tool)
                    && process(*ob) == process(*b));
            if !related || first_conflict(oacc, acc).is_none() {
                continue;
            }
            ready = ready.max(release_at[i]);
            // No overlap, and submission order, from the handlers' own events. Between two
            // processes the order is the shared domain's admission order.
            let (first, second) = match (s.tokens.get(*other), s.tokens.get(*id)) {
                (Some(t1), Some(t2)) if process(*ob) != process(*b) && t2 < t1 => (*id, *other),
                _ => (*other, *id),
            };
            if let (Some(&(_, s2)), Some(&(_, s1))) = (s.started.get(second), s.started.get(first))
            {
                let (id, other) = (second, first);
                let Some(&(_, e1)) = s.ended.get(other) else {
                    return Err(format!("{other} started and never ended"));
                };
                if s2 < s1 {
                    return Err(format!("{id} started before {other}, which it comes after"));
                }
                if s2 < e1 {
                    return Err(format!("{id} overlaps {other}, which it conflicts with"));
                }
            }
        }
        let answer = call.tool == "h.ask";
        let asked = answer.then(|| {
            let ms = call.input["ask_ms"].as_u64().unwrap_or(0);
            match call.input["answer"].as_str().unwrap_or("yes") {
                "panic" => *submitted,
                "hang" => *submitted + APPROVAL_TIMEOUT,
                _ => *submitted + Duration::from_millis(ms).min(APPROVAL_TIMEOUT),
            }
        });
        let go = asked.map_or(ready, |a| a.max(ready));
        let cancelled = s.cancelled_at.get(b).copied();
        let release =
            match (s.started.get(*id), s.ended.get(*id)) {
                (Some(&(start, _)), Some(&(end, _))) => {
                    let wrong = match caps {
                        _ if shared => false,
                        None => start != go,
                        Some(_) => start < go,
                    };
                    if wrong {
                        return Err(format!(
                        "{id} started at {start:?}, expected exactly {go:?} (ready {ready:?}): {}",
                        if start > go { "a false wait" } else { "an early start" }
                    ));
                    }
                    if !shared && cancelled.is_some_and(|c| c < start) {
                        return Err(format!("{id} started after its batch was cancelled"));
                    }
                    end
                }
                (Some(_), None) => return Err(format!("{id} started and never ended")),
                (None, _) => {
                    // It did not run: it lets go when the pipeline says, by how it ended.
                    let approved = matches!(call.input["answer"].as_str(), None | Some("yes"));
                    match (s.outcomes.get(*id), cancelled) {
                        // Cancelled while it waited for its predecessors (it lets go when they
                        // have), for its approval, or — under caps — for a permit. Without caps it
                        // can only be cancelled before it could go, or at that very instant.
                        (Some(Status::Cancelled), Some(c))
                            if c <= go || caps.is_some() || shared =>
                        {
                            ready.max(c)
                        }
                        (Some(Status::Rejected), _) if !approved => go,
                        (Some(Status::Skipped), _) if plan.skip_dependents => go,
                        (outcome, _) => {
                            return Err(format!(
                                "{id} never started, and nothing explains it (outcome \
                                 {outcome:?} {:?}, go {go:?}, cancelled {cancelled:?})",
                                s.errors.get(*id)
                            ))
                        }
                    }
                }
            };
        release_at.push(release);
    }

    // Under caps: never more calls running at once than the caps allow, counted over the
    // handlers' own start and end events.
    if let Some(c) = caps {
        let mut events: Vec<(u64, i64, bool)> = Vec::new();
        for (id, (_, at)) in &s.started {
            let put = by_id
                .get(id.as_str())
                .is_some_and(|(_, c)| c.tool == "h.put");
            events.push((*at, 1, put));
            if let Some((_, end)) = s.ended.get(id) {
                events.push((*end, -1, put));
            }
        }
        events.sort_unstable();
        let (mut running, mut puts) = (0i64, 0i64);
        for (at, delta, put) in events {
            running += delta;
            if put {
                puts += delta;
            }
            if running > c.global as i64 || puts > c.put as i64 {
                return Err(format!(
                    "at event {at}, {running} calls ran ({puts} of h.put) under caps {c:?}"
                ));
            }
        }
    }

    // Nothing left behind.
    for kernel in kernels {
        if let Some(why) = leftover(kernel) {
            return Err(why);
        }
    }
    Ok(())
}

/// What a kernel still holds after the traffic, if anything.
fn leftover(kernel: &Kernel) -> Option<String> {
    for tenant in ["t", "u"] {
        if kernel.tenant_load(tenant) != (0, 0) {
            return Some(format!(
                "tenant {tenant} still has load {:?} after the traffic",
                kernel.tenant_load(tenant)
            ));
        }
    }
    if kernel.shared_load() != (0, 0) {
        return Some(format!(
            "the calls of shared tools still hold {:?} after the traffic",
            kernel.shared_load()
        ));
    }
    if kernel.shared_settling() != 0 {
        return Some(format!(
            "{} calls still hold their place in the shared domain after the traffic",
            kernel.shared_settling()
        ));
    }
    (kernel.tenants_held() != 0).then(|| {
        format!(
            "the kernel still holds {} tenants after the traffic",
            kernel.tenants_held()
        )
    })
}

/// Plays the schedule of `seed` on a paused clock until everything has settled (an hour of
/// virtual time after the last driver), then hands what happened to `after`.
fn play<T>(
    seed: u64,
    after: impl FnOnce(&[PlannedBatch], Option<Caps>, &Kernel, &World) -> T,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a paused runtime");
    let (plans, caps) = (schedule(seed), caps(seed));
    rt.block_on(async {
        let world = World::new();
        let kernel = kernel_with(&world, Some(DEADLINE), caps);
        let drivers: Vec<_> = plans
            .iter()
            .cloned()
            .map(|p| tokio::spawn(drive(kernel.clone(), world.clone(), p)))
            .collect();
        for d in drivers {
            // A driver only panics on a harness defect (a refused submission).
            d.await.expect("a driver runs to its end");
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
        after(&plans, caps, &kernel, &world)
    })
}

/// Runs the schedule of `seed`; `Err` says which invariant broke.
fn run_schedule(seed: u64) -> Result<(), String> {
    play(seed, check)
}

fn replay_hint(seed: u64) -> String {
    format!("replay with: SLUICE_SEED={seed} cargo test --test kernel_traffic random_schedules")
}

#[test]
fn random_schedules_keep_every_invariant() {
    quiet_planned_panics();
    if let Some(seed) = std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        if let Err(why) = run_schedule(seed) {
            panic!("schedule {seed}: {why}\n{}", replay_hint(seed));
        }
        return;
    }
    let count: u64 = ["SLUICE_SCHEDULES", "PROPTEST_CASES"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.parse().ok()))
        .unwrap_or(1000);
    // A fixed base, so that a run is reproducible; SLUICE_SEED_BASE moves it.
    let base: u64 = std::env::var("SLUICE_SEED_BASE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5_1u64 << 32);
    let started = std::time::Instant::now();
    for seed in base..base + count {
        if let Err(why) = run_schedule(seed) {
            panic!("schedule {seed}: {why}\n{}", replay_hint(seed));
        }
    }
    eprintln!(
        "{count} schedules in {:.2} s",
        started.elapsed().as_secs_f64()
    );
}

/// The same schedule twice gives the same handler events: a seed replays.
#[test]
fn a_seed_replays_the_same_schedule() {
    quiet_planned_panics();
    let events = |seed: u64| {
        play(seed, |_, _, _, world| {
            let s = world.seen();
            let mut events: BTreeMap<String, Duration> =
                s.started.iter().map(|(k, v)| (k.clone(), v.0)).collect();
            events.extend(s.ended.iter().map(|(k, v)| (format!("{k}/end"), v.0)));
            events
        })
    };
    // Schedules with and without concurrency caps.
    let capped = (0..)
        .find(|s| caps(*s).is_some())
        .expect("some seed has caps");
    let free: Vec<u64> = (0..).filter(|s| caps(*s).is_none()).take(2).collect();
    for seed in [free[0], free[1], capped] {
        let first = events(seed);
        assert!(!first.is_empty(), "schedule {seed} ran no handler");
        assert_eq!(first, events(seed), "schedule {seed} did not replay");
    }
}

/// The issue's scenario, as a user pressing Esc on a turn and asking again: batch 1 runs A, a
/// 400 ms write of `r:r`; batch 2 submits C (a write of `r:r`, so it waits for A) and 70 quick
/// unrelated calls, then is cancelled, so C is reported `cancelled` at once and batch 2 ends while
/// A still runs; batch 3 submits D, a write of `r:r`. D must wait for A: C kept its place.
#[tokio::test(start_paused = true)]
async fn a_cancelled_waiting_write_keeps_its_place_for_the_next_batch() {
    let world = World::new();
    // Without a provenance sink a cancelled call is reported at once (with one, its record must
    // follow its predecessors': see the next test).
    let kernel = kernel_built(&world, None, None, false, None);
    let put = |id: &str, key: &str, ms: u64| Call::new(id, "h.put", json!({"key": key, "ms": ms}));

    let batch1 = kernel
        .submit(Batch::new("t", vec![put("A", "r", 400)]).unwrap())
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(world.seen().started.contains_key("A"), "A is running");

    let mut batch2 = kernel.open("t").unwrap();
    batch2.submit(put("C", "r", 0)).unwrap();
    for i in 0..70 {
        batch2
            .submit(put(&format!("q{i}"), &format!("q{i}"), 1))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    batch2.cancel();
    let result2 = batch2.finish().await;
    assert_eq!(result2.get("C").unwrap().status, Status::Cancelled);
    assert_eq!(
        result2
            .results
            .iter()
            .filter(|r| r.status == Status::Ok)
            .count(),
        70,
        "the quick calls ran before the cancellation"
    );
    assert!(
        !world.seen().ended.contains_key("A"),
        "batch 2 ended while A still runs"
    );

    let result3 = kernel
        .run(Batch::new("t", vec![put("D", "r", 0)]).unwrap())
        .await
        .unwrap();
    let result1 = batch1.finish().await;
    assert_eq!(result1.results[0].status, Status::Ok);
    assert_eq!(result3.results[0].status, Status::Ok);
    let (a_end, d_start) = {
        let seen = world.seen();
        (seen.ended["A"], seen.started["D"])
    };
    assert!(
        d_start.1 > a_end.1,
        "D started at {:?} while A (ended {:?}) still ran",
        d_start.0,
        a_end.0
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(kernel.tenant_load("t"), (0, 0));
}

/// The same scenario with a provenance sink: the cancelled C is reported once A, its predecessor,
/// has finished, so that C's records (its edge from A among them) follow A's in the log — and D
/// still waits for A.
#[tokio::test(start_paused = true)]
async fn with_provenance_a_cancelled_call_is_recorded_after_its_predecessors() {
    let world = World::new();
    let kernel = kernel_with(&world, None, None);
    let put = |id: &str, key: &str, ms: u64| Call::new(id, "h.put", json!({"key": key, "ms": ms}));
    let batch1 = kernel
        .submit(Batch::new("t", vec![put("A", "r", 400)]).unwrap())
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut batch2 = kernel.open("t").unwrap();
    batch2.submit(put("C", "r", 0)).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    batch2.cancel();
    let batch3 = kernel
        .submit(Batch::new("t", vec![put("D", "r", 0)]).unwrap())
        .unwrap();
    let result2 = batch2.finish().await;
    assert_eq!(result2.get("C").unwrap().status, Status::Cancelled);
    assert_eq!(result2.get("C").unwrap().recorded, Some(true));
    {
        let seen = world.seen();
        assert!(
            seen.ended.contains_key("A"),
            "C was reported before A ended"
        );
        assert!(seen.call_places["A"] < seen.call_places["C"]);
        assert!(seen
            .edge_places
            .iter()
            .any(|(from, before)| from == "A" && *before > seen.call_places["A"]));
    }
    assert_eq!(batch1.finish().await.results[0].status, Status::Ok);
    assert_eq!(batch3.finish().await.results[0].status, Status::Ok);
    let seen = world.seen();
    assert!(seen.started["D"].1 > seen.ended["A"].1, "D waited for A");
}

/// The same seeded schedules, spread over two kernels — two processes — each with its own
/// connection to one PostgreSQL conflict domain (tests/support/postgres.rs starts the server), on a
/// real clock: no two conflicting calls overlap, in one process or across the two; conflicting
/// calls run in submission order within a process and in admission order between them; every
/// call is recorded and reported once; neither kernel nor the database holds anything after.
/// `SLUICE_PG_SCHEDULES` sets how many (default 12); `SLUICE_SEED` replays one.
#[test]
fn random_schedules_keep_every_invariant_across_processes_on_postgres() {
    quiet_planned_panics();
    let pg = support::postgres::Postgres::start();
    let seeds: Vec<u64> = match std::env::var("SLUICE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        Some(seed) => vec![seed],
        None => {
            let count: u64 = std::env::var("SLUICE_PG_SCHEDULES")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(12);
            let base = 0x5_1u64 << 32;
            (base..base + count).collect()
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    for seed in seeds {
        eprintln!("schedule {seed}");
        let outcome = rt.block_on(async {
            let world = World::new();
            let mut kernels = Vec::new();
            let mut domains = Vec::new();
            for _ in 0..2 {
                let d = sluice_postgres::PgDomain::connect(&pg.url, Duration::from_secs(10))
                    .await
                    .map_err(|e| e.to_string())?;
                kernels.push(kernel_built(
                    &world,
                    Some(DEADLINE),
                    None,
                    true,
                    Some(d.clone()),
                ));
                domains.push(d);
            }
            let plans = schedule(seed);
            let drivers: Vec<_> = plans
                .iter()
                .cloned()
                .map(|p| {
                    let k = kernels[p.n % kernels.len()].clone();
                    tokio::spawn(drive(k, world.clone(), p))
                })
                .collect();
            // A batch that never ends is a finding, not a hang: after two minutes the schedule
            // fails naming what the database still holds.
            let all = futures::future::join_all(drivers);
            match tokio::time::timeout(Duration::from_secs(120), all).await {
                Ok(ended) => {
                    for d in ended {
                        d.expect("a driver runs to its end");
                    }
                }
                Err(_) => {
                    let open = pg.sql(
                        "SELECT string_agg(call || ' (ticket ' || ticket || ', after ' || \
                         waits_for::text || ')', ', ' ORDER BY ticket) FROM sluice_calls \
                         WHERE state = 'admitted'",
                    );
                    let first = pg.sql(
                        "SELECT call FROM sluice_calls WHERE state = 'admitted' \
                         ORDER BY ticket LIMIT 1",
                    );
                    let id = first.trim();
                    let what = {
                        let seen = world.seen();
                        let n: Option<usize> = id
                            .strip_prefix('b')
                            .and_then(|r| r.split('c').next())
                            .and_then(|n| n.parse().ok());
                        let plan = n.and_then(|n| plans.iter().find(|p| p.n == n));
                        format!(
                            "{id}: submitted {:?}, started {:?}, ended {:?}, recorded {:?} {:?}, \
                             reported {:?}, its batch ends {:?}, cancelled at {:?}",
                            seen.submitted.iter().find(|s| s.0 == id),
                            seen.started.get(id),
                            seen.ended.get(id),
                            seen.outcomes.get(id),
                            seen.errors.get(id),
                            seen.results.get(id).map(|r| r.status),
                            plan.map(|p| p.end),
                            n.and_then(|n| seen.cancelled_at.get(&n)),
                        )
                    };
                    return Err(format!(
                        "some batch did not end within two minutes; admitted in the database: \
                         {}; the first, {what}",
                        open.trim()
                    ));
                }
            }
            // Settled: every kernel empty (detached and dropped batches end on their own).
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while kernels.iter().any(|k| leftover(k).is_some())
                && std::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let refs: Vec<&Kernel> = kernels.iter().collect();
            let checked = check_on(&plans, None, &refs, &world);
            for d in &domains {
                d.close().await;
            }
            checked
        });
        if let Err(why) = outcome {
            panic!(
                "schedule {seed} on PostgreSQL: {why}\nreplay with: SLUICE_SEED={seed} cargo test \
                 --test kernel_traffic on_postgres"
            );
        }
        let open = pg.sql("SELECT count(*) FROM sluice_calls WHERE state = 'admitted'");
        assert_eq!(
            open.trim(),
            "0",
            "schedule {seed}: calls left admitted in the database"
        );
    }
}
