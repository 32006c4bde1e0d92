//! A Kindgi pack for the tests, written here, indexed and served by the real `kindgi` package
//! (PyPI, installed into `target/python-tools` by [`super::python::packages`]) on loopback.
//!
//! The pack `ledger` keeps each account's balance in a file beside its tools (so a restarted
//! service sees it), and its deposit reads, waits and writes: two deposits that overlap lose one.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The token the tests' services are started with.
pub const TOKEN: &str = "pack-token-9f3c1e77";

const PYPROJECT: &str = r#"[project]
name = "ledger-pack"
version = "1.0.0"

[tool.kindgi.pack]
id = "ledger"
version = "1.0.0"
"#;

const COMMON: &str = r#"import json
import time
from pathlib import Path

STATE = Path(__file__).resolve().parent.parent / "state"
STATE.mkdir(exist_ok=True)


def read(account: str) -> int:
    f = STATE / f"{account}.json"
    return json.loads(f.read_text())["cents"] if f.exists() else 0


def write(account: str, cents: int) -> None:
    (STATE / f"{account}.json").write_text(json.dumps({"cents": cents}))


def mark(name: str, text: str) -> None:
    (STATE / name).write_text(text)


def in_flight(account: str, delta: int) -> None:
    # Counts the deposits running at once, per account and in all: the peaks are what the
    # tests read (an overlap on one account is a lost update waiting to happen).
    f = STATE / "in-flight.json"
    d = json.loads(f.read_text()) if f.exists() else {"now": {}, "peak": {}}
    now = d["now"].get(account, 0) + delta
    d["now"][account] = now
    total = sum(d["now"].values())
    d["peak"][account] = max(d["peak"].get(account, 0), now)
    d["peak"]["*"] = max(d["peak"].get("*", 0), total)
    f.write_text(json.dumps(d))
"#;

const DEPOSIT: &str = r#"import asyncio

from pydantic import BaseModel, Field, field_validator

from kindgi import ToolContext, tool
from tools._common import in_flight, read, write


class DepositIn(BaseModel):
    account: str
    cents: int = Field(ge=1)

    @field_validator("account")
    @classmethod
    def not_frozen(cls, v: str) -> str:
        if v.startswith("frozen"):
            raise ValueError("the account is frozen")
        return v


class Balance(BaseModel):
    cents: int


@tool(
    id="ledger.deposit",
    description="Deposit cents into an account",
    effects=[{"kind": "writes", "resource": "ledger:{account}"}],
)
async def deposit(input: DepositIn, ctx: ToolContext) -> Balance:
    in_flight(input.account, 1)
    try:
        before = read(input.account)
        await asyncio.sleep(0.1)
        write(input.account, before + input.cents)
        return Balance(cents=before + input.cents)
    finally:
        in_flight(input.account, -1)
"#;

const BALANCE: &str = r#"from pydantic import BaseModel

from kindgi import tool
from tools._common import read


class Account(BaseModel):
    account: str


class Balance(BaseModel):
    cents: int


@tool(
    id="ledger.balance",
    description="An account's balance",
    effects=[{"kind": "reads", "resource": "ledger:{account}"}],
    mutating=False,
)
def balance(input: Account) -> Balance:
    return Balance(cents=read(input.account))
"#;

const WAIT: &str = r#"from pydantic import BaseModel

from kindgi import ToolContext, tool
from tools._common import mark


class Wait(BaseModel):
    name: str


class Done(BaseModel):
    waited: bool


@tool(
    id="ledger.wait",
    description="Waits until its call is cancelled (30 s at most)",
    effects=[{"kind": "reads", "resource": "ledger:wait/{name}"}],
    mutating=False,
)
def wait(input: Wait, ctx: ToolContext) -> Done:
    mark(f"{input.name}.started", "")
    fired = ctx.cancellation.wait(30)
    mark(f"{input.name}.ended", str(ctx.cancellation.reason) if fired else "not cancelled")
    return Done(waited=True)


@tool(
    id="ledger.wait-limited",
    description="Waits until its call is cancelled, under a deadline of 400 ms",
    effects=[{"kind": "reads", "resource": "ledger:wait/{name}"}],
    mutating=False,
    limits={"memMB": 256, "cpuMs": 400},
)
def wait_limited(input: Wait, ctx: ToolContext) -> Done:
    return wait.handler(input, ctx)
"#;

const PROBE: &str = r#"from pydantic import BaseModel

from kindgi import ToolContext, tool


class Nothing(BaseModel):
    fail: bool = False


class Seen(BaseModel):
    tenant: str
    run: str
    request: str | None
    key: str | None


@tool(
    id="ledger.probe",
    description="Answers what it knows of its call; fails when asked to",
    effects=[],
    mutating=False,
)
def probe(input: Nothing, ctx: ToolContext) -> Seen:
    if input.fail:
        raise RuntimeError("the probe failed on purpose")
    return Seen(tenant=ctx.tenant_id, run=ctx.run_id, request=ctx.request_id, key=ctx.idempotency_key)
"#;

/// Writes the pack under `dir` at `version` and indexes it with `python -m kindgi.pack index`;
/// the index's path.
pub fn write_pack(dir: &Path, version: &str) -> PathBuf {
    let tools = dir.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let pyproject = PYPROJECT.replacen(
        "id = \"ledger\"\nversion = \"1.0.0\"",
        &format!("id = \"ledger\"\nversion = \"{version}\""),
        1,
    );
    std::fs::write(dir.join("pyproject.toml"), pyproject).unwrap();
    for (name, text) in [
        ("_common.py", COMMON),
        ("deposit.py", DEPOSIT),
        ("balance.py", BALANCE),
        ("wait.py", WAIT),
        ("probe.py", PROBE),
    ] {
        std::fs::write(tools.join(name), text).unwrap();
    }
    std::fs::write(tools.join("__init__.py"), "").unwrap();
    let index = dir.join("index.json");
    let out = python()
        .args(["-m", "kindgi.pack", "index", "--pack-dir"])
        .arg(dir)
        .arg("--output")
        .arg(&index)
        .args(["--artifact-version", "20261207.1"])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "kindgi could not index the pack:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    index
}

/// python3 with the `kindgi` package on its path.
pub fn python() -> Command {
    let py = super::python::packages("python-tools", "python-requirements.txt");
    let mut cmd = Command::new("python3");
    cmd.env("PYTHONPATH", py)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `python -m kindgi.pack` with `TCP_NODELAY` on the service's sockets: kindgi 0.1.10 makes its
/// listening socket with protocol 0, and asyncio sets `TCP_NODELAY` only on sockets whose
/// protocol is TCP's, so a response's body waits for the client's delayed ACK of its headers
/// (40 ms on Linux, on every call of a keep-alive connection used back to back). The benchmark
/// measures both (docs/performance.md, docs/packs.md).
pub const NODELAY_LAUNCHER: &str = r#"import runpy
import socket
import sys

_Socket = socket.socket


class _TcpSocket(_Socket):
    def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
        if fileno is None and type == socket.SOCK_STREAM and proto in (-1, 0):
            proto = socket.IPPROTO_TCP
        super().__init__(family, type, proto, fileno)


socket.socket = _TcpSocket
sys.argv = ["kindgi.pack", *sys.argv[1:]]
runpy.run_module("kindgi.pack", run_name="__main__")
"#;

/// A pack service (`python -m kindgi.pack serve`); stopped when dropped.
pub struct Service {
    child: Child,
    pub port: u16,
}

impl Service {
    /// Serves `index` on `port` with [`TOKEN`], once `/readyz` answers 200.
    pub fn start(index: &Path, port: u16) -> Service {
        Self::start_with(index, port, false)
    }

    /// [`Service::start`], with `TCP_NODELAY` on the service's sockets when `nodelay`
    /// ([`NODELAY_LAUNCHER`]).
    pub fn start_with(index: &Path, port: u16, nodelay: bool) -> Service {
        let mut cmd = python();
        if nodelay {
            let launcher = index.with_file_name("nodelay_launcher.py");
            std::fs::write(&launcher, NODELAY_LAUNCHER).unwrap();
            cmd.arg(launcher);
        } else {
            cmd.args(["-m", "kindgi.pack"]);
        }
        let mut child = cmd
            .args(["serve", "--index"])
            .arg(index)
            .args(["--host", "127.0.0.1"])
            .env("KINDGI_PACK_SERVICE_TOKEN", TOKEN)
            .env("PORT", port.to_string())
            .env("KINDGI_LOG_LEVEL", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the pack service starts");
        let begun = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                panic!("the pack service exited ({status}):\n{err}");
            }
            if ready(port) {
                return Service { child, port };
            }
            assert!(
                begun.elapsed() < Duration::from_secs(60),
                "the pack service did not become ready in 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The service's base URL.
    pub fn url(&self) -> String {
        url(self.port)
    }

    /// Stops it (SIGKILL) and waits for it.
    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The base URL of a service on `port`.
pub fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

fn ready(port: u16) -> bool {
    use std::io::Write;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = String::new();
    let _ = s.read_to_string(&mut head);
    head.starts_with("HTTP/1.1 200")
}

/// The state folder of the pack under `dir` (balances and marks).
pub fn state(dir: &Path) -> PathBuf {
    dir.join("state")
}

/// Waits until the mark `name` exists in the pack's state (10 s at most).
pub fn wait_for_mark(dir: &Path, name: &str) -> String {
    let f = state(dir).join(name);
    let begun = Instant::now();
    while !f.exists() {
        assert!(
            begun.elapsed() < Duration::from_secs(10),
            "the handler never wrote {name}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(20));
    std::fs::read_to_string(f).unwrap()
}
