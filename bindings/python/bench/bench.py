"""Sluice from Python, measured (shared/spec/python.md, "Figures"): a benchmark, not a test.

1. Per-call overhead: 1,000 calls of an async no-op tool through `Kernel.run`, against
   `asyncio.gather` of the same 1,000 no-op coroutines.
2. The mixed batch of benches/dispatch.rs (16 calls, reads and writes on overlapping keys and
   pure calls, 20 ms each): its makespan through Sluice, against its critical path.

Run after `pip install ./bindings/python` (a release build):
`python bindings/python/bench/bench.py`.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import sluice

CALLS = 1_000
ROUNDS = 7
STEP = 0.020
# (kind, key): r(ead), w(rite), p(ure) — benches/dispatch.rs's MIXED.
MIXED = [
    ("r", "a"), ("p", ""), ("w", "a"), ("r", "b"), ("p", ""), ("r", "c"), ("w", "b"), ("r", "a"),
    ("p", ""), ("w", "c"), ("r", "d"), ("p", ""), ("w", "d"), ("r", "b"), ("p", ""), ("w", "a"),
]  # fmt: skip


@sluice.tool(id="b.noop")
async def noop() -> dict[str, Any]:
    """Does nothing."""
    return {}


@sluice.tool(id="b.read", effects=[{"kind": "reads", "resource": "kv:{key}"}])
async def read(key: str) -> dict[str, Any]:
    """Reads a key (20 ms)."""
    await asyncio.sleep(STEP)
    return {}


@sluice.tool(id="b.write", effects=[{"kind": "writes", "resource": "kv:{key}"}])
async def write(key: str) -> dict[str, Any]:
    """Writes a key (20 ms)."""
    await asyncio.sleep(STEP)
    return {}


@sluice.tool(id="b.pure")
async def pure() -> dict[str, Any]:
    """Touches nothing (20 ms)."""
    await asyncio.sleep(STEP)
    return {}


async def bare() -> dict[str, Any]:
    return {}


def critical_path() -> float:
    """The longest chain of conflicting calls (a write conflicts with any access to its key), in
    submission order, times the step: no schedule can finish sooner."""
    ends: list[float] = []
    for i, (kind, key) in enumerate(MIXED):
        preds = [
            ends[j]
            for j, (k, other) in enumerate(MIXED[:i])
            if key and other == key and "w" in (kind, k)
        ]
        ends.append(max(preds, default=0.0) + STEP)
    return max(ends)


async def main() -> None:
    kernel = sluice.Kernel([noop, read, write, pure])
    calls = [{"id": str(i), "tool": "b.noop", "input": {}} for i in range(CALLS)]
    sluice_times: list[float] = []
    gather_times: list[float] = []
    await kernel.run(calls)  # warm-up
    for _ in range(ROUNDS):
        t = time.perf_counter()
        await asyncio.gather(*(bare() for _ in range(CALLS)))
        gather_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        results = await kernel.run(calls)
        sluice_times.append(time.perf_counter() - t)
        assert all(r["status"] == "ok" for r in results)
    s, g = statistics.median(sluice_times), statistics.median(gather_times)
    print(f"{CALLS} no-op calls, median of {ROUNDS}:")
    print(f"  asyncio.gather   {g * 1000:8.2f} ms  ({g / CALLS * 1e6:6.2f} us a call)")
    print(f"  sluice.Kernel    {s * 1000:8.2f} ms  ({s / CALLS * 1e6:6.2f} us a call)")
    print(f"  overhead         {(s - g) / CALLS * 1e6:6.2f} us a call ({s / g:.1f}x)")

    tools = {"r": "b.read", "w": "b.write", "p": "b.pure"}
    batch = [
        {"id": str(i), "tool": tools[kind], "input": {"key": key} if key else {}}
        for i, (kind, key) in enumerate(MIXED)
    ]
    spans = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        results = await kernel.run(batch)
        spans.append(time.perf_counter() - t)
        assert all(r["status"] == "ok" for r in results)
    makespan, floor = statistics.median(spans), critical_path()
    print(f"mixed batch, 16 calls x {STEP * 1000:.0f} ms, median of {ROUNDS}:")
    print(f"  makespan {makespan * 1000:.1f} ms, critical path {floor * 1000:.0f} ms, "
          f"ratio {makespan / floor:.3f}x (serial: {len(MIXED) * STEP * 1000:.0f} ms)")  # fmt: skip


if __name__ == "__main__":
    asyncio.run(main())
