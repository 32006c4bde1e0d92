"""Whole processes: the interpreter exits cleanly right after a run (the kernel's threads never
enter Python during finalization: without the exit hook, the script below aborted in about half
its runs), and the example agent loop runs as documented."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import asyncio, sluice

@sluice.tool(id="b.w", effects=[{"kind": "writes", "resource": "kv:{key}"}])
async def w(key: str) -> dict:
    await asyncio.sleep(0.01)
    return {}

async def main():
    kernel = sluice.Kernel([w])
    for _ in range(3):
        await kernel.run([{"id": str(i), "tool": "b.w", "input": {"key": str(i % 3)}}
                          for i in range(6)])

asyncio.run(main())
print("done")
"""


def test_the_interpreter_exits_cleanly_after_runs() -> None:
    for attempt in range(8):
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, (attempt, out.returncode, out.stderr[-2000:])
        assert out.stdout.strip() == "done", out.stdout


def test_the_example_agent_loop_runs() -> None:
    from pathlib import Path

    example = Path(__file__).parent.parent / "examples" / "agent_loop.py"
    out = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "(waited for call_1)" in out.stdout, out.stdout
    assert "note a: xy" in out.stdout, out.stdout
