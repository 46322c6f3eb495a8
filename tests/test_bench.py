"""The benchmark harness still measures what it claims (a smoke run, no timing claims)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernelexec._containment._platform import support

ROOT = Path(__file__).parent.parent
FLOOD_LINES = 100_000  # bench/worker.py's flood (not imported: bench/ is not on sys.path)


def worker(impl: str, scenario: str, n: int, script: str = "worker.py") -> dict[str, Any]:
    """What a bench worker script reports, run as ``python -m bench`` runs it."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), impl, scenario, str(n)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH-RESULT "))
    result: dict[str, Any] = json.loads(line.split(" ", 1)[1])
    return result


@pytest.mark.parametrize(
    ("impl", "scenario"),
    [("kernelexec", "roundtrip"), ("kernelexec-pooled", "ready"), ("raw", "roundtrip")],
)
def test_worker_reports_samples(impl: str, scenario: str) -> None:
    samples = worker(impl, scenario, 3)["samples"]
    assert len(samples) == 3 and all(s > 0 for s in samples)


def test_a_pooled_session_takes_a_kernel_from_the_pool() -> None:
    # Once kernels were contained by default, the bench's pooled sessions had
    # work dirs outside the pool's work_root and each started its own kernel:
    # the pooled column measured no pool (ready 68.7 ms instead of 11).
    assert worker("kernelexec-pooled", "ready", 2)["pooled"] == [True, True]


def test_the_idle_scenario_measures_the_kernels_processes() -> None:
    # A contained kernel's os.getpid() is a pid in its own PID namespace, which
    # names another process here: the idle rows read 0 MB for kernelexec.
    assert worker("kernelexec", "idle", 1)["uss_mb"] > 5


@pytest.mark.parametrize("impl", ["kernelexec", "kernelexec-pooled"])
def test_a_flood_comes_back_whole(impl: str) -> None:
    # The bench once reported a pooled session's flood as lost (0 of 100,000
    # lines); the table shows "output lost" for any run that does not deliver.
    assert worker(impl, "flood", 1)["delivered_lines"] == FLOOD_LINES


def table(scenario: str, results: dict[str, dict[str, Any]]) -> str:
    """The rows ``python -m bench`` prints for a scenario, from these workers' results."""
    code = (
        "import json, sys\n"
        "from bench.__main__ import ROWS, merge, render\n"
        "scenario, results = json.load(sys.stdin)\n"
        "table = [(row, {i: row.value(merge([results[i]])) for i in row.impls if i in results})\n"
        "         for row in ROWS if row.scenario == scenario]\n"
        "print(render(table, list(results)))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([scenario, results]),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# Issue #19's scenarios: numbers come out, and the kernelexec column is what
# it says (zygote-forked kernels, or with KERNELEXEC_ZYGOTE=0 spawned ones).


@pytest.mark.parametrize(("impl", "forked"), [("kernelexec", 1), ("kernelexec-spawn", 0)])
def test_cold_datastack_times_kernels_forked_or_not(impl: str, forked: int) -> None:
    result = worker(impl, "cold-datastack", 2)
    assert len(result["samples"]) == 2 and all(s > 0 for s in result["samples"])
    # kernelexec waits (untimed) for its zygote first: every timed kernel is forked
    assert result["forked"] == [forked, forked]


def test_cold_datastack_raw() -> None:
    samples = worker("raw", "cold-datastack", 1)["samples"]
    assert len(samples) == 1 and samples[0] > 0


def test_idle_memory_of_forked_sessions_and_their_zygote() -> None:
    result = worker("kernelexec", "idle-memory", 2)
    assert result["uss_mb"] > 0 and result["pss_mb"] > 0
    assert result["forked"] == [1, 1]
    assert result["zygote_uss_mb"] > 0 and result["zygote_pss_mb"] > 0
    text = table("idle-memory", {"kernelexec": result})
    assert "| idle data-stack: kernels forked from a zygote | 2 of 2 |" in text
    assert "| idle data-stack: the zygote itself (once, shared by all) | USS " in text


def test_density_through_a_server_holds_every_session_and_each_answers() -> None:
    result = worker("kernelexec", "density", 3)
    assert result["held"] == 3 and result["stop"] == "all 3 held"
    assert len(result["samples"]) == 3
    assert result["failed_answers"] == 0, result["why_failed"]
    assert len(result["created"]) == 3 and result["tree_pss_mb"] > 0
    assert result["open_files_limit"] > 0
    text = table("density", {"kernelexec": result})
    assert "| density: sessions held | 3 |" in text
    assert "| density: where it stopped | all 3 held |" in text


@pytest.mark.parametrize("impl", ["kernelexec", "raw"])
def test_the_fork_and_checkpoint_scenarios_measure(impl: str) -> None:
    forked = worker(impl, "fork", 2, script="state.py")
    assert len(forked["samples"]) == 2 and all(s > 0 for s in forked["samples"])
    if impl == "kernelexec":
        assert len(forked["private_mb"]) == 2 and all(m > 0 for m in forked["private_mb"])
    saved = worker(impl, "checkpoint", 1, script="state.py")
    assert saved["mb"] > 100 and saved["samples"][0] > 0 and saved["restore"][0] > 0
    rows = table("checkpoint", {impl: saved})
    assert "checkpoint throughput" in rows and "MB/s" in rows


def test_the_usage_scenario_measures_the_meter_on_and_off() -> None:
    result = worker("kernelexec", "usage", 30, script="agent.py")
    assert len(result["samples"]) == 30 and len(result["off"]) == 30
    assert all(s > 0 for s in result["samples"] + result["off"])
    assert result["meter_reset_us"] > 0 and result["meter_sampled_us"] > 0
    rows = table("usage", {"kernelexec": result, "raw": worker("raw", "usage", 3, "agent.py")})
    assert "| usage: the meter's share of the round trip (p50 on - off) |" in rows


@pytest.mark.skipif(not support().ok, reason=f"no containment here: {support().why_not()}")
def test_the_contained_scenario_measures_both_kinds_in_turn() -> None:
    result = worker("kernelexec", "contained", 2, script="contained.py")
    assert len(result["samples"]) == 2 and len(result["plain"]) == 2
    assert len(result["roundtrip"]) == len(result["roundtrip_plain"]) > 0
    assert sum(result["forked"]) == 4  # every kernel forked from the zygote
    assert len(result["fork"]) == len(result["fork_plain"]) == 2
    rows = table("contained", {"kernelexec": result})
    assert "| contained: what containment adds to a start (p50 difference) |" in rows
    assert "| contained: fork -> first result p50, contained (checkpoint) |" in rows
