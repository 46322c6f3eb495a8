"""Checkpoint and restore with real kernels: what comes back, what is refused, attacks."""

from __future__ import annotations

import json
import resource
from pathlib import Path

import pytest

from kernelexec import (
    AsyncSession,
    Checkpoint,
    CheckpointError,
    IncompatibleCheckpointError,
    Session,
)

STATE = """
import numpy as np, pandas as pd, socket, os.path as osp
df = pd.DataFrame({"x": np.arange(1000), "y": ["a", "b"] * 500})
arr = np.linspace(0, 1, 5000)
same = arr
scale = 2
double = lambda v: v * scale
def make_adder(k):
    def add(v):
        return v + k
    return add
add3 = make_adder(3)
class Model:
    def fit(self, xs):
        self.w_ = sum(xs) / len(xs)
        return self
    def predict(self, x):
        return self.w_ * x * scale
model = Model().fit([1, 2, 3])
conn = socket.socket()
gen = (i for i in range(3))
handle = open("data.txt", "w")
"""

CHECK = """
assert type(model) is Model and model.predict(1) == 4.0
assert df.equals(pd.DataFrame({"x": np.arange(1000), "y": ["a", "b"] * 500}))
assert same is arr and arr.flags.writeable and arr[-1] == 1.0
assert add3(1) == 4 and double(2) == 4
scale = 10  # functions from cells see the namespace as it is now
assert double(2) == 20 and model.predict(1) == 20.0
assert np.__name__ == "numpy" and pd.__name__ == "pandas" and osp.__name__ == "posixpath"
print("all good")
"""


async def test_round_trip_into_a_new_work_dir(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "parent", timeout=60) as parent:
        assert (await parent.execute(STATE)).ok
        (parent.work_dir / "notes.txt").write_text("kept")
        checkpoint = await parent.checkpoint()
    assert checkpoint.path.parent == parent.work_dir / "checkpoints"
    carried = {v.name for v in checkpoint.variables}
    assert {"df", "arr", "same", "double", "add3", "make_adder", "Model", "model"} <= carried
    assert checkpoint.modules == {
        "np": "numpy",
        "pd": "pandas",
        "socket": "socket",
        "osp": "posixpath",
    }
    skipped = {s.name: s for s in checkpoint.skipped}
    assert set(skipped) == {"conn", "gen", "handle"}, checkpoint.text
    assert skipped["conn"].type == "socket.socket" and "socket" in skipped["conn"].reason
    assert skipped["gen"].type == "generator"
    assert skipped["handle"].type == "_io.TextIOWrapper"
    # A directory a person can read.
    manifest = json.loads((checkpoint.path / "manifest.json").read_text())
    assert manifest["serializer"] == "cloudpickle"
    assert {"numpy", "pandas", "cloudpickle"} <= set(manifest["packages"])
    assert manifest["parent"]["work_dir"] == str(parent.work_dir)
    for variable in manifest["variables"]:
        assert (checkpoint.path / variable["file"]).is_file() and variable["size"] > 0
    assert (checkpoint.path / "files" / "notes.txt").read_text() == "kept"
    assert (checkpoint.path / "transcript.ipynb").is_file()

    restored = await AsyncSession.restore(checkpoint.path, tmp_path / "child", load_timeout=60)
    async with restored:
        assert (restored.work_dir / "notes.txt").read_text() == "kept"
        result = await restored.execute(CHECK)
        assert result.ok and result.stdout == "all good\n", result.text
        assert result.execution_count == 2  # counts go on from the parent's
        report = restored.restore_report
        assert report is not None and {"conn", "gen", "handle"} == {s.name for s in report.skipped}
        for name in ("conn", "gen", "handle", "df"):
            assert (await restored.execute(f"'{name}' in dir()")).text.strip() == str(name == "df")
    first = json.loads(restored.notebook_path.read_text())["cells"][0]
    assert first["cell_type"] == "markdown" and str(checkpoint.path) in first["source"]
    assert "conn (socket.socket)" in first["source"] and "gen (generator)" in first["source"]


async def test_a_checkpoint_without_variables_restores(tmp_path: Path) -> None:
    # Its staging folder holds no variable file, but the kernel's report goes there.
    async with AsyncSession(tmp_path / "empty") as session:
        await session.execute("import math")
        saved = await session.checkpoint(tmp_path / "cp")
    assert saved.variables == []
    async with await AsyncSession.restore(saved, tmp_path / "back") as back:
        assert back.restore_report is not None and back.restore_report.restored == []
        assert (await back.execute("print(math.pi > 3)")).stdout == "True\n"


def test_sync_facade_and_a_path_outside_the_work_dir(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere" / "ckpt"
    with Session(tmp_path / "work") as session:
        session.execute("x = {'k': [1, 2]}")
        checkpoint = session.checkpoint(outside)  # the caller's choice: allowed
    assert checkpoint.path == outside and (outside / "manifest.json").is_file()
    with Session.restore(outside) as restored:
        assert restored.execute("x['k'][1]").text.strip() == "2"


async def test_refuses_another_python_or_package_version(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work") as session:
        await session.execute("import numpy as np\na = np.ones(3)")
        checkpoint = await session.checkpoint(tmp_path / "ckpt")
    manifest_path = checkpoint.path / "manifest.json"
    original = manifest_path.read_text()

    manifest = json.loads(original)
    manifest["python"]["version"] = [3, 4, 0]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(IncompatibleCheckpointError, match=r"cpython 3\.4\.0"):
        await AsyncSession.restore(checkpoint.path, tmp_path / "a")

    manifest = json.loads(original)
    manifest["packages"]["numpy"] = "0.0.1"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(IncompatibleCheckpointError, match=r"numpy 0\.0\.1 in the checkpoint"):
        await AsyncSession.restore(checkpoint.path, tmp_path / "b")


async def test_a_damaged_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work") as session:
        await session.execute("a = list(range(1000))")
        checkpoint = await session.checkpoint(tmp_path / "ckpt")
    manifest_path = checkpoint.path / "manifest.json"
    good = manifest_path.read_text()
    [variable] = json.loads(good)["variables"]
    data = checkpoint.path / variable["file"]

    data.write_bytes(data.read_bytes()[:10])
    with pytest.raises(CheckpointError, match="damaged: the files of variable 'a'"):
        Checkpoint.open(checkpoint.path)
    data.unlink()
    with pytest.raises(CheckpointError, match=r"damaged: vars/0001\.pkl .*missing"):
        await AsyncSession.restore(checkpoint.path, tmp_path / "x")
    manifest_path.write_text(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="not valid JSON"):
        await AsyncSession.restore(checkpoint.path, tmp_path / "x")
    manifest_path.write_text(json.dumps({**json.loads(good), "variables": [{"name": "a b"}]}))
    with pytest.raises(CheckpointError, match=r"manifest .* is damaged"):
        await AsyncSession.restore(checkpoint.path, tmp_path / "x")
    manifest_path.unlink()
    with pytest.raises(CheckpointError, match=r"no manifest|missing"):
        await AsyncSession.restore(checkpoint.path, tmp_path / "x")
    with pytest.raises(CheckpointError, match="not a directory"):
        await AsyncSession.restore(tmp_path / "nothing", tmp_path / "x")


async def test_a_pickle_that_fails_to_load_costs_only_its_variable(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work") as session:
        await session.execute("a = [1, 2]\nb = {'k': 'v'}")
        checkpoint = await session.checkpoint(tmp_path / "ckpt")
    [first, _] = json.loads((checkpoint.path / "manifest.json").read_text())["variables"]
    pickled = checkpoint.path / first["file"]
    pickled.write_bytes(b"\x80\x05garbage".ljust(pickled.stat().st_size, b"."))
    restored = await AsyncSession.restore(checkpoint.path, tmp_path / "child")
    async with restored:
        assert restored.restore_report is not None
        assert restored.restore_report.restored == ["b"]
        [bad] = restored.restore_report.skipped
        assert bad.name == "a" and bad.reason
        assert (await restored.execute("b")).text.strip() == "{'k': 'v'}"


async def test_restart_keeping_state_after_a_module_changes(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work") as session:
        (session.work_dir / "tool.py").write_text("__version__ = '1'\nclass Thing:\n    pass\n")
        await session.execute(
            "import tool, numpy as np\nthing = tool.Thing()\ndata = np.arange(5)\nn = 7"
        )
        # What `pip install -U tool` does: another version of the module on disk.
        (session.work_dir / "tool.py").write_text(
            "__version__ = '2'\nclass Thing:\n    pass\nNEW = True\n"
        )
        before = (await session.execute("1")).execution_count
        report = await session.restart(keep_state=True)
        assert report is not None
        assert set(report.restored) == {"data", "n"} and set(report.modules) == {"tool", "np"}
        [thing] = report.skipped
        assert thing.name == "thing" and "tool 1 in the checkpoint, 2 here" in thing.reason
        result = await session.execute("print(tool.NEW, data.sum() + n, 'thing' in dir())")
        assert result.stdout == "True 17 False\n", result.text
        assert result.execution_count == (before or 0) + 1
        assert "state kept" in session.notebook_path.read_text()
        assert not list(session.work_dir.glob(".kernelexec-*"))  # no staging left behind
        assert await session.restart() is None  # the default: state gone, as before
        assert (await session.execute("'n' in dir()")).text.strip() == "False"


async def test_hostile_reduce_cannot_hang_or_break_the_others(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work") as session:
        await session.execute(
            "import time, pathlib\n"
            "class Stuck:\n"
            "    def __reduce__(self):\n"
            "        while True:\n"
            "            time.sleep(0.01)\n"
            "class Loud:\n"
            "    def __reduce__(self):\n"
            "        pathlib.Path('ran.txt').write_text('yes')\n"
            "        raise RuntimeError('no pickling me')\n"
            "stuck = Stuck()\nloud = Loud()\nkept = [1, 2, 3]"
        )
        checkpoint = await session.checkpoint(tmp_path / "ckpt", variable_timeout=1)
        skipped = {s.name: s.reason for s in checkpoint.skipped}
        assert "variable_timeout" in skipped["stuck"]
        assert "no pickling me" in skipped["loud"]
        assert (session.work_dir / "ran.txt").exists()  # it ran in the kernel, which is fine
        assert "kept" in {v.name for v in checkpoint.variables}
        assert (await session.execute("kept")).text.strip() == "[1, 2, 3]"  # kernel unharmed


async def test_a_huge_variable_never_passes_through_our_process(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work", timeout=120) as session:
        await session.execute("import numpy as np\nbig = np.ones(40_000_000)")  # 320 MB
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        checkpoint = await session.checkpoint(tmp_path / "ckpt", files=False)
        [variable] = checkpoint.variables
        assert variable.size >= 320_000_000
        restored = await AsyncSession.restore(checkpoint, tmp_path / "child", load_timeout=120)
        async with restored:
            assert (await restored.execute("float(big.sum())")).text.strip() == "40000000.0"
    grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grown_kb < 100_000  # KB: the 320 MB went kernel -> disk -> kernel


async def test_a_link_planted_where_the_checkpoint_goes_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    async with AsyncSession(tmp_path / "work") as session:
        await session.execute(f"import os\nos.symlink({str(outside)!r}, 'checkpoints')\nv = 1")
        checkpoint = await session.checkpoint()
    assert list(outside.iterdir()) == []
    assert checkpoint.path.parent == session.work_dir / "checkpoints"
    assert not (session.work_dir / "checkpoints").is_symlink()
    assert (checkpoint.path / "manifest.json").is_file()


async def test_a_kernel_without_cloudpickle_gets_a_clear_error(tmp_path: Path) -> None:
    async with AsyncSession(tmp_path / "work") as session:
        await session.execute("import sys\nsys.modules['cloudpickle'] = None\nv = 1")
        with pytest.raises(CheckpointError, match="pip install cloudpickle"):
            await session.checkpoint(tmp_path / "ckpt")
        assert (await session.execute("v")).text.strip() == "1"
        with pytest.raises(CheckpointError, match="not empty"):
            (tmp_path / "full").mkdir()
            (tmp_path / "full" / "f").write_text("x")
            await session.checkpoint(tmp_path / "full")
