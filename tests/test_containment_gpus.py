"""A contained kernel and this machine's GPUs: none unless ``Sandbox(gpus=True)``.

This machine has no GPU, so the device nodes given are stand-ins: the test
points ``gpu_devices`` at ``/dev/fuse`` (a real character device, harmless to
open, that no contained kernel may otherwise open) and checks that the kernel
opens it exactly when asked for. ``tests/gpu_check.py`` runs the same on a
machine with a GPU, with torch.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _contained import CONTAINABLE
from _serverproc import ServerProcess

from kernelexec import Sandbox, Session
from kernelexec._containment import _hints, _start
from kernelexec._containment._hints import containment_note
from kernelexec._containment._sandbox import gpu_devices

STAND_IN = "/dev/fuse"
OPEN = f"""
import os
try:
    os.close(os.open({STAND_IN!r}, os.O_RDWR)); print("opened")
except OSError as exc:
    print(type(exc).__name__)
"""

# As libcuda names its event thread: fopen("/proc/self/task/<tid>/comm", "wb").
NAME_A_THREAD = """
import threading
done = threading.Event()
worker = threading.Thread(target=done.wait)
worker.start()
try:
    with open(f"/proc/self/task/{worker.native_id}/comm", "wb") as comm:
        comm.write(b"cuda-EvtHandlr")
    print("named")
except OSError as exc:
    print(type(exc).__name__)
finally:
    done.set()
"""


def test_gpus_is_checked_and_round_trips() -> None:
    policy = Sandbox(gpus=True)
    assert policy.gpus and Sandbox.from_dict(policy.to_dict()) == policy
    assert Sandbox().gpus is False
    with pytest.raises(ValueError, match=r"Sandbox\.gpus is True or False"):
        Sandbox(gpus="all")  # type: ignore[arg-type]


def test_the_gpu_device_nodes_are_found_by_name(tmp_path: Path) -> None:
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "kfd", "null", "fuse"):
        (tmp_path / name).touch()
    (tmp_path / "nvidia-caps").mkdir()
    (tmp_path / "dri").mkdir()
    for name in ("renderD128", "card0"):
        (tmp_path / "dri" / name).touch()
    found = [os.path.relpath(p, tmp_path) for p in gpu_devices(str(tmp_path))]
    assert found == ["kfd", "nvidia-caps", "nvidia-uvm", "nvidia0", "nvidiactl", "dri/renderD128"]
    assert gpu_devices(str(tmp_path / "none")) == []


@CONTAINABLE
@pytest.mark.skipif(not os.path.exists(STAND_IN), reason=f"{STAND_IN} is the stand-in GPU")
def test_a_contained_kernel_opens_the_gpus_only_when_given_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_start, "gpu_devices", lambda: [STAND_IN])
    monkeypatch.setattr(_hints, "gpu_devices", lambda: [STAND_IN])
    with Session(tmp_path / "without", sandbox=True) as without:
        assert without.execute(OPEN).stdout.strip() == "PermissionError"
        assert without.execute(NAME_A_THREAD).stdout.strip() == "PermissionError"
        # What torch raises there gets a note naming the option.
        failed = without.execute("raise RuntimeError('Found no NVIDIA driver on your system')")
        assert "Sandbox(gpus=True)" in (failed.message or ""), failed.message
    with Session(tmp_path / "with", sandbox=Sandbox(gpus=True)) as given:
        assert given.execute(OPEN).stdout.strip() == "opened"
        # What NVIDIA's driver library does first: name a thread of the kernel's own.
        assert given.execute(NAME_A_THREAD).stdout.strip() == "named", "cuInit would fail"
        # Only its own threads: not its namespace's init, not a child of its own.
        others = given.execute(
            "import subprocess\n"
            "child = subprocess.Popen(['sleep', '30'])\n"
            "found = []\n"
            "for pid in (1, child.pid):\n"
            "    try:\n"
            "        open(f'/proc/{pid}/task/{pid}/comm', 'wb').write(b'x')\n"
            "        found.append('named')\n"
            "    except OSError as exc:\n"
            "        found.append(type(exc).__name__)\n"
            "child.kill()\n"
            "print(found)"
        )
        assert others.stdout.strip() == "['PermissionError', 'PermissionError']", others
        # Only that: no other file of /proc is written.
        sysctl = given.execute("open('/proc/sys/vm/swappiness', 'w')")
        assert sysctl.error is not None and sysctl.error.ename == "PermissionError"
        # Only the devices: the rest of /dev stays out of reach.
        assert given.execute(OPEN.replace(STAND_IN, "/dev/loop-control")).stdout.strip() in {
            "PermissionError",
            "FileNotFoundError",
        }


def test_the_note_needs_a_gpu_on_this_machine_and_a_kernel_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = "RuntimeError: No CUDA GPUs are available"

    def note(sandbox: Sandbox) -> str | None:
        return containment_note(sandbox, work_dir=tmp_path, code="", text=text, raised=True)

    monkeypatch.setattr(_hints, "gpu_devices", lambda: [])
    assert note(Sandbox()) is None  # no GPU here: nothing to give
    monkeypatch.setattr(_hints, "gpu_devices", lambda: ["/dev/nvidia0"])
    assert "--sandbox-gpus" in (note(Sandbox()) or "")
    assert note(Sandbox(gpus=True)) is None  # given them: a failure of the GPU's own


@CONTAINABLE
def test_serve_sandbox_gpus_gives_every_session_the_gpus(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "root", "--sandbox-gpus")
    try:
        session = server.create()
        assert server.state(session)["sandbox"]["gpus"] is True
        # A client cannot ask for them: the operator's flag decides.
        refused = server.http.post("/sessions", json={"sandbox": {"gpus": True}})
        assert refused.status_code == 422 and "gpus" in refused.json()["message"], refused.text
    finally:
        server.stop()
