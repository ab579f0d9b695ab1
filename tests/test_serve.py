"""A real OpenAI-compatible server (``transformers serve`` with the embedded model) as the buyer."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("fastapi")

from haggler.engine.backends.embedded import embedded_model_dir  # noqa: E402
from haggler.engine.backends.openai_api import Endpoint  # noqa: E402
from haggler.evaluation.runner import run  # noqa: E402
from haggler.evaluation.settings import RunSettings  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.evaluation.grid import make_grid, write_grid  # noqa: E402
from haggler.evaluation.results import read_records  # noqa: E402
from haggler.core.scenario import write_scenarios  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served_model():
    folder = embedded_model_dir()
    exe = Path(sys.executable).with_name("transformers")
    if not exe.exists():
        exe = shutil.which("transformers")
    port = _free_port()
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([str(exe), "serve", str(folder), "--host", "127.0.0.1", "--port", str(port),
                             "--device", "cpu"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail("transformers serve did not come up")
                time.sleep(1)
        yield f"http://127.0.0.1:{port}/v1", str(folder)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_openai_buyer_on_a_real_server_against_a_local_seller(tmp_path, served_model):
    base_url, model = served_model
    # the buyer opens: a seller that walks away at its first turn would leave the server unasked
    scenarios = generate_scenarios(4, 31, max_turns=4)
    sp, gp, out = tmp_path / "s.jsonl", tmp_path / "g.jsonl", tmp_path / "r.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], [f"openai:{model}"], ["buyer"]), gp)
    # transformers serve answers one request at a time: the four negotiations' requests queue behind each other,
    # and on 2 cores shared with another job one 32-token reply took over 120 s (twice, in CI). What is tested is
    # the integration, not the server's speed, so the client waits long enough for a loaded machine.
    endpoints = {"default": Endpoint(base_url=base_url, timeout_s=600, max_retries=1)}
    report = run(gp, sp, "hf:default", out, settings=RunSettings(api_max_tokens=32), progress=False,
                 endpoints=endpoints)
    records = read_records(out)
    assert report.played == 4 and len(records) == 4
    assert report.errors == 0, [r.error for r in records]
    for r in records:
        assert r.agents["buyer"]["reported_model"] == model
        assert r.agents["seller"]["backend"] == "hf"
        buyer_turns = [t for t in r.transcript if t["speaker"] == "buyer"]
        assert buyer_turns and all(t["text"] is not None for t in buyer_turns)
