"""Measures GatewayBackend's execute round-trip with and without TCP_NODELAY.

    python tests/measure_gateway_latency.py [N]

Starts ``kernelexec gateway`` twice on loopback (tuned, and with the hidden
--no-nodelay), runs N tiny executions on each and prints the median and p90.
Not a test: numbers on a shared machine are for reading, not asserting.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from servers import TOKEN, kernelexec_gateway

from kernelexec import AsyncSession, GatewayBackend


async def round_trips(url: str, n: int) -> list[float]:
    with tempfile.TemporaryDirectory() as work:
        async with AsyncSession(work, backend=GatewayBackend(url, token=TOKEN)) as s:
            for _ in range(10):
                await s.execute("1")  # warm up
            times = []
            for _ in range(n):
                started = time.perf_counter()
                await s.execute("1")
                times.append((time.perf_counter() - started) * 1000)
            return times


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    with tempfile.TemporaryDirectory() as tmp:
        for label, extra in (("TCP_NODELAY on ", ()), ("TCP_NODELAY off", ("--no-nodelay",))):
            gateway = kernelexec_gateway(Path(tmp), *extra)
            try:
                times = sorted(asyncio.run(round_trips(gateway.url, n)))
            finally:
                gateway.stop()
            print(
                f"{label}: median {statistics.median(times):6.1f} ms, "
                f"p90 {times[int(len(times) * 0.9)]:6.1f} ms over {n} executions"
            )


if __name__ == "__main__":
    main()
