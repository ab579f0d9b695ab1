"""API throughput: 1,152 negotiations against a loopback OpenAI-compatible buyer that answers after a
fixed delay, at concurrency 64. Compares the wall time with the ideal, calls x delay / concurrency
(target: within 1.25x), and ends with one JSON line of figures.

    .venv/bin/python benchmarks/bench_api.py [--delay 0.2] [--concurrency 64] [--scenarios 288]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from haggler.engine.backends.openai_api import Endpoint
from haggler.evaluation.runner import RunSettings, run
from haggler.scenarios.generate import generate_scenarios
from haggler.evaluation.grid import make_grid, write_grid
from haggler.evaluation.results import read_records
from haggler.core.scenario import write_scenarios


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--delay", type=float, default=1.0, help="server latency per call (frontier APIs: 1-10 s)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--scenarios", type=int, default=288)
    args = p.parse_args()
    port = free_port()
    # The server runs in its own process so that it does not compete with the client for the GIL.
    server = subprocess.Popen([sys.executable, "-m", "haggler.testing.openai_server", "--port", str(port),
                               "--delay", str(args.delay)], stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        work = Path(tempfile.mkdtemp())
        scenarios = generate_scenarios(args.scenarios, 1)
        write_scenarios(scenarios, work / "s.jsonl")
        cells = make_grid([s.id for s in scenarios], ["openai:fake@a", "openai:fake@b"], ["seller", "buyer"])
        write_grid(cells, work / "g.jsonl")
        endpoint = dict(base_url=f"http://127.0.0.1:{port}/v1", max_concurrency=args.concurrency, timeout_s=30)
        # two named endpoints share the server and split the concurrency, as two providers would
        endpoints = {"a": Endpoint(name="a", **{**endpoint, "max_concurrency": args.concurrency // 2}),
                     "b": Endpoint(name="b", **{**endpoint, "max_concurrency": args.concurrency // 2})}
        settings = RunSettings(endpoints=endpoints, batch_size=4 * args.concurrency)
        start = time.perf_counter()
        report = run(work / "g.jsonl", work / "s.jsonl", "scripted:boulware", work / "r.jsonl", settings=settings,
                     progress=False)
        wall = time.perf_counter() - start
        records = read_records(work / "r.jsonl")
        calls = sum(1 for r in records for t in r.transcript if t["speaker"] == "buyer")
    finally:
        server.kill()
    ideal = max(calls * args.delay / args.concurrency, 1e-9)
    figures = {"benchmark": "api", "negotiations": len(records), "errors": report.errors, "calls": calls,
               "delay_s": args.delay, "concurrency": args.concurrency, "wall_s": round(wall, 2),
               "ideal_s": round(ideal, 2), "ratio_to_ideal": round(wall / ideal, 3), "target_ratio": 1.25}
    print(f"{len(records)} negotiations, {calls} API calls in {wall:.1f} s; ideal {ideal:.1f} s;"
          f" {wall / ideal:.2f}x ideal (target <= 1.25x)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
