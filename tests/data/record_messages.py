"""Records real kernel messages for the reducer's unit tests.

python tests/data/record_messages.py   # rewrites tests/data/messages.json
"""

import asyncio
import json
import tempfile
from pathlib import Path

from kernelexec import LocalBackend
from kernelexec._environment import kernel_env

SCENARIOS = {
    "streams_and_result": "import sys\nprint('out'); print('err', file=sys.stderr); 40 + 2",
    "error_after_output": "print('before')\n1/0",
    "clear_output_wait": (
        "from IPython.display import clear_output\n"
        "for i in range(3):\n    clear_output(wait=True)\n    print(f'step {i}')"
    ),
    "update_display": (
        "from IPython.display import display, update_display\n"
        "display('first', display_id='d1')\nupdate_display('second', display_id='d1')"
    ),
    "carriage_returns": (
        "import sys, time\nfor i in range(3):\n    sys.stdout.write(f'\\r{i}/2')\n"
        "    sys.stdout.flush(); time.sleep(0.25)\nprint()"
    ),
    "markdown_and_json": (
        "from IPython.display import Markdown, JSON, display\n"
        "display(Markdown('# Title'))\ndisplay(JSON({'a': 1}))"
    ),
}


def _plain(msg):
    return {
        "header": {"msg_type": msg["header"]["msg_type"], "msg_id": "recorded"},
        "parent_header": {"msg_id": msg["parent_header"].get("msg_id") and "REQUEST"},
        "content": msg["content"],
    }


async def record():
    backend = LocalBackend()
    await backend.start(cwd=Path(tempfile.mkdtemp()), env=kernel_env())
    recorded = {}
    try:
        for name, code in SCENARIOS.items():
            msg_id = await backend.execute(code, allow_stdin=False)
            messages, idle, replied = [], False, False
            while not (idle and replied):
                item = await backend.receive(5)
                assert item is not None, name
                _, msg = item
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                messages.append(_plain(msg))
                kind = msg["header"]["msg_type"]
                idle |= kind == "status" and msg["content"]["execution_state"] == "idle"
                replied |= kind == "execute_reply"
            recorded[name] = messages
    finally:
        await backend.shutdown()
    out = Path(__file__).with_name("messages.json")
    out.write_text(json.dumps(recorded, indent=1, default=str) + "\n")


if __name__ == "__main__":
    asyncio.run(record())
