"""API throughput, two runs against a loopback OpenAI-compatible buyer that answers after a fixed delay.

1. Concurrency: 1,152 negotiations at concurrency 64 (two named endpoints of 32 each). The wall time is
   compared with the ideal, calls x delay / concurrency (target: within 1.25x).
2. Requests per minute: the server refuses (429) what its token bucket (``--rpm`` a minute, a burst of
   ``--window`` seconds' worth) cannot take; two buyer models share one endpoint whose ``requests_per_minute``
   is that limit. Targets: zero 429s, and a wall time within 1.15x of the limit's ideal, calls / rpm minutes
   (the concurrency alone would go several times faster: the limit binds).

Ends with one JSON line of figures (the concurrency run's at the top level, the rate-limited run's under
``rpm_run``).

    .venv/bin/python benchmarks/bench_api.py [--delay 1.0] [--concurrency 64] [--scenarios 288]
        [--rpm 1800] [--window 2] [--rpm-scenarios 144] [--rpm-delay 0.5] [--skip-concurrency]
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

from haggler.core.scenario import write_scenarios
from haggler.engine.backends.openai_api import Endpoint
from haggler.evaluation.grid import make_grid, write_grid
from haggler.evaluation.results import read_records
from haggler.evaluation.runner import RunSettings, run
from haggler.scenarios.generate import generate_scenarios


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def play(n_scenarios: int, buyers: list[str], endpoints_of: dict, concurrency: int, server_args: list[str]) -> dict:
    """One run against a server in its own process (so that it does not compete with the client for the GIL)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "haggler.testing.openai_server", "--port", str(port),
                               *server_args], stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        work = Path(tempfile.mkdtemp())
        scenarios = generate_scenarios(n_scenarios, 1)
        write_scenarios(scenarios, work / "s.jsonl")
        write_grid(make_grid([s.id for s in scenarios], buyers, ["seller", "buyer"]), work / "g.jsonl")
        endpoints = endpoints_of(f"http://127.0.0.1:{port}/v1")
        settings = RunSettings(batch_size=4 * concurrency)
        start = time.perf_counter()
        report = run(work / "g.jsonl", work / "s.jsonl", "scripted:boulware", work / "r.jsonl", settings=settings,
                     progress=False, endpoints=endpoints)
        wall = time.perf_counter() - start
        records = read_records(work / "r.jsonl")
    finally:
        server.terminate()  # it prints what it counted, then exits
        counted = json.loads(server.communicate(timeout=30)[0].strip().splitlines()[-1])
    calls = sum(r.agents["buyer"]["usage"]["calls"] for r in records if r.agents)
    return {"negotiations": len(records), "errors": report.errors, "calls": calls, "wall_s": round(wall, 2),
            "server_requests": counted["requests"], "rate_limited_429": counted["rate_limited"]}


def concurrency_run(args: argparse.Namespace) -> dict:
    def endpoints_of(url: str) -> dict:
        # two named endpoints share the server and split the concurrency, as two providers would
        half = args.concurrency // 2
        return {n: Endpoint(name=n, base_url=url, max_concurrency=half, timeout_s=30) for n in ("a", "b")}

    figures = play(args.scenarios, ["openai:fake@a", "openai:fake@b"], endpoints_of, args.concurrency,
                   ["--delay", str(args.delay)])
    ideal = max(figures["calls"] * args.delay / args.concurrency, 1e-9)
    figures.update({"delay_s": args.delay, "concurrency": args.concurrency, "ideal_s": round(ideal, 2),
                    "ratio_to_ideal": round(figures["wall_s"] / ideal, 3), "target_ratio": 1.25})
    return figures


def rpm_run(args: argparse.Namespace) -> dict:
    def endpoints_of(url: str) -> dict:
        return {"p": Endpoint(name="p", base_url=url, max_concurrency=args.concurrency, timeout_s=30,
                              requests_per_minute=args.rpm, max_retries=5)}

    figures = play(args.rpm_scenarios, ["openai:fake-1@p", "openai:fake-2@p"], endpoints_of, args.concurrency,
                   ["--delay", str(args.rpm_delay), "--rpm", str(args.rpm), "--window", str(args.window)])
    ideal = figures["calls"] / (args.rpm / 60)
    figures.update({"delay_s": args.rpm_delay, "concurrency": args.concurrency, "rpm": args.rpm,
                    "server_burst_s": args.window, "unlimited_ideal_s": round(figures["calls"] * args.rpm_delay
                                                                               / args.concurrency, 2),
                    "ideal_s": round(ideal, 2), "ratio_to_ideal": round(figures["wall_s"] / ideal, 3),
                    "target_ratio": 1.15, "target_429": 0})
    return figures


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--delay", type=float, default=1.0, help="server latency per call (frontier APIs: 1-10 s)")
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--scenarios", type=int, default=288)
    p.add_argument("--rpm", type=float, default=1800, help="the server's limit, and the endpoint's budget")
    p.add_argument("--window", type=float, default=2.0, help="the server's burst, in seconds of its limit")
    p.add_argument("--rpm-scenarios", type=int, default=144)
    p.add_argument("--rpm-delay", type=float, default=0.5)
    p.add_argument("--skip-concurrency", action="store_true")
    args = p.parse_args()
    figures: dict = {"benchmark": "api"}
    if not args.skip_concurrency:
        c = concurrency_run(args)
        figures.update(c)
        print(f"concurrency: {c['negotiations']} negotiations, {c['calls']} API calls in {c['wall_s']:.1f} s; ideal"
              f" {c['ideal_s']:.1f} s; {c['ratio_to_ideal']:.2f}x ideal (target <= 1.25x)")
    r = rpm_run(args)
    figures["rpm_run"] = r
    print(f"rpm {args.rpm:g}: {r['negotiations']} negotiations, {r['calls']} API calls in {r['wall_s']:.1f} s; ideal"
          f" {r['ideal_s']:.1f} s; {r['ratio_to_ideal']:.2f}x ideal (target <= 1.15x); {r['rate_limited_429']} 429s"
          f" (target 0); without the limit the concurrency would take {r['unlimited_ideal_s']:.1f} s")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
