"""What the agent API costs (issue #16): ``python agent.py IMPL SCENARIO N``, one JSON object out.

Scenarios:

- ``usage``: the round trip of ``x + 1`` with the kernel's usage meter on and
  with it taken off (the same kernel, blocks of executions alternating, so
  the machine's drift hits both alike), and the meter's own cost per
  execution timed inside the kernel, for a kernel that resets its peak
  (root) and for one that samples it (non-root). raw: the same round trip
  on a plain jupyter_client kernel, for scale.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from worker import Raw, run_script

BLOCK = 25  # executions per block before the meter is switched
METER = "sys.modules['kernelexec_kernel_usage']"
# The meter wraps two methods of ipykernel's kernel object; deleting the
# wrappers puts ipykernel's own back, assigning them again re-installs them.
KEEP = (
    f"import sys\n_k = get_ipython().kernel\n_on = (_k.init_metadata, _k.finish_metadata)\n{METER}"
)
OFF = "del _k.init_metadata, _k.finish_metadata"
ON = "_k.init_metadata, _k.finish_metadata = _on"
# The meter alone, per execution, timed in the kernel: start + finish.
COST = f"""\
import sys, time
_usage = {METER}
def _cost(reset, n=2000):
    saved = _usage._reset_peak
    if not reset:
        _usage._reset_peak = lambda: False
    try:
        meter = _usage.Meter()
        began = time.perf_counter()
        for i in range(n):
            meter.start(str(i))
            meter.finish(str(i))
        return (time.perf_counter() - began) / n
    finally:
        _usage._reset_peak = saved
print(_cost(True), _cost(False))
"""


async def usage_kernelexec(root: Path, n: int) -> dict[str, Any]:
    from kernelexec import AsyncSession

    on: list[float] = []
    off: list[float] = []
    async with AsyncSession(root / "work", timeout=600) as session:
        kept = await session.execute(KEEP)
        assert kept.ok, kept.text
        await session.execute("x = 1")
        metered = True
        while len(on) < n or len(off) < n:
            samples = on if metered else off
            for _ in range(BLOCK):
                started = time.perf_counter()
                answer = await session.execute("x + 1")
                samples.append(time.perf_counter() - started)
                assert answer.ok and (answer.usage is not None) == metered, answer
            metered = not metered
            switched = await session.execute(ON if metered else OFF)
            assert switched.ok, switched.text
        cost = await session.execute(COST)
        assert cost.ok, cost.text
        reset_cost, sampled_cost = (float(v) for v in cost.stdout.split())
    return {
        "samples": on[:n],
        "off": off[:n],
        "meter_reset_us": reset_cost * 1e6,
        "meter_sampled_us": sampled_cost * 1e6,
    }


async def usage_raw(root: Path, n: int) -> dict[str, Any]:
    (root / "raw").mkdir()
    kernel = Raw(root / "raw")
    await kernel.open()
    try:
        await kernel.run("x = 1")
        samples = []
        for _ in range(n):
            started = time.perf_counter()
            await kernel.run("x + 1")
            samples.append(time.perf_counter() - started)
    finally:
        await kernel.close()
    return {"samples": samples}


async def measure(impl: str, scenario: str, n: int, root: Path) -> dict[str, Any]:
    if scenario == "usage":
        return await (usage_raw(root, n) if impl == "raw" else usage_kernelexec(root, n))
    raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    run_script(measure, "kernelexec-bench-agent-")
