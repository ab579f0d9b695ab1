"""The demo: a scripted tournament, every seller against every buyer on generated scenarios."""

from __future__ import annotations

from pathlib import Path

from haggler.evaluation.runner import run
from haggler.scenarios.generate import generate_scenarios
from haggler.evaluation.grid import make_grid, write_grid
from haggler.evaluation.results import load_results
from haggler.core.scenario import write_scenarios
from haggler.evaluation.summary import render, summarize

SELLERS = ("scripted:boulware", "scripted:linear", "scripted:conceder", "scripted:hardliner", "scripted:tft",
           "scripted:random")
BUYERS = ("scripted:boulware", "scripted:conceder", "scripted:tft")


def scripted_tournament(out: Path, n_scenarios: int = 24, seed: int = 2026) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    scenarios_path, grid_path, results_path = out / "scenarios.jsonl", out / "grid.jsonl", out / "results.jsonl"
    scenarios = generate_scenarios(n_scenarios, seed)
    write_scenarios(scenarios, scenarios_path)
    write_grid(make_grid([s.id for s in scenarios], BUYERS, ("seller", "buyer")), grid_path)
    for seller in SELLERS:
        run(grid_path, scenarios_path, seller, results_path, progress=False)
    render(summarize(load_results([results_path])),
           title=f"scripted tournament: {n_scenarios} scenarios, both openers")
    print(f"results: {results_path}  (haggler summary {results_path})")
    return results_path
