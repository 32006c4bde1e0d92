"""A Kindgi pack's tools through `sluice.Pack`: the real pack service (the `kindgi` package),
started on loopback with a pack written here."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import sluice

TOKEN = "py-pack-token-51c2"

DEPOSIT = """
import asyncio
import json
from pathlib import Path

from pydantic import BaseModel

from kindgi import tool

STATE = Path(__file__).resolve().parent.parent / "state"
STATE.mkdir(exist_ok=True)


class DepositIn(BaseModel):
    account: str
    cents: int


class Balance(BaseModel):
    cents: int


@tool(
    id="ledger.deposit",
    description="Deposit cents",
    effects=[{"kind": "writes", "resource": "ledger:{account}"}],
)
async def deposit(input: DepositIn) -> Balance:
    f = STATE / f"{input.account}.json"
    before = json.loads(f.read_text())["cents"] if f.exists() else 0
    await asyncio.sleep(0.05)
    f.write_text(json.dumps({"cents": before + input.cents}))
    return Balance(cents=before + input.cents)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pack(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    (tmp_path / "tools").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [project]
            name = "ledger"
            version = "1.0.0"

            [tool.kindgi.pack]
            id = "ledger"
            version = "1.0.0"
            """
        )
    )
    (tmp_path / "tools" / "deposit.py").write_text(DEPOSIT)
    index = tmp_path / "index.json"
    subprocess.run(
        [sys.executable, "-m", "kindgi.pack", "index", "--pack-dir", str(tmp_path)]
        + ["--output", str(index)],
        check=True,
        capture_output=True,
    )
    port = free_port()
    env = {**os.environ, "KINDGI_PACK_SERVICE_TOKEN": TOKEN, "PORT": str(port)}
    service = subprocess.Popen(
        [sys.executable, "-m", "kindgi.pack", "serve", "--index", str(index)]
        + ["--host", "127.0.0.1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "the pack service did not become ready"
        assert service.poll() is None, "the pack service exited"
        time.sleep(0.05)
    try:
        yield index, url
    finally:
        service.kill()
        service.wait()


async def test_a_packs_deposits_on_one_account_are_ordered(pack: tuple[Path, str]) -> None:
    index, url = pack
    kernel = sluice.Kernel([sluice.Pack(index, url, token=TOKEN)])
    assert TOKEN not in repr(sluice.Pack(index, url, token=TOKEN))
    calls = [
        {"id": f"d{i}", "tool": "ledger.deposit", "input": {"account": "a", "cents": 5}}
        for i in range(4)
    ]
    results = await kernel.run(calls, tenant="acme")
    assert [r["output"]["cents"] for r in results] == [5, 10, 15, 20]
    assert TOKEN not in json.dumps(results)


def test_a_pack_at_another_version_is_refused(pack: tuple[Path, str], tmp_path: Path) -> None:
    index, url = pack
    doc = json.loads(index.read_text())
    doc["tools"][0]["version"] = "9.9.9"
    other = tmp_path / "other-index.json"
    other.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"`ledger.deposit` is version 9.9.9 in the index"):
        sluice.Kernel([sluice.Pack(other, url, token=TOKEN)])


def test_a_missing_token_names_the_variable(pack: tuple[Path, str]) -> None:
    index, url = pack
    with pytest.raises(ValueError, match="SLUICE_TEST_NO_SUCH_TOKEN"):
        sluice.Kernel([sluice.Pack(index, url, token_env="SLUICE_TEST_NO_SUCH_TOKEN")])
