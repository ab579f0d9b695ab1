"""The HTML report in a real browser: headless Chromium loads it from disk, with no network."""

import shutil
import subprocess
import tempfile

import pytest

pytest.importorskip("matplotlib")

from haggler.study.report import build_report  # noqa: E402
from haggler.study.config import Arm  # noqa: E402
from tests.conftest import synthetic  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (.ci/run installs Debian's package where missing)")
def test_the_report_renders_with_tables_plots_and_an_opened_transcript(tmp_path):
    synthetic(tmp_path)
    arms = [Arm("base", "hf:base", "base", size=0.135),
            Arm("rl", "hf:rl", "rl", base="base", size=0.135, learning_rate=1e-5, seed=0)]
    build_report([tmp_path / "results.jsonl"], tmp_path / "report", arms=arms, n_boot=300)
    page = (tmp_path / "report" / "report.html").resolve()
    with tempfile.TemporaryDirectory() as profile:
        done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", f"file://{page}#t3"],
                              capture_output=True, text=True, timeout=120)
    dom, log = done.stdout, done.stderr
    assert 'id="headline"' in dom and "<td>base</td>" in dom and "<td>rl</td>" in dom
    assert dom.count('class="plot"') >= 2 and "data:image/png;base64," in dom
    assert '<details class="transcript" id="t3"' in dom
    opened = dom.split('id="t3"')[1].split(">")[0]
    assert "open" in opened  # the page's script opened the transcript named in the address
    assert "129 shown" in dom  # the script ran: 2 arms x 64 cells + 1 errored cell, all shown
    console = [line for line in log.splitlines() if ":CONSOLE" in line]
    assert not console, console
    assert "ERR_" not in log  # nothing was fetched from a network
