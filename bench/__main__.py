"""``python -m bench [--quick] [--rounds N] [--only IMPL] [--scenarios S] [--skip-peers]``.

``--executions N`` sets the fidelity scenario's length (``bench/fidelity.py``);
``--density N`` how many sessions the density scenario asks for.

Every (implementation, scenario) pair runs in a fresh process, one at a time,
so the measurements do not share memory, caches or a CPU with each other.
A full run goes through every pair in several rounds and pools each pair's
samples: on a shared machine the load drifts over minutes, and rounds spread
that drift over every implementation instead of landing on whichever ran
during it. Ratios are against raw jupyter_client measured in the same run; a
full run rewrites ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import fidelity, peers
from .worker import FLOOD_LINES

HERE = Path(__file__).parent
BASELINE = "raw"


@dataclass(frozen=True)
class Row:
    title: str
    scenario: str
    impls: tuple[str, ...]
    value: Callable[[dict[str, Any]], float | str]
    unit: str
    lower_is_better: bool = True
    full_n: int = 20
    quick_n: int = 5
    # n is how many samples, shared out over the rounds (not a size, like the
    # executions per session of the concurrent scenario)
    samples_n: bool = True
    fmt: str = ".3g"


# Scenarios run in the first round only: one pass gives their figure (and
# density fills most of the machine's memory, which is not done three times).
ONCE = ("idle-memory", "density")


def _p(q: float) -> Callable[[dict[str, Any]], float]:
    def pick(result: dict[str, Any]) -> float:
        samples = sorted(result["samples"])
        return float(samples[min(len(samples) - 1, round(q * (len(samples) - 1)))]) * 1000

    return pick


def _median_s(result: dict[str, Any]) -> float:
    return float(statistics.median(result["samples"]))


def _if_delivered(
    pick: Callable[[dict[str, Any]], float],
) -> Callable[[dict[str, Any]], float | str]:
    """The figure, or why there is none: a run that lost output did not do the job."""

    def value(result: dict[str, Any]) -> float | str:
        lines = int(result["delivered_lines"])
        if lines < FLOOD_LINES:
            return f"output lost ({lines:,} of {FLOOD_LINES:,} lines came back)"
        return pick(result)

    return value


ALL = ("raw", "kernelexec", "kernelexec-pooled", "autogen", "ag2")
REMOTE = ("kernelexec-http", "kernelexec-gateway", "kernelexec-docker")
# kernelexec-spawn: kernelexec with its kernel zygote off (KERNELEXEC_ZYGOTE=0), data-stack rows
# kernelexec-shared: kernelexec with KERNELEXEC_SHARE_PAGES=1 and KSM on, idle data-stack rows
COLUMNS = ("raw", "kernelexec", "kernelexec-spawn", "kernelexec-shared", *ALL[2:], *REMOTE)
DATASTACK = ("raw", "kernelexec", "kernelexec-spawn", "autogen", "ag2")
IDLE_DATASTACK = ("raw", "kernelexec", "kernelexec-spawn", "kernelexec-shared", "autogen", "ag2")


def _forked(result: dict[str, Any]) -> str:
    forked = result["forked"]
    return f"{sum(forked)} of {len(forked)}"


def _zygote(result: dict[str, Any]) -> float | str:
    if "zygote_pss_mb" not in result:
        return "no zygote"
    return f"USS {result['zygote_uss_mb']:.3g} MB, PSS {result['zygote_pss_mb']:.3g} MB"


def _merged(result: dict[str, Any]) -> str:
    if result.get("ksm") != "on":
        return "KSM is off on this machine (root turns it on)"
    return (
        f"{result['merged_mb']:,.0f} MB merged in {result['merge_s']:.0f} s; "
        f"ksmd's CPU {result['ksmd_cpu_s']:.1f} s"
    )


def _stopped(result: dict[str, Any]) -> str:
    waited = result.get("waited_for_merges_s", 0)
    return str(result["stop"]) + (f" (after {waited:.0f} s waiting for merges)" if waited else "")


def _per_session(key: str) -> Callable[[dict[str, Any]], float | str]:
    def value(result: dict[str, Any]) -> float | str:
        return float(result[key]) / result["held"] if result["held"] else "none held"

    return value


def _within_1s(result: dict[str, Any]) -> str:
    return f"{int(result['within_1s']):,} of {int(result['held']):,}"


def _created_p50(result: dict[str, Any]) -> float | str:
    return _p(0.5)({"samples": result["created"]}) if result["created"] else "none held"


def _density(
    title: str, value: Callable[[dict[str, Any]], float | str], unit: str = "", **options: Any
) -> Row:
    return Row(
        f"density: {title}",
        "density",
        ("raw", "kernelexec", "kernelexec-shared"),
        value,
        unit,
        full_n=1500,
        quick_n=10,
        samples_n=False,
        **options,
    )


ROWS = [
    Row("session ready (create -> 1+1) p50", "ready", ALL, _p(0.5), "ms", full_n=20, quick_n=3),
    Row("session ready (create -> 1+1) p99", "ready", ALL, _p(0.99), "ms", full_n=20, quick_n=3),
    Row("round trip x+1 p50", "roundtrip", ALL + REMOTE, _p(0.5), "ms", full_n=300, quick_n=50),
    Row("round trip x+1 p99", "roundtrip", ALL + REMOTE, _p(0.99), "ms", full_n=300, quick_n=50),
    Row("10 MB printed: time", "flood", ALL, _if_delivered(_median_s), "s", full_n=3, quick_n=1),
    Row(
        "10 MB printed: our peak RSS growth",
        "flood",
        ALL,
        _if_delivered(lambda r: float(r["peak_growth_mb"])),
        "MB",
        full_n=3,
        quick_n=1,
    ),
    Row("matplotlib figure: time", "figure", ALL, _median_s, "s", full_n=5, quick_n=2),
    Row(
        "matplotlib figure: our peak RSS growth",
        "figure",
        ALL,
        lambda r: float(r["peak_growth_mb"]),
        "MB",
        full_n=5,
        quick_n=2,
    ),
    Row(
        "16 sessions x 50 executions",
        "concurrent",
        ("raw", "kernelexec", "autogen", "ag2"),
        lambda r: r["executions"] * len(r["samples"]) / sum(r["samples"]),
        "exec/s",
        lower_is_better=False,
        full_n=50,
        quick_n=10,
        samples_n=False,
    ),
    Row(
        "16 sessions x 50: this process's CPU per execution",
        "concurrent",
        ("raw", "kernelexec", "autogen"),
        lambda r: float(r["cpu_ms_per_execution"]),
        "ms",
        full_n=50,
        quick_n=10,
        samples_n=False,
    ),
    Row(
        "idle kernel USS",
        "idle",
        ("raw", "kernelexec", "autogen", "ag2"),
        lambda r: float(r["uss_mb"]),
        "MB",
        full_n=1,
        quick_n=1,
    ),
    Row(
        "idle kernel PSS",
        "idle",
        ("raw", "kernelexec", "autogen", "ag2"),
        lambda r: float(r["pss_mb"]),
        "MB",
        full_n=1,
        quick_n=1,
    ),
    Row(
        "idle kernel PSS, numpy+matplotlib preloaded",
        "idle_preload",
        ("raw", "kernelexec", "kernelexec-pooled", "autogen", "ag2"),
        lambda r: float(r["pss_mb"]),
        "MB",
        full_n=1,
        quick_n=1,
    ),
    # bench/fidelity.py: n executions over 4 sessions next to 2 CPU burners.
    Row(
        "outputs not exactly as written (fidelity)",
        "fidelity",
        ("raw", "kernelexec"),
        fidelity.table_value,
        "",
        full_n=20_000,
        quick_n=2_000,
    ),
    Row(
        "fidelity: sessions whose kernel was forked from a zygote",
        "fidelity",
        ("kernelexec",),
        lambda r: f"{int(sum(r.get('forked', [0])))} of {fidelity.SESSIONS * len(r['executed'])}",
        "",
        full_n=20_000,
        quick_n=2_000,
    ),
    # Issue #19: the data stack (numpy, pandas, matplotlib) preloaded, no pool.
    Row(
        "cold data-stack (create -> DataFrame probe) p50",
        "cold-datastack",
        DATASTACK,
        _p(0.5),
        "ms",
        full_n=20,
        quick_n=3,
    ),
    Row(
        "cold data-stack (create -> DataFrame probe) p99",
        "cold-datastack",
        DATASTACK,
        _p(0.99),
        "ms",
        full_n=20,
        quick_n=3,
    ),
    Row(
        "cold data-stack: kernels forked from a zygote",
        "cold-datastack",
        ("kernelexec", "kernelexec-spawn"),
        _forked,
        "",
        full_n=20,
        quick_n=3,
    ),
    Row(
        "idle data-stack session USS (mean of 20 live, quick 3)",
        "idle-memory",
        IDLE_DATASTACK,
        lambda r: float(r["uss_mb"]),
        "MB",
        full_n=20,
        quick_n=3,
        samples_n=False,
    ),
    Row(
        "idle data-stack session PSS (mean of 20 live, quick 3)",
        "idle-memory",
        IDLE_DATASTACK,
        lambda r: float(r["pss_mb"]),
        "MB",
        full_n=20,
        quick_n=3,
        samples_n=False,
    ),
    Row(
        "idle data-stack: kernels forked from a zygote",
        "idle-memory",
        ("kernelexec", "kernelexec-spawn", "kernelexec-shared"),
        _forked,
        "",
        full_n=20,
        quick_n=3,
        samples_n=False,
    ),
    Row(
        "idle data-stack: the zygote itself (once, shared by all)",
        "idle-memory",
        ("kernelexec", "kernelexec-shared"),
        _zygote,
        "",
        full_n=20,
        quick_n=3,
        samples_n=False,
    ),
    Row(
        "idle data-stack: identical pages merged (KSM)",
        "idle-memory",
        ("kernelexec-shared",),
        _merged,
        "",
        full_n=20,
        quick_n=3,
        samples_n=False,
    ),
    _density("sessions held", lambda r: float(r["held"]), "", lower_is_better=False, fmt=",.0f"),
    _density("where it stopped", _stopped),
    _density("kernels forked from a zygote", lambda r: f"{r['forked']:,} of {r['held']:,}"),
    _density("create -> DataFrame built p50", _created_p50, "ms"),
    _density("memory used (MemAvailable drop)", lambda r: float(r["mem_drop_mb"]) / 1024, "GB"),
    _density("memory used per session (MemAvailable drop)", _per_session("mem_drop_mb"), "MB"),
    _density("PSS of the owner's process tree", lambda r: float(r["tree_pss_mb"]) / 1024, "GB"),
    _density("PSS per session (the tree's / sessions)", _per_session("tree_pss_mb"), "MB"),
    _density("last answer (df.shape) p50", _p(0.5), "ms"),
    _density("last answer (df.shape) p99", _p(0.99), "ms"),
    _density("answered within 1 s", _within_1s),
    # Issue #15 (bench/state.py): a copy of a live session's state. raw has no
    # fork: its row is what an agent does instead, a new kernel re-running the code.
    Row(
        "fork -> the copy's first result p50",
        "fork",
        ("raw", "kernelexec"),
        _p(0.5),
        "ms",
        full_n=20,
        quick_n=3,
    ),
    Row(
        "fork -> the copy's first result p99",
        "fork",
        ("raw", "kernelexec"),
        _p(0.99),
        "ms",
        full_n=20,
        quick_n=3,
    ),
    Row(
        "fork: the copy's private memory (USS) p50",
        "fork",
        ("kernelexec",),
        lambda r: float(statistics.median(r["private_mb"])),
        "MB",
        full_n=20,
        quick_n=3,
    ),
    Row(
        "fork, parent holding 1 GiB -> first result p50",
        "fork-1gb",
        ("raw", "kernelexec"),
        _p(0.5),
        "ms",
        full_n=10,
        quick_n=2,
    ),
    Row(
        "fork, parent holding 1 GiB: the copy's USS p50",
        "fork-1gb",
        ("kernelexec",),
        lambda r: float(statistics.median(r["private_mb"])),
        "MB",
        full_n=10,
        quick_n=2,
    ),
    Row(
        "checkpoint a 100 MB DataFrame p50",
        "checkpoint",
        ("raw", "kernelexec"),
        _p(0.5),
        "ms",
        full_n=5,
        quick_n=1,
    ),
    Row(
        "restore it (new session -> first result) p50",
        "checkpoint",
        ("raw", "kernelexec"),
        lambda r: float(statistics.median(r["restore"])) * 1000,
        "ms",
        full_n=5,
        quick_n=1,
    ),
    Row(
        "checkpoint throughput",
        "checkpoint",
        ("raw", "kernelexec"),
        lambda r: float(r["mb"]) / float(statistics.median(r["samples"])),
        "MB/s",
        full_n=5,
        quick_n=1,
        lower_is_better=False,
    ),
]
STATE = ("fork", "fork-1gb", "checkpoint")  # run by bench/state.py


def _median_ms(key: str) -> Callable[[dict[str, Any]], float]:
    return lambda r: float(statistics.median(r[key])) * 1000


def _usage_row(title: str, impls: tuple[str, ...], value: Callable[..., float], unit: str) -> Row:
    return Row(f"usage: {title}", "usage", impls, value, unit, full_n=400, quick_n=50, fmt=".4g")


ROWS += [
    _usage_row("round trip x+1 p50, meter on", ("raw", "kernelexec"), _median_ms("samples"), "ms"),
    _usage_row("round trip x+1 p50, meter off", ("kernelexec",), _median_ms("off"), "ms"),
    _usage_row(
        "the meter's share of the round trip (p50 on - off)",
        ("kernelexec",),
        lambda r: _median_ms("samples")(r) - _median_ms("off")(r),
        "ms",
    ),
    _usage_row(
        "meter cost in the kernel, peak reset (root)",
        ("kernelexec",),
        lambda r: float(r["meter_reset_us"]),
        "us",
    ),
    _usage_row(
        "meter cost in the kernel, peak sampled (non-root)",
        ("kernelexec",),
        lambda r: float(r["meter_sampled_us"]),
        "us",
    ),
]
AGENT = ("usage",)  # run by bench/agent.py


def _contained_row(title: str, value: Callable[[dict[str, Any]], float | str], unit: str) -> Row:
    return Row(f"contained: {title}", "contained", ("kernelexec",), value, unit, quick_n=3)


# Issue #28 (bench/contained.py): contained and uncontained sessions in turn, one run.
ROWS += [
    _contained_row("cold data-stack ready p50, contained", _median_ms("samples"), "ms"),
    _contained_row("cold data-stack ready p50, uncontained", _median_ms("plain"), "ms"),
    _contained_row(
        "what containment adds to a start (p50 difference)",
        lambda r: _median_ms("samples")(r) - _median_ms("plain")(r),
        "ms",
    ),
    _contained_row("round trip x+1 p50, contained", _median_ms("roundtrip"), "ms"),
    _contained_row("round trip x+1 p50, uncontained", _median_ms("roundtrip_plain"), "ms"),
    _contained_row("kernels forked from a zygote", _forked, ""),
    _contained_row("fork -> first result p50, contained (checkpoint)", _median_ms("fork"), "ms"),
    _contained_row(
        "fork -> first result p50, uncontained (process)", _median_ms("fork_plain"), "ms"
    ),
]


def _ray_row(title: str, value: Callable[[dict[str, Any]], float | str], unit: str) -> Row:
    return Row(f"ray: {title}", "ray", ("kernelexec",), value, unit, full_n=20, quick_n=3)


def _ratio(key: str, local: str, target: float) -> Callable[[dict[str, Any]], str]:
    def value(r: dict[str, Any]) -> str:
        ratio = _median_ms(key)(r) / _median_ms(local)(r)
        return f"{ratio:.2f}x (target <= {target:g}x: {'met' if ratio <= target else 'missed'})"

    return value


# Issue #30 (bench/cluster.py): sessions on a Ray node and local ones in turn, one run.
ROWS += [
    _ray_row("the node's first session (host, zygote start) -> 1+1", _median_ms("cold"), "ms"),
    _ray_row("session ready (create -> 1+1) p50, warm node", _median_ms("samples"), "ms"),
    _ray_row("session ready (create -> 1+1) p50, warm node, pool=1", _median_ms("pooled"), "ms"),
    _ray_row(
        "pool=1: sessions that took a ready kernel",
        lambda r: f"{sum(r['taken_from_pool'])} of {len(r['taken_from_pool'])}",
        "",
    ),
    _ray_row("session ready (create -> 1+1) p50, local", _median_ms("local"), "ms"),
    _ray_row("session ready, node / local", _ratio("samples", "local", 2), ""),
    _ray_row("round trip x+1 p50, on the node", _median_ms("roundtrip"), "ms"),
    _ray_row("round trip x+1 p50, local", _median_ms("roundtrip_local"), "ms"),
    _ray_row("round trip, node / local", _ratio("roundtrip", "roundtrip_local", 1.5), ""),
]


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several rounds': samples pooled, other figures their median."""
    merged: dict[str, Any] = {}
    for key in results[0]:
        values = [r[key] for r in results if key in r]
        if isinstance(values[0], list):
            merged[key] = [v for value in values for v in value]
        else:
            merged[key] = statistics.median(values)
    return merged


def run_worker(impl: str, scenario: str, n: int) -> dict[str, Any] | str:
    """The worker's result, or a short reason it failed."""
    try:
        python = str(peers.python_for(impl))
    except (KeyError, OSError, subprocess.CalledProcessError) as exc:
        return f"no environment: {exc!r}"[:120]
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    script = "fidelity.py" if scenario == "fidelity" else "worker.py"
    if scenario in STATE:
        script = "state.py"
    if scenario in AGENT:
        script = "agent.py"
    if scenario == "contained":
        script = "contained.py"
    if scenario == "ray":
        script = "cluster.py"
    extra = {"fidelity": n // 10, "density": 3 * n}.get(scenario, 0)
    try:
        proc = subprocess.run(
            [python, str(HERE / script), impl, scenario, str(n)],
            stdout=subprocess.PIPE,
            # density says how far it got as it goes; the others' stderr is only their failure
            stderr=None if scenario == "density" else subprocess.PIPE,
            text=True,
            timeout=900 + extra,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return "timed out"
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH-RESULT "):
            result: dict[str, Any] = json.loads(line.split(" ", 1)[1])
            return result
    tail = ((proc.stderr or "").strip().splitlines() or ["no output"])[-1]
    return f"failed: {tail[:120]}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples; no RESULTS.md")
    parser.add_argument("--only", nargs="*", help="implementations to run (default: all)")
    parser.add_argument("--skip-peers", action="store_true", help="leave out autogen and ag2")
    parser.add_argument(
        "--scenarios",
        nargs="*",
        choices=sorted({row.scenario for row in ROWS}),
        help="measurements to run (default: all); a partial run writes no RESULTS.md",
    )
    parser.add_argument(
        "--rounds", type=int, help="passes over every pair, samples pooled (default 3, quick 1)"
    )
    parser.add_argument(
        "--executions", type=int, help="fidelity: executions in all (default 20,000, quick 2,000)"
    )
    parser.add_argument(
        "--density",
        type=int,
        metavar="N",
        help="density: data-stack sessions to ask for (default 1,500, quick 10); it stops "
        "earlier at a failure or when MemAvailable falls under 3 GB",
    )
    args = parser.parse_args()
    rounds = max(1, args.rounds or (1 if args.quick else 3))
    wanted = set(args.only or COLUMNS) | {BASELINE}
    if args.skip_peers:
        wanted -= set(peers.PEERS)

    rows = [row for row in ROWS if not args.scenarios or row.scenario in args.scenarios]
    pairs: dict[tuple[str, str], int] = {}
    for row in rows:
        for impl in row.impls:
            if impl in wanted:
                n = row.quick_n if args.quick else row.full_n
                if row.scenario == "fidelity" and args.executions:
                    n = args.executions
                if row.scenario == "density" and args.density:
                    n = args.density
                pairs[(impl, row.scenario)] = -(-n // rounds) if row.samples_n else n
    outcomes: dict[tuple[str, str], list[dict[str, Any] | str]] = {key: [] for key in pairs}
    for round_ in range(1, rounds + 1):
        for (impl, scenario), n in pairs.items():
            if round_ > 1 and scenario in ONCE:
                continue
            print(
                f"[bench] round {round_}/{rounds}: {impl} {scenario} x{n}",
                file=sys.stderr,
                flush=True,
            )
            outcomes[(impl, scenario)].append(run_worker(impl, scenario, n))

    table: list[tuple[Row, dict[str, float | str]]] = []
    for row in rows:
        values: dict[str, float | str] = {}
        for impl in row.impls:
            if (impl, row.scenario) not in outcomes:
                continue
            runs = outcomes[(impl, row.scenario)]
            good = [r for r in runs if not isinstance(r, str)]
            failed = next((r for r in runs if isinstance(r, str)), "")
            values[impl] = row.value(merge(good)) if good else failed
        table.append((row, values))

    # Columns with a figure in some row (the data-stack rows have one of their own).
    impls = [i for i in COLUMNS if i in wanted and any(i in values for _, values in table)]
    text = render(table, impls)
    print(text)
    if not args.quick and not args.scenarios:
        (HERE / "RESULTS.md").write_text(results_page(text, args))
        print(f"[bench] wrote {HERE / 'RESULTS.md'}", file=sys.stderr)
    return 0


def render(table: list[tuple[Row, dict[str, float | str]]], impls: list[str]) -> str:
    header = "| measurement | " + " | ".join(impls) + " |"
    lines = [header, "|---" * (len(impls) + 1) + "|"]
    for row, values in table:
        base = values.get(BASELINE)
        cells = []
        for impl in impls:
            value = values.get(impl)
            if value is None:
                cells.append("")
            elif isinstance(value, str):
                cells.append(value)
            elif isinstance(base, float) and base > 0 and impl != BASELINE:
                figure = f"{value:{row.fmt}} {row.unit}".rstrip()
                cells.append(f"{figure} ({value / base:.2f}x)")
            else:
                cells.append(f"{value:{row.fmt}} {row.unit}".rstrip())
        lines.append(f"| {row.title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def results_page(table: str, args: argparse.Namespace) -> str:
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cpus = os.cpu_count()
    memory = Path("/proc/meminfo").read_text().split()[1]
    return (
        f"# Benchmark results\n\n{when}; {platform.platform()}; {cpus} cores; "
        f"{int(memory) // 1024 // 1024} GiB; Python {platform.python_version()}.\n"
        "A shared, noisy machine: read the ratios (against raw jupyter_client, measured in "
        f"the same run), not the absolute times. {_rounds_note(args)}\n\n"
        f"`{' '.join(['python -m bench', *sys.argv[1:]])}`\n\n{table}\n\n"
        "- Each implementation runs in its own fresh venv under bench/.venvs (kernelexec and "
        "raw share one), so every kernel runs the same current IPython.\n"
        "- raw: jupyter_client's AsyncKernelManager and AsyncKernelClient, reading IOPub "
        "until idle.\n"
        "- kernelexec-pooled: a `KernelPool` of 2, refilled between samples (untimed).\n"
        "- autogen: autogen-ext 0.7.x `JupyterCodeExecutor`; ag2: ag2 0.14.x "
        "`JupyterCodeExecutor` with `LocalJupyterServer` (sync, called in a thread).\n"
        "- kernelexec-http: `kernelexec serve` with `AsyncClient`; kernelexec-gateway: "
        "`kernelexec gateway` with `GatewayBackend`; kernelexec-docker: `DockerBackend` "
        "(ZMQ over Unix sockets into the container).\n"
        "- Peak RSS growth is the measuring process's own (the agent's side), over its RSS "
        "before the output.\n"
        "- This process's CPU per execution (16 x 50): the measuring process's user and system "
        "time over the scenario, all its threads (`getrusage`), over its 800 executions; the "
        "kernels' is not in it. ag2 is left out: its client talks to a server in another "
        "process.\n"
        "- Idle memory is the kernel process and its children, from /proc/PID/smaps_rollup.\n"
        "- ag2's flood comes back empty because of its server, not its executor: "
        "`LocalJupyterServer` starts a stock Kernel Gateway, whose IOPub data rate limit "
        "(jupyter_server's default, 1 MB/s) drops a 10 MB print; `kernelexec gateway` turns "
        "that limit off.\n"
        "- fidelity: executions whose outputs differ from what the code wrote (order, "
        "splits, losses), next to two CPU burners; raw reads IOPub as a notebook does "
        "(`bench/fidelity.py`).\n"
        f"{DATASTACK_NOTES}"
    )


DATASTACK_NOTES = (
    "- Data-stack rows (issue #19): `import numpy, pandas, matplotlib` preloaded, no pool. "
    "kernelexec is the default, its kernel zygote on (the worker first opens sessions, "
    "untimed, until one's kernel comes forked from the zygote); kernelexec-spawn is "
    "kernelexec with `KERNELEXEC_ZYGOTE=0`; raw starts a kernel, imports the stack and runs "
    "the probe.\n"
    "- Idle data-stack memory: each session's kernel process tree (kernelexec: the "
    "supervisor and the kernel below it), 20 sessions live, each holding a DataFrame. PSS "
    "splits a shared page among the processes mapping it, so a forked kernel's PSS falls "
    "as more kernels share the zygote's pages; the zygote's own memory is counted once, in "
    "its own row, for all its kernels.\n"
    "- kernelexec-shared: kernelexec with `KERNELEXEC_SHARE_PAGES=1`, its zygote's memory "
    "offered to Linux's same-page merging (KSM); the worker turns KSM on for its run where "
    "it may (root), scanning 2,000 pages each 20 ms, and puts the settings back. Its memory "
    "is measured after two full KSM scans more, not counting the one under way (what can "
    "merge has); ksmd's CPU is over the whole "
    "scenario. USS leaves merged pages out (they are shared); PSS counts each its share. "
    "Its density fill, at the MemAvailable floor, first waits for the merges to settle "
    "(up to 15 minutes each time, 20 in all) and stops only if it is still under the floor.\n"
    "- density: kernelexec is one `kernelexec serve --preload ...` process on 127.0.0.1 and "
    "its sessions over HTTP; raw is jupyter_client kernels held by the bench process. Each "
    "session builds a 1,000-row DataFrame; then each in turn answers `df.shape`. It stops at "
    "the first failure, or before MemAvailable falls under 3 GB (a shared machine: never "
    "into swap or the OOM killer). The MemAvailable drop is the whole machine's, other "
    "processes included; PSS is the owner's process tree (server or bench process, zygote, "
    "supervisors, kernels).\n"
)


def _rounds_note(args: argparse.Namespace) -> str:
    if (args.rounds or (1 if args.quick else 3)) > 1:
        return (
            "Every pair ran in each of several rounds, its samples pooled, so drifting load "
            "is spread over all implementations."
        )
    return "One round: each pair ran once, one after another."


if __name__ == "__main__":
    raise SystemExit(main())
