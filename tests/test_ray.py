"""Sessions on a real Ray cluster: a head and two worker nodes, in a network namespace of its own.

One cluster run (tests/_raycluster.py) serves the module: its scenario,
``cluster_scenario``, runs in the cluster's driver and tries each thing in
turn, recording what it saw; the tests below read the record. Parts:

- ``basics``: a session's kernel on a worker node answers, keeps its state,
  saves its outputs and transcript on the caller's side, lists variables,
  runs in the background, reads stdin, is interrupted by a timeout and keeps
  its state; a fork is made on its node by the node's host (no shared storage),
  holding its variables and files; a checkpoint says plainly it needs shared storage.
- ``placement``: Ray places each session by what it holds (CPUs, a custom
  resource, node labels); one that fits nowhere is refused in words naming
  the cluster's capacity; a warm node starts a kernel fast.
- ``hostile``: a contained kernel on a node reaches neither Ray's control
  plane (the GCS port) nor this driver; a huge message is dropped on the node.
- ``shared``: with work dirs on storage every node mounts, checkpoint, fork,
  restore on another node, and a server's files, fork and suspend work.
- ``serve``, ``mcp``: ``--ray`` servers run every session on the cluster.
- ``ownership``: a driver that is killed takes its node hosts and kernels
  with it (Ray's ownership), with no sweeper of ours.
- ``loss``: a node taken away mid-execution gives ``kernel_died`` with
  "node lost" within seconds; the session's next execution runs on the
  other node, with the variables of its recovery checkpoint (``checkpoint_every``).
- ``frozen``: a node host that stops answering (stopped with SIGSTOP) counts
  as lost ``lost_after`` seconds past a poll's wait; Ray kills it, and its
  kernel ends.

The worker nodes (``_raycluster.WORKER_NODES``): 2 CPUs each; the second
has a resource ``special`` and the label ``zone=b``, the first ``zone=a``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import nbformat
import pytest
from _raycluster import ClusterInfo, ClusterRun, ray_unavailable, run_in_cluster
from conftest import process_gone
from servers import LOCKS, file_lock, unavailable

from kernelexec import AsyncSession, KernelexecError, Limits, RayBackend
from kernelexec._ray._backend import _awaitable

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def record(request: pytest.FixtureRequest) -> dict[str, Any]:
    reason = ray_unavailable()
    if reason is not None:
        unavailable(reason)
    # One cluster run per test run: pytest-xdist may hand this module's tests to
    # several workers, and each would run the whole scenario again (3-5 minutes).
    workerinput = getattr(request.config, "workerinput", None)
    kept = LOCKS / f"ray-record-{workerinput['testrunuid']}.json" if workerinput else None
    with file_lock("ray-record"):
        if kept is not None and kept.exists():
            earlier: dict[str, Any] = json.loads(kept.read_text())
            return earlier
        run: ClusterRun = run_in_cluster("test_ray:cluster_scenario", timeout=600)
        assert run.interfaces == ["lo"], run.interfaces
        assert run.leaked == [], run.leaked
        found: dict[str, Any] = run.result
        found["timings"] = run.timings
        text = json.dumps(found, indent=1, default=str)
        print(text)  # the figures, with -s
        if kept is not None:
            for stale in LOCKS.glob("ray-record-*.json"):  # earlier runs'
                stale.unlink(missing_ok=True)
            kept.write_text(text)
    return json.loads(text)  # as a second worker reads it


def part(record: dict[str, Any], name: str) -> dict[str, Any]:
    got: dict[str, Any] = record[name]
    assert "crash" not in got, got["crash"]
    return got


# -- the tests


def test_the_cluster_is_on_loopback_alone(record: dict[str, Any]) -> None:
    # Every node announces 127.0.0.1 (the namespace has nothing else), the head and both workers.
    assert record["addresses"] == ["127.0.0.1"] and record["alive"] == 3, record


def test_a_process_left_in_the_namespace_is_found_and_killed() -> None:
    reason = ray_unavailable()
    if reason is not None:
        unavailable(reason)
    with pytest.raises(AssertionError, match="left in the namespace") as failed:
        run_in_cluster("test_ray:leak_scenario", workers=1)
    assert "sleep 600" in str(failed.value)


def test_a_session_on_a_worker_node_does_what_a_local_one_does(record: dict[str, Any]) -> None:
    got = part(record, "basics")
    assert got["node"] in record["workers"], got  # the head has no CPU: never there
    assert got["answers"] == ["42", "41"], got
    assert got["png_saved"] and got["png_on_caller"], got
    assert "x" in got["variables"], got
    assert got["background"] == "bg", got
    assert got["stdin"] == "hello", got
    assert got["timeout_status"] == "timeout" and got["after_timeout"] == "41", got
    assert got["transcript_cells"] >= 6, got
    # The kernel's files are on its node; the caller's work dir holds what we made.
    assert got["kernel_cwd"] != got["caller_dir"] and not got["made_on_caller"], got
    # Closed, the session kept them: copied from the node, but no link, and the caller's
    # transcript stays its own (the kernel wrote one of that name on its node).
    assert got["brought_back"] == {"made.txt": "on the node", "in/data.csv": "a,b\n1\n"}, got
    assert not got["leak_brought"] and got["transcript_after_close"] >= 6, got
    refused = got["checkpoint_refused"]
    assert refused[0] == "CheckpointError" and "shared_work_dirs=True" in refused[1], refused


def test_without_shared_storage_a_fork_is_made_on_the_kernels_node(
    record: dict[str, Any],
) -> None:
    got = part(record, "basics")["fork"]
    # Its node's host copied the kernel's files and checkpointed its variables into a new
    # kernel there, in a folder of its own.
    assert got["same_node"] and got["own_dir"] and got["own_pid"], got
    assert got["x"] == "41" and got["made"] == "on the node", got
    report = got["report"]
    assert report["method"] == "checkpoint" and "forked on its node" in report["reason"], got
    assert report["files"] >= 2 and report["parent_cells"] >= 6, got  # made.txt, in/data.csv
    assert got["leak"] == "False" and got["child_cwd"] != got["report"]["parent_work_dir"], got
    # Each goes on alone: what the fork changes, the parent does not see.
    assert got["parent_after"] == ["41", "on the node"], got
    assert any("Forked" in note for note in got["transcript_notes"]), got
    # A budget the node's files pass: refused there before a kernel starts, nothing left
    # on the node; and the fork's folder there goes when it closes.
    assert got["refused"][0] == "DiskSpaceError" and "max_bytes" in got["refused"][1], got
    assert got["dirs_after_refusal"] == got["dirs_before"], got
    assert got["dirs_after_close"] == got["dirs_before"], got
    # Cancelled while the host made it: the host ends the fork's kernel, its folder goes,
    # and the parent goes on.
    assert got["abandoned"] == ["CancelledError"], got
    assert got["dirs_after_abandon"] == got["dirs_before"] and got["after_abandon"] == "41", got


def test_without_shared_storage_the_files_api_reaches_the_kernels_folder_on_its_node(
    record: dict[str, Any],
) -> None:
    got = part(record, "basics")["files"]
    # One listing: the caller's saved outputs and transcript, and the node's files.
    assert "made.txt" in got["listed"] and any(p.endswith(".png") for p in got["listed"]), got
    assert got["read"] == ["on the node", 11], got
    assert got["where"].endswith("made.txt on Ray node " + got["node"]), got
    # An upload lands on the node, whole, where the kernel reads it.
    assert got["uploaded"] == [6, "a,b\n1\n"], got
    assert got["huge"].startswith("DiskSpaceError: the upload of 'huge.bin'"), got
    assert got["huge_left"] == [], got
    # The kernel's own attacks, on its node: a planted link, a path out, too many open.
    assert got["link"] == "link" and got["climb"] == "invalid", got
    assert "never followed" in " ".join(got["skipped"]), got
    assert got["busy"] == "busy" and got["after_busy"] == "on the node", got


def test_twenty_sessions_fill_both_workers_and_each_does_all_a_session_does(
    record: dict[str, Any],
) -> None:
    got = part(record, "twenty")
    # 20 x 0.2 CPU is both workers' 4 CPUs: Ray had to use both, ten on each.
    assert sorted(set(got["nodes"])) == sorted(record["workers"]), got["nodes"]
    assert all(got["nodes"].count(node) == 10 for node in record["workers"]), got["nodes"]
    for stdout, pngs in got["ran"]:
        assert stdout == "made" and len(pngs) == 1, got["ran"]
    assert got["read_back"] == [True] * 20, got
    for cells in got["replayed"]:
        assert cells == [["ran", "ok", False], ["ran", "ok", False]], cells  # JSON: lists


def test_a_nodes_host_keeps_a_pool_ready_and_each_session_takes_a_fresh_kernel(
    record: dict[str, Any],
) -> None:
    got = part(record, "pooled")
    assert got["first_pooled"] is False and got["pooled"] == [True, True], got
    assert got["x"] == ["False", "False"] and len(set(got["dirs"])) == 2, got  # fresh, apart


def test_ray_places_each_session_by_what_it_holds(record: dict[str, Any]) -> None:
    got = part(record, "placement")
    workers = record["workers"]
    assert sorted(got["two_cpu_nodes"]) == sorted(workers), got  # 2 CPUs each: one per node
    assert got["special"] == workers[1] and got["zone_a"] == workers[0], got
    refused = got["refused"]
    assert refused[0] == "KernelStartError", refused
    assert "CPU=2" in refused[1] and "free" in refused[1], refused
    # The node's host and zygote are warm: a kernel starts faster than the node's first.
    assert max(got["warm_starts"][1:]) < record["basics"]["cold_start"], got


def test_a_short_cell_costs_one_call_to_the_node_and_output_still_streams(
    record: dict[str, Any],
) -> None:
    got = part(record, "placement")
    # The host answers execute with the cell's messages: no receive call after it.
    assert got["host_calls_short_cell"] == 1, got
    # A silent cell of 0.1 s too: a short cell slowed by its node's load is still one call.
    assert got["host_calls_slow_cell"] == 1, got
    # A cell printing a line every 0.5 s: each line comes while the cell runs, so the
    # lines come apart (all at the cell's end, they would come together). Not when the
    # first comes: that is the load's as much as the node's.
    at = got["printing_cell_lines_at"]
    assert len(at) >= 3 and at[1] - at[0] >= 0.25 and at[2] - at[1] >= 0.25, at


def test_a_session_sees_the_gpus_ray_gave_it_and_no_other(record: dict[str, Any]) -> None:
    got = part(record, "gpus")
    gpu_node = record["workers"][0]  # WORKER_NODES: the first has two GPUs
    assert got["nodes"] == [gpu_node, gpu_node], got
    # Each kernel sees the one GPU its bundle holds: two sessions, two different GPUs.
    assert sorted(got["visible"]) == ["0", "1"], got
    assert [[v] for v in got["visible"]] == got["node_gpus"], got
    # Contained, and still allowed the GPU devices (Sandbox(gpus=True) implied).
    assert got["contained_with_gpus"] == [True, True], got
    assert got["third"][0] == "KernelStartError" and "GPU=1" in got["third"][1], got
    # Without GPUs, the kernel's CUDA sees none and its containment opens none.
    assert got["without"] == "" and got["without_contained_gpus"] is False, got


def test_a_contained_kernel_on_a_node_cannot_reach_ray_or_the_driver(
    record: dict[str, Any],
) -> None:
    got = part(record, "hostile")
    assert got["sandbox"] is not None, got  # contained where the node can: it can here
    assert got["gcs"].startswith(("ConnectionRefusedError", "OSError")), got
    flood = got["flood"]
    assert flood["status"] == "ok" and not flood["q_through"], flood
    assert "over the host's cap of 1,000,000 bytes a message" in flood["message"], flood
    assert got["after"] == "still here", got  # the session goes on


def test_a_killed_driver_takes_its_kernels_with_it(record: dict[str, Any]) -> None:
    got = part(record, "ownership")
    assert got["before"] == {"host": True, "kernel": True}, got
    assert got["after"] == {"host": False, "kernel": False}, got


def test_with_shared_work_dirs_checkpoint_fork_and_restore_work_on_any_node(
    record: dict[str, Any],
) -> None:
    got = part(record, "shared")
    assert got["cwd_is_callers"] and got["file_on_caller"] == "from the kernel", got
    assert got["restored"] == "42", got
    parent_node, restored_node = got["restored_moved"]
    assert parent_node == got["zones"]["a"] and restored_node == got["zones"]["b"], got
    assert got["fork"] == ["42", "41", "checkpoint", True] and got["fork_file"], got
    assert "w.txt" in got["server_files"] and got["server_fork"] == 201, got
    suspended, resumed = got["suspend"]
    assert suspended and resumed == "42", got  # x came back from the suspend's checkpoint
    assert got["server_stopped"] == 0, got


def test_serve_ray_runs_every_session_on_the_cluster(record: dict[str, Any]) -> None:
    got = part(record, "serve")
    workers = record["workers"]
    assert got["stdout"] == "42" and got["node"]["node_id"] == workers[1], got
    # The files routes: the kernel's files on its node, listed, downloaded, uploaded to.
    assert "report.txt" in got["http_listed"], got
    assert got["http_download"] == [200, "from the node"], got
    assert got["http_upload"] == [201, "sent"], got
    assert got["http_outside"] in (400, 404), got
    # --pool-size with --ray: the first session on the node started its kernel, a later one
    # took the kernel the node's host had made ready meanwhile.
    assert got["pooled"][0] is False and got["pooled"][-1] is True, got
    assert got["node"]["gpus"] == [], got  # it holds none
    assert got["options"]["ray"] == {"labels": {"zone": "b"}, "num_cpus": 1.0}, got
    assert got["sandbox"] is not None, got  # contained on its node, as a local one
    assert got["plain_node"]["node_id"] in workers, got  # no ray option: on the cluster too
    refused = got["refused"]
    assert refused["too_many_cpus"][0] == 422 and "--ray-max-cpus" in refused["too_many_cpus"][1]
    assert refused["unknown_key"][0] == 422 and "cpus" in refused["unknown_key"][1], refused
    assert refused["docker"][0] in (403, 422), refused
    # Recovery checkpoints need work dirs every node mounts: refused, saying which flag.
    every = refused["checkpoint_every"]
    assert every[0] == 422 and "--ray-shared-work-root" in every[1], refused
    # A fork is made on the parent's node, by its host: its variables and files came.
    assert got["fork"][0] == 201, got
    assert got["fork_said"] == "kept sent" and got["fork_node"] == workers[1], got
    assert got["stopped"] == 0, got


def test_a_tenants_quotas_hold_on_the_cluster_measured_by_the_node(
    record: dict[str, Any],
) -> None:
    got = part(record, "quota")
    assert got["node"] in record["workers"], got
    # Stopped by the quota (measured on the node while the loop ran), not by its timeout.
    assert got["status"] == "quota_exceeded" and "cpu_seconds_per_hour" in got["message"], (
        json.dumps(got, indent=1)
    )
    assert got["again"] == [429, "cpu_seconds_per_hour"], got
    # The work-dir quota counts the kernel's folder on its node (its host sums it): the
    # execution that filled it says so, and an upload is refused.
    assert "work_dir_bytes" in got["filled_message"], got
    assert got["upload"] == [429, "work_dir_bytes"], got


def test_mcp_ray_runs_its_sessions_on_the_cluster(record: dict[str, Any]) -> None:
    got = part(record, "mcp")
    assert not got["error"] and "42" in got["text"], got
    assert "kx-node-" in got["text"], got  # the kernel's folder is its node host's
    # list_files and read_file reach the files the kernel wrote there.
    assert "notes.txt" in got["listed"] and got["read"] == [False, "kept on the node"], got
    assert not got["forked"][0], got
    forked = json.loads(got["forked"][1])
    assert forked["fork_report"]["method"] == "checkpoint", got
    assert forked["node"]["node_id"] in record["workers"], got  # MCP says where, as HTTP does
    assert got["fork_x"] == ["[1, 2] kept on the node", "[1]"], got


def test_a_lost_node_is_an_answer_within_seconds_and_the_next_run_moves(
    record: dict[str, Any],
) -> None:
    got = part(record, "loss")
    assert got["status"] == "kernel_died" and "node lost" in got["message"], got
    assert got["seconds"] < 15, got
    assert got["next_status"] == "ok" and got["next_node"] != got["lost_node"], got
    assert "come back in the new kernel" in got["message"] and got["kernel_gone"], got
    assert "recovery checkpoint" in got["next_message"] and got["x_after"] == "1", got


def test_a_host_that_stops_answering_counts_as_lost_and_is_ended(record: dict[str, Any]) -> None:
    got = part(record, "frozen")
    assert got["status"] == "kernel_died" and "node lost" in got["message"], got
    assert "did not answer" in got["message"] and got["seconds"] < 15, got
    assert got["ended"], got


# -- the scenario, in the cluster's driver


def leak_scenario(info: ClusterInfo) -> dict[str, Any]:
    """Leaves a process running in the namespace, in a session of its own, to be found."""
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    return {"pid": process.pid}


def cluster_scenario(info: ClusterInfo) -> dict[str, Any]:
    import ray

    nodes = ray.nodes()
    found: dict[str, Any] = {
        "workers": info.workers,
        "alive": sum(1 for n in nodes if n["Alive"]),
        "addresses": sorted({n["NodeManagerAddress"] for n in nodes}),
    }
    root = Path(info.temp_dir) / "callers"
    root.mkdir()
    parts: list[tuple[str, Callable[[], Coroutine[Any, Any, dict[str, Any]]]]] = [
        ("basics", lambda: basics(root / "basics")),
        ("placement", lambda: placement(root / "placement", info)),
        ("twenty", lambda: twenty(root / "twenty")),
        ("pooled", lambda: pooled(root / "pooled")),
        ("hostile", lambda: hostile(root / "hostile", info)),
        ("gpus", lambda: gpus(root / "gpus")),
        ("ownership", lambda: ownership(root / "ownership", info)),
        ("shared", lambda: shared(root / "shared", info)),
        ("serve", lambda: serve(root / "serve", info)),
        ("mcp", lambda: mcp(root / "mcp", info)),
        ("quota", lambda: quota(root / "quota", info)),
        ("loss", lambda: loss(root / "loss", info)),
        ("frozen", lambda: frozen(root / "frozen", info)),
    ]
    for name, body in parts:
        clock = time.perf_counter()
        try:
            found[name] = asyncio.run(asyncio.wait_for(body(), 240))
        except BaseException:  # recorded: the other parts still run
            found[name] = {"crash": traceback.format_exc()[-4000:]}
        found[name]["seconds_taken"] = round(time.perf_counter() - clock, 2)
    return found


async def basics(root: Path) -> dict[str, Any]:
    got: dict[str, Any] = {}
    backend = RayBackend(num_cpus=1)
    clock = time.perf_counter()
    async with await AsyncSession(root, backend=backend, timeout=60).start() as session:
        got["cold_start"] = round(time.perf_counter() - clock, 3)  # the node's first kernel
        first = await session.execute("x = 41\nx + 1")
        got["node"] = backend.node["node_id"]
        second = await session.execute("print(x)")
        got["answers"] = [first.text.strip(), second.stdout.strip()]
        plot = await session.execute(
            "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
        )
        got["png_saved"] = [f for f in plot.files if f.endswith(".png")]
        got["png_on_caller"] = all((root / f).is_file() for f in got["png_saved"])
        got["variables"] = [v.name for v in await session.variables()]
        running = await session.execute(
            "import time\ntime.sleep(0.3)\nprint('bg')", background=True
        )
        done = await running.wait(60)
        got["background"] = None if done is None else done.stdout.strip()
        asked = await session.execute("print(input('name? '))", stdin=["hello"])
        got["stdin"] = asked.stdout.strip().split()[-1] if asked.stdout.strip() else asked.text
        stuck = await session.execute("while True:\n    pass", timeout=2)
        got["timeout_status"] = stuck.status
        got["after_timeout"] = (await session.execute("print(x)")).stdout.strip()
        made = await session.execute(
            "import os\nopen('made.txt', 'w').write('on the node')\nprint(os.getcwd())"
        )
        got["kernel_cwd"], got["caller_dir"] = made.stdout.strip(), str(root)
        got["made_on_caller"] = (root / "made.txt").exists()
        got["files"] = await _files_through_the_host(session)
        try:
            await session.checkpoint()
            got["checkpoint_refused"] = ["nothing", ""]
        except Exception as exc:
            got["checkpoint_refused"] = [type(exc).__name__, str(exc)]
        got["fork"] = await _fork_on_the_node(session, root.parent)
        await session.execute("open('transcript.ipynb', 'w').write('forged on the node')")
        await session.flush()
        got["transcript_cells"] = len(nbformat.read(session.notebook_path, 4).cells)
    # Closed: what the kernel wrote on its node came into the caller's work dir first.
    got["brought_back"] = {
        name: (root / name).read_text() if (root / name).is_file() else None
        for name in ("made.txt", "in/data.csv")
    }
    got["leak_brought"] = (root / "leak").exists() or (root / "leak").is_symlink()
    got["transcript_after_close"] = len(nbformat.read(session.notebook_path, 4).cells)
    return got


async def placement(root: Path, info: ClusterInfo) -> dict[str, Any]:
    got: dict[str, Any] = {}
    sessions = []
    try:
        for index in range(2):
            backend = RayBackend(num_cpus=2)
            sessions.append(await AsyncSession(root / f"big{index}", backend=backend).start())
        got["two_cpu_nodes"] = [s._backend.node["node_id"] for s in sessions]
        third = AsyncSession(root / "big2", backend=RayBackend(num_cpus=2, startup_timeout=3))
        got["refused"] = await _start_refused(third)
    finally:
        for session in sessions:
            await session.close()
    for name, backend in (
        ("special", RayBackend(num_cpus=0, resources={"special": 1})),
        ("zone_a", RayBackend(num_cpus=1, labels={"zone": "a"})),
    ):
        async with AsyncSession(root / name, backend=backend) as session:
            await session.execute("1")
            got[name] = backend.node["node_id"]
    # A node whose host is warm: three sessions one after another on the same node.
    starts = []
    for index in range(3):
        clock = time.perf_counter()
        session = AsyncSession(root / f"warm{index}", backend=RayBackend(labels={"zone": "b"}))
        await session.start()
        starts.append(round(time.perf_counter() - clock, 3))
        if index == 2:
            trips = []
            for _ in range(20):
                clock = time.perf_counter()
                await session.execute("1")
                trips.append(time.perf_counter() - clock)
            got["round_trip_ms_p50"] = round(statistics.median(trips) * 1000, 2)
            await _calls_and_streaming(session, got)
        await session.close()
    got["warm_starts"] = starts
    return got


async def pooled(root: Path) -> dict[str, Any]:
    """``RayBackend(pool=1)``: the node's host keeps a kernel ready for the next session."""
    got: dict[str, Any] = {"starts": [], "pooled": [], "dirs": [], "x": []}

    def backend() -> RayBackend:
        return RayBackend(num_cpus=0.1, labels={"zone": "a"}, pool=1)

    first = AsyncSession(root / "p0", backend=backend())
    await first.start()
    host = first._backend._host
    deadline = time.monotonic() + 60
    while await _awaitable(host.ready.remote()) < 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    await first.execute("x = 'first'")
    for index in (1, 2):
        clock = time.perf_counter()
        session = AsyncSession(root / f"p{index}", backend=backend())
        await session.start()
        answer = await session.execute("import os\nprint(os.getcwd(), 'x' in dir())")
        got["starts"].append(round(time.perf_counter() - clock, 3))
        got["pooled"].append(session._backend.node["pooled"])
        cwd, has_x = answer.stdout.split()
        got["dirs"].append(cwd)
        got["x"].append(has_x)
        await session.close()
        while await _awaitable(host.ready.remote()) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
    got["first_pooled"] = first._backend.node["pooled"]
    await first.close()
    return got


async def twenty(root: Path) -> dict[str, Any]:
    """Issue #30's first acceptance: 20 sessions that fill both workers' CPUs (0.2 each)."""
    code = (
        "import os\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3]); plt.savefig('plot.png')\n"
        "open('mine.txt', 'w').write(os.path.basename(os.getcwd()))\nprint('made')"
    )
    sessions = [
        AsyncSession(root / f"s{i:02d}", backend=RayBackend(num_cpus=0.2)) for i in range(20)
    ]
    got: dict[str, Any] = {"nodes": [], "ran": [], "read_back": [], "replayed": []}
    try:
        for batch in range(0, 20, 5):  # five at a time: a 2-core machine runs every node
            await asyncio.gather(*(s.start() for s in sessions[batch : batch + 5]))
        for session in sessions:
            ran = await session.execute(code)
            shown = await session.execute("plt.figure(); plt.plot([3, 1]); plt.show()")
            got["nodes"].append(session._backend.node["node_id"])
            got["ran"].append([ran.stdout.strip(), [f for f in shown.files if f.endswith(".png")]])
            reader = await session.file_access.open_read("mine.txt")  # on its node
            folder = Path(session._backend.node["work_dir"]).name
            got["read_back"].append((await reader.read(100)).decode() == folder)
            await reader.close()
            await session.flush()
    finally:
        for session in sessions:
            await session.close()
    # Each transcript replays: into a new session on the cluster, with the same stdout.
    for index in (0, 19):
        replayed = await AsyncSession.from_transcript(
            sessions[index].notebook_path, root / f"replay{index}", backend=RayBackend(num_cpus=0.2)
        )
        async with replayed:
            report = replayed.replay_report
            assert report is not None
            got["replayed"].append([(c.action, c.status, c.differs) for c in report.cells])
    return got


async def _files_through_the_host(session: AsyncSession) -> dict[str, Any]:
    """The session's files API, its kernel on a node without shared storage."""
    from kernelexec import DiskSpaceError
    from kernelexec._workdir import Refused

    got: dict[str, Any] = {"node": session._backend.node["node_id"]}
    files = session.file_access
    got["listed"] = [entry.path for entry in (await files.listing(100)).files]
    reader = await files.open_read("made.txt")
    got["read"] = [(await reader.read(100)).decode(), reader.size]
    await reader.close()
    got["where"] = files.where("made.txt")
    upload = await files.upload("in/data.csv", 6)
    await upload.write(b"a,b\n")
    await upload.write(b"1\n")
    size, _ = await upload.commit()
    seen = await session.execute("print(open('in/data.csv').read(), end='')")
    got["uploaded"] = [size, seen.stdout]
    try:  # declared bigger than the node's disk: refused by its host before a byte is sent
        await files.upload("huge.bin", 2**60)
        got["huge"] = "accepted"
    except DiskSpaceError as exc:
        got["huge"] = f"{type(exc).__name__}: {exc}"
    got["huge_left"] = [e.path for e in (await files.listing(100)).files if "huge" in e.path]
    await session.execute("import os\nos.symlink('/etc/passwd', 'leak')")
    for name, path in (("link", "leak"), ("climb", "../made.txt")):
        try:
            await (await files.open_read(path)).close()
            got[name] = "opened"
        except Refused as exc:
            got[name] = exc.reason
    got["skipped"] = (await files.listing(100)).skipped
    held = []
    try:
        for _ in range(40):
            held.append(await files.open_read("made.txt"))
        got["busy"] = "never"
    except Refused as exc:
        got["busy"] = exc.reason
    for reader in held:
        await reader.close()
    reader = await files.open_read("made.txt")
    got["after_busy"] = (await reader.read(100)).decode()
    await reader.close()
    return got


async def _fork_on_the_node(session: AsyncSession, where: Path) -> dict[str, Any]:
    """A fork of a kernel whose files are its node's own: made by the node's host, there."""
    from kernelexec import DiskSpaceError

    backend = session._backend
    assert isinstance(backend, RayBackend)
    node_root = Path(backend.node["work_dir"]).parent
    got: dict[str, Any] = {"dirs_before": sorted(p.name for p in node_root.iterdir())}
    # A budget the caller's files fit in but the node's do not: refused on the node, where
    # nothing is left.
    here = sum(p.stat().st_size for p in session.work_dir.rglob("*") if p.is_file())
    await session.execute("open('big.bin', 'wb').write(bytes(2**20))")
    try:
        await session.fork(where / "fork-refused", max_bytes=here + 2**19)
        got["refused"] = ["nothing", ""]
    except DiskSpaceError as exc:
        got["refused"] = [type(exc).__name__, str(exc)]
    await session.execute("os.remove('big.bin')")
    got["dirs_after_refusal"] = sorted(p.name for p in node_root.iterdir())
    clock = time.perf_counter()
    async with await session.fork(where / "basics-fork") as child:
        got["seconds"] = round(time.perf_counter() - clock, 3)
        report = child.fork_report
        assert report is not None
        got["report"] = report.to_dict()
        made = child._backend
        assert isinstance(made, RayBackend)
        got["same_node"] = made.node["node_id"] == backend.node["node_id"]
        got["own_dir"] = made.node["work_dir"] != backend.node["work_dir"]
        got["own_pid"] = made.node["kernel_pid"] != backend.node["kernel_pid"]
        got["x"] = (await child.execute("print(x)")).stdout.strip()
        got["made"] = (await child.execute("print(open('made.txt').read())")).stdout.strip()
        # The parent's planted link was not followed, nor copied as a link.
        probe = "import os\nprint(os.path.lexists('leak'), os.getcwd())"
        got["leak"], got["child_cwd"] = (await child.execute(probe)).stdout.split()
        await child.execute("x = 'the fork'\nopen('made.txt', 'w').write('changed')")
        got["parent_after"] = [
            (await session.execute("print(x)")).stdout.strip(),
            (await session.execute("print(open('made.txt').read())")).stdout.strip(),
        ]
        got["transcript_notes"] = [
            c.source[:40]
            for c in nbformat.read(child.notebook_path, 4).cells
            if c.cell_type == "markdown"
        ]
    got["dirs_after_close"] = sorted(p.name for p in node_root.iterdir())
    # A fork its owner stops waiting for (cancelled while the host checkpoints a variable
    # that takes 3 s to pickle): the kernel the host was making goes too, once made.
    slow = "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(3)\n"
    await session.execute(slow + "        return (int, (0,))\nslow = Slow()")
    forking = asyncio.ensure_future(session.fork(where / "fork-abandoned"))
    await asyncio.sleep(1)
    forking.cancel()
    got["abandoned"] = await asyncio.gather(forking, return_exceptions=True)
    got["abandoned"] = [type(e).__name__ for e in got["abandoned"]]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got["dirs_after_abandon"] = sorted(p.name for p in node_root.iterdir())
        if got["dirs_after_abandon"] == got["dirs_before"]:
            break
        await asyncio.sleep(0.5)
    got["after_abandon"] = (await session.execute("del slow, Slow\nprint(x)")).stdout.strip()
    return got


_SLOW = "import time\ntime.sleep(0.1)"


async def _calls_and_streaming(session: AsyncSession, got: dict[str, Any]) -> None:
    """How many calls to the node's host a short cell costs, and whether a long one
    that prints as it goes is heard as it goes (not at its end)."""
    backend: Any = session._backend
    calls: list[Any] = []
    answer = backend._answer

    async def counted(call: Any, within: float) -> Any:
        calls.append(call)
        return await answer(call, within)

    backend._answer = counted
    # The fewest calls of three tries, for "1 + 1" and for a silent cell of 0.1 s (as a
    # loaded node makes a short cell): a try can take longer than the host waits.
    for key, code in (("host_calls_short_cell", "1 + 1"), ("host_calls_slow_cell", _SLOW)):
        counts = []
        for _ in range(3):
            calls.clear()
            await session.execute(code)
            counts.append(len(calls))
        got[key] = min(counts)
    lines: list[float] = []
    clock = time.perf_counter()
    await session.execute(
        "import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.5)",
        on_output=lambda _: lines.append(time.perf_counter() - clock),
    )
    got["printing_cell_lines_at"] = [round(at, 3) for at in lines]


async def _start_refused(session: AsyncSession) -> list[str]:
    """How its start was refused: [exception name, message]; ["nothing", ""] if it started."""
    try:
        await session.start()
    except KernelexecError as exc:
        return [type(exc).__name__, str(exc)]
    await session.close()
    return ["nothing", ""]


async def gpus(root: Path) -> dict[str, Any]:
    """Sessions holding GPUs of the node that has two (Ray counts them; none is real here)."""
    got: dict[str, Any] = {}
    probe = "import os, json; print(json.dumps([os.environ.get('CUDA_VISIBLE_DEVICES')]))"
    holders = [
        AsyncSession(root / f"g{i}", backend=RayBackend(num_cpus=0, num_gpus=1)) for i in range(2)
    ]
    try:
        for session in holders:
            await session.start()
        got["visible"] = [json.loads((await s.execute(probe)).stdout)[0] for s in holders]
        got["nodes"] = [s._backend.node["node_id"] for s in holders]
        got["node_gpus"] = [s._backend.node["gpus"] for s in holders]
        got["contained_with_gpus"] = [s.sandbox is not None and s.sandbox.gpus for s in holders]
        # Both GPUs held: a third session waits for one, then says none is free.
        third = AsyncSession(
            root / "g2", backend=RayBackend(num_cpus=0, num_gpus=1, startup_timeout=3)
        )
        got["third"] = await _start_refused(third)
    finally:
        for session in holders:
            await session.close()
    # A session that holds no GPU sees none, whatever its node has.
    backend = RayBackend(num_cpus=1, labels={"zone": "a"})
    async with AsyncSession(root / "none", backend=backend) as s:
        got["without"] = json.loads((await s.execute(probe)).stdout)[0]
        got["without_contained_gpus"] = s.sandbox is not None and s.sandbox.gpus
    return got


async def hostile(root: Path, info: ClusterInfo) -> dict[str, Any]:
    got: dict[str, Any] = {}
    gcs_port = int(info.address.rsplit(":", 1)[1])
    limits = Limits(max_message_bytes=1_000_000)
    backend = RayBackend(num_cpus=1)
    async with AsyncSession(root, backend=backend, limits=limits) as session:
        policy = session.sandbox
        got["sandbox"] = None if policy is None else policy.to_dict()
        reach = await session.execute(
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {gcs_port}), timeout=3)\n"
            "    print('connected')\n"
            "except OSError as exc:\n"
            "    print(type(exc).__name__, exc)\n"
        )
        got["gcs"] = reach.stdout.strip()
        # Raw protocol messages, past the kernel's own caps: dropped on the node, unread.
        flood = await session.execute(
            "k = get_ipython().kernel\n"
            "for _ in range(2):\n"
            "    k.session.send(k.iopub_socket, 'stream', "
            "{'name': 'stdout', 'text': 'Q' * 3_000_000}, parent=k.get_parent('shell'))\n"
            "print('after')\n"
        )
        got["flood"] = {
            "status": flood.status,
            "message": flood.message or "",
            "stdout": flood.stdout[-200:],
            "q_through": "Q" * 1000 in flood.stdout,
        }
        got["after"] = (await session.execute("print('still here')")).stdout.strip()
    return got


OWNER = """
import asyncio, json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
from kernelexec import AsyncSession, RayBackend

async def main():
    backend = RayBackend(num_cpus=1)
    session = await AsyncSession(sys.argv[2], backend=backend).start()
    print(json.dumps(backend.node), flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


async def ownership(root: Path, info: ClusterInfo) -> dict[str, Any]:
    got: dict[str, Any] = {}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, info.address, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert owner.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(owner.stdout.readline), 120)
        node = json.loads(line)
        pids = {"host": node["host_pid"], "kernel": node["kernel_pid"]}
        got["before"] = {name: not process_gone(pid) for name, pid in pids.items()}
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        clock = time.monotonic()
        while any(not process_gone(pid) for pid in pids.values()) and time.monotonic() - clock < 60:
            await asyncio.sleep(0.2)
        got["after"] = {name: not process_gone(pid) for name, pid in pids.items()}
        got["ended_within"] = round(time.monotonic() - clock, 2)
    finally:
        if owner.poll() is None:
            owner.kill()
    return got


async def shared(root: Path, info: ClusterInfo) -> dict[str, Any]:
    """Work dirs on storage every node mounts (here: the one machine's): the kernel runs in
    the caller's work dir, so checkpoint, fork and restore work, on any node."""
    from _serverproc import ServerProcess, wait_for

    got: dict[str, Any] = {}
    zone = {"a": info.workers[0], "b": info.workers[1]}
    parent_backend = RayBackend(shared_work_dirs=True, labels={"zone": "a"})
    async with AsyncSession(root / "parent", backend=parent_backend) as parent:
        made = await parent.execute(
            "import os\nx = 41\nopen('k.txt', 'w').write('from the kernel')\nprint(os.getcwd())"
        )
        got["cwd_is_callers"] = made.stdout.strip() == str((root / "parent").resolve())
        got["file_on_caller"] = (root / "parent" / "k.txt").read_text()
        checkpoint = await parent.checkpoint()
        elsewhere = RayBackend(shared_work_dirs=True, labels={"zone": "b"})
        restored = await AsyncSession.restore(checkpoint, root / "restored", backend=elsewhere)
        async with restored:
            got["restored"] = (await restored.execute("print(x + 1)")).stdout.strip()
            got["restored_moved"] = [parent_backend.node["node_id"], elsewhere.node["node_id"]]
        async with await parent.fork(root / "fork") as child:
            child_backend = child._backend
            assert isinstance(child_backend, RayBackend)
            got["fork"] = [
                (await child.execute("x += 1\nprint(x)")).stdout.strip(),
                (await parent.execute("print(x)")).stdout.strip(),
                child.fork_report.method if child.fork_report else None,
                child_backend.node["node_id"] in zone.values(),
            ]
            got["fork_file"] = (root / "fork" / "k.txt").exists()
    got["zones"] = zone
    server = await asyncio.to_thread(
        ServerProcess,
        root / "server",
        "--ray",
        info.address,
        "--ray-shared-work-root",
        "--idle-timeout",
        "3",
    )
    try:
        made_id = await asyncio.to_thread(server.create)
        await asyncio.to_thread(server.execute, made_id, "x = 41\nopen('w.txt', 'w').write('hi')")
        # Idle past --idle-timeout: suspended (checkpointed, kernel shut down); the next
        # execution restores it into a new kernel wherever Ray puts it.
        suspended = await asyncio.to_thread(
            wait_for, lambda: server.state(made_id)["state"] == "suspended", 60
        )
        resumed = await asyncio.to_thread(server.execute, made_id, "print(x + 1)")
        got["suspend"] = [suspended, resumed["stdout"].strip()]
        listed = await asyncio.to_thread(server.http.get, f"/sessions/{made_id}/files")
        got["server_files"] = [f["path"] for f in listed.json().get("files", [])]
        forked = await asyncio.to_thread(server.http.post, f"/sessions/{made_id}/fork", json={})
        got["server_fork"] = forked.status_code
    finally:
        got["server_stopped"] = await asyncio.to_thread(server.stop)
    return got


async def serve(root: Path, info: ClusterInfo) -> dict[str, Any]:
    """``kernelexec serve --ray``: a server, a driver of its own, whose sessions run on nodes."""
    from _serverproc import ServerProcess

    got: dict[str, Any] = {}
    server = await asyncio.to_thread(
        ServerProcess, root, "--ray", info.address, "--ray-max-cpus", "2", "--pool-size", "1"
    )
    try:
        made = await asyncio.to_thread(server.create, ray={"labels": {"zone": "b"}})
        ran = await asyncio.to_thread(server.execute, made, "import os\nprint(6 * 7)")
        state = await asyncio.to_thread(server.state, made)
        got["stdout"], got["node"] = ran["stdout"].strip(), state["node"]
        # The files routes reach the kernel's folder on its node.
        await asyncio.to_thread(
            server.execute, made, "open('report.txt', 'w').write('from the node')"
        )
        listed = await asyncio.to_thread(server.http.get, f"/sessions/{made}/files")
        got["http_listed"] = [f["path"] for f in listed.json()["files"]]
        fetched = await asyncio.to_thread(server.http.get, f"/sessions/{made}/files/report.txt")
        got["http_download"] = [fetched.status_code, fetched.text]
        put = await asyncio.to_thread(
            server.http.put, f"/sessions/{made}/files/up.txt", content=b"sent"
        )
        back = await asyncio.to_thread(server.execute, made, "print(open('up.txt').read())")
        got["http_upload"] = [put.status_code, back["stdout"].strip()]
        outside = await asyncio.to_thread(server.http.get, f"/sessions/{made}/files/..%2Fx")
        got["http_outside"] = outside.status_code
        # --pool-size 1: the node keeps a kernel ready; a later session there takes it.
        got["pooled"] = [state["node"]["pooled"]]
        for _ in range(20):
            again = await asyncio.to_thread(server.create, ray={"labels": {"zone": "b"}})
            pooled = (await asyncio.to_thread(server.state, again))["node"]["pooled"]
            await asyncio.to_thread(server.http.delete, f"/sessions/{again}")
            got["pooled"].append(pooled)
            if pooled:
                break
            await asyncio.sleep(0.5)
        got["options"], got["sandbox"] = state["options"], state["sandbox"]
        plain = await asyncio.to_thread(server.create)  # no ray option: the cluster still
        got["plain_node"] = (await asyncio.to_thread(server.state, plain))["node"]
        refused = {}
        for name, body in (
            ("too_many_cpus", {"ray": {"num_cpus": 3}}),
            ("unknown_key", {"ray": {"cpus": 1}}),
            ("docker", {"docker": {}}),
            ("checkpoint_every", {"checkpoint_every": 5}),
        ):
            answer = await asyncio.to_thread(server.http.post, "/sessions", json=body)
            refused[name] = [answer.status_code, answer.json().get("message", "")]
        got["refused"] = refused
        # A fork: on the parent's node, made there (no shared storage), with its state.
        await asyncio.to_thread(server.execute, made, "y = 'kept'")
        fork = await asyncio.to_thread(server.http.post, f"/sessions/{made}/fork", json={})
        got["fork"] = [fork.status_code, fork.json().get("message", "")]
        if fork.status_code == 201:
            forked = fork.json()["id"]
            said = await asyncio.to_thread(
                server.execute, forked, "print(y, open('up.txt').read())"
            )
            forked_state = await asyncio.to_thread(server.state, forked)
            got["fork_said"] = said["stdout"].strip()
            got["fork_node"] = forked_state["node"]["node_id"]
    finally:
        got["stopped"] = await asyncio.to_thread(server.stop)
    return got


async def quota(root: Path, info: ClusterInfo) -> dict[str, Any]:
    """A tenant's CPU quota holds for its kernels on the cluster, measured on their nodes;
    its work-dir quota counts what its kernel wrote on its node."""
    from test_tenants_server import client, tenants_server

    got: dict[str, Any] = {}
    root.mkdir(parents=True)
    tenants = {
        "burner": {"quotas": {"cpu_seconds_per_hour": 3}},
        "filler": {"quotas": {"work_dir_bytes": 200_000}},
    }
    server, _, tokens = await asyncio.to_thread(
        tenants_server, root, tenants, "--ray", info.address
    )
    burner = client(server, tokens["burner"])
    filler = client(server, tokens["filler"])
    try:
        made = (await asyncio.to_thread(filler.post, "/sessions", json={})).json()["id"]
        fill = {"code": "open('big.bin', 'wb').write(bytes(300_000))"}
        filled = (
            await asyncio.to_thread(filler.post, f"/sessions/{made}/execute", json=fill)
        ).json()
        got["filled_message"] = filled.get("message") or ""
        put = await asyncio.to_thread(filler.put, f"/sessions/{made}/files/more.txt", content=b"x")
        got["upload"] = [put.status_code, put.json().get("quota")]
        made = (await asyncio.to_thread(burner.post, "/sessions", json={})).json()["id"]
        clock = time.monotonic()
        niceness = {"code": "import os; print(os.nice(0))"}
        said = await asyncio.to_thread(burner.post, f"/sessions/{made}/execute", json=niceness)
        got["kernel_niceness"] = said.json().get("stdout", "").strip()
        burn = {"code": "while True: pass", "timeout": 120}
        # Read for longer than the execution's own timeout: a quota that never stopped
        # it fails on its status below, with the server's log, not on a read timeout.
        result = (
            await asyncio.to_thread(
                lambda: burner.post(f"/sessions/{made}/execute", json=burn, timeout=200.0)
            )
        ).json()
        got["seconds"] = round(time.monotonic() - clock, 1)
        got["status"], got["message"] = result["status"], result.get("message") or ""
        again = await asyncio.to_thread(
            burner.post, f"/sessions/{made}/execute", json={"code": "1"}
        )
        got["again"] = [again.status_code, again.json().get("quota")]
        state = (await asyncio.to_thread(burner.get, f"/sessions/{made}")).json()
        got["node"] = (state.get("node") or {}).get("node_id")
    finally:
        burner.close()
        filler.close()
        await asyncio.to_thread(server.stop)
    if got.get("status") != "quota_exceeded":  # what the server saw, to say why
        got["log"] = server.log.read_text(errors="replace")[-6000:]
    return got


async def mcp(root: Path, info: ClusterInfo) -> dict[str, Any]:
    """``kernelexec mcp --ray``: an MCP client's sessions run on the cluster's nodes."""
    from _mcpclient import stdio_mcp, texts

    got: dict[str, Any] = {}
    code = "import os\nprint(6 * 7, os.getcwd())"
    root.mkdir(parents=True)
    async with stdio_mcp(root / "root", "--ray", info.address) as client:
        ran = await client.call_tool("execute_code", {"code": code})
        got["error"], got["text"] = ran.is_error, texts(ran)
        write = "open('notes.txt', 'w').write('kept on the node')"
        await client.call_tool("execute_code", {"code": write})
        listed = await client.call_tool("list_files", {})
        got["listed"] = [f["path"] for f in json.loads(texts(listed))["files"]]
        read = await client.call_tool("read_file", {"path": "notes.txt"})
        got["read"] = [read.is_error, texts(read)]
        # A fork, made on the kernel's node: the variables and files came, each goes alone.
        await client.call_tool("execute_code", {"code": "x = [1]"})
        forked = await client.call_tool("fork_session", {"session": "default"})
        got["forked"] = [forked.is_error, texts(forked)]
        grown = {"code": "x.append(2); print(x, open('notes.txt').read())"}
        child = await client.call_tool("execute_code", {**grown, "session": "default-fork-1"})
        parent = await client.call_tool("execute_code", {"code": "print(x)"})
        got["fork_x"] = [texts(child).strip(), texts(parent).strip()]
    return got


async def loss(root: Path, info: ClusterInfo) -> dict[str, Any]:
    got: dict[str, Any] = {}
    backend = RayBackend(num_cpus=1, lost_after=3, shared_work_dirs=True)
    async with AsyncSession(root, backend=backend, timeout=120, checkpoint_every=0.01) as session:
        await session.execute("x = 1")
        lost_node = backend.node["node_id"]
        kernel_pid = backend.node["kernel_pid"]
        got["lost_node"] = lost_node
        running = await session.execute("import time\ntime.sleep(100)", background=True)
        await asyncio.sleep(1)
        victim = info.worker_nodes[info.workers.index(lost_node)]
        clock = time.monotonic()
        await asyncio.to_thread(info.cluster.remove_node, victim)
        result = await running.wait(120)
        got["seconds"] = round(time.monotonic() - clock, 2)
        assert result is not None
        got["status"], got["message"] = result.status, result.message or ""
        got["kernel_gone"] = await _ended([kernel_pid], 30)
        following = await session.execute("print(1 + 1)")
        got["next_status"] = following.status
        got["next_message"] = following.message or ""
        got["next_node"] = backend.node["node_id"]
        # The recovery checkpoint (checkpoint_every) came back on the other node.
        got["x_after"] = (await session.execute("print(x)")).stdout.strip()
    return got


async def frozen(root: Path, info: ClusterInfo) -> dict[str, Any]:
    """A node host that stops answering (SIGSTOP: a hung node, or one cut off)."""
    got: dict[str, Any] = {}
    backend = RayBackend(num_cpus=1, lost_after=3)
    async with AsyncSession(root, backend=backend, timeout=120, auto_restart=False) as session:
        await session.execute("x = 1")
        host_pid, kernel_pid = backend.node["host_pid"], backend.node["kernel_pid"]
        running = await session.execute("import time\ntime.sleep(100)", background=True)
        await asyncio.sleep(1)
        os.kill(host_pid, signal.SIGSTOP)
        clock = time.monotonic()
        result = await running.wait(120)
        got["seconds"] = round(time.monotonic() - clock, 2)
        assert result is not None
        got["status"], got["message"] = result.status, result.message or ""
        # The backend had Ray kill the host: its kernel ends with it.
        got["ended"] = await _ended([host_pid, kernel_pid], 30)
    return got


async def _ended(pids: list[int], within: float) -> bool:
    clock = time.monotonic()
    while any(not process_gone(pid) for pid in pids):
        if time.monotonic() - clock > within:
            return False
        await asyncio.sleep(0.2)
    return True
