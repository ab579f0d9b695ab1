"""haggler's engine against NegMAS's SAOMechanism, same scenarios, same process, side by side.

Boulware sellers against Conceder buyers on random linear additive scenarios of 4 issues x 5 options,
10 turns (haggler) and 10 steps (NegMAS). Prints negotiations per second for both and their ratio
(target: haggler at least 10x), then one JSON line with the figures.

    .venv/bin/python benchmarks/bench_engine.py [--scenarios 50] [--repeats 4]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

from haggler.core import analysis
from haggler.scenarios import negmas as negmas_bridge
from haggler.agents.registry import make_agent
from haggler.core.protocol import Negotiation, ProtocolConfig, play
from haggler.core.scenario import Issue, Preferences, Scenario
from haggler.core.score import score


def random_scenario(i: int, rng: np.random.Generator, n_issues: int = 4, n_options: int = 5) -> Scenario:
    issues = tuple(Issue(name=f"issue{k}", options=tuple(f"v{j}" for j in range(n_options))) for k in range(n_issues))
    prefs = {}
    for side in ("seller", "buyer"):
        w = rng.dirichlet(np.ones(n_issues))
        w[-1] = 1.0 - w[:-1].sum()
        prefs[side] = Preferences(
            weights={iss.name: float(x) for iss, x in zip(issues, w)},
            values={iss.name: {o: float(v) for o, v in zip(iss.options, rng.uniform(0, 1, n_options))} for iss in issues},
            reservation=0.0,
        )
    return Scenario(id=f"bench{i}", context="a benchmark good", issues=issues, seller=prefs["seller"],
                    buyer=prefs["buyer"], max_turns=10)


def run_haggler(scenarios: list[Scenario], repeats: int, cold: bool) -> tuple[float, float]:
    turns = 0
    start = time.perf_counter()
    for r in range(repeats):
        for s in scenarios:
            if cold:
                analysis._CACHE.clear()
            n = Negotiation(s, ProtocolConfig(opener="seller"))
            play(n, make_agent("scripted:boulware", s, "seller", r), make_agent("scripted:conceder", s, "buyer", r))
            score(n)
            turns += len(n.turns)
    elapsed = time.perf_counter() - start
    return repeats * len(scenarios) / elapsed, turns / (repeats * len(scenarios))


def run_negmas(scenarios: list[Scenario], repeats: int) -> tuple[float, float]:
    from negmas.sao import BoulwareTBNegotiator, ConcederTBNegotiator, SAOMechanism

    prepared = []
    for s in scenarios:
        space = negmas_bridge.outcome_space(s)
        prepared.append((space, negmas_bridge.ufun(s, "seller", space), negmas_bridge.ufun(s, "buyer", space)))
    offers = 0
    start = time.perf_counter()
    for _ in range(repeats):
        for space, us, ub in prepared:
            m = SAOMechanism(outcome_space=space, n_steps=10)
            m.add(BoulwareTBNegotiator(), ufun=us)
            m.add(ConcederTBNegotiator(), ufun=ub)
            m.run()
            offers += len(m.extended_trace)
    elapsed = time.perf_counter() - start
    return repeats * len(scenarios) / elapsed, offers / (repeats * len(scenarios))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scenarios", type=int, default=50)
    p.add_argument("--repeats", type=int, default=4)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    scenarios = [random_scenario(i, rng) for i in range(args.scenarios)]
    warnings.simplefilter("ignore")
    run_haggler(scenarios[:5], 1, cold=False)  # warm up imports
    run_negmas(scenarios[:5], 1)
    negmas_rate, negmas_offers = run_negmas(scenarios, args.repeats)
    warm_rate, turns = run_haggler(scenarios, args.repeats, cold=False)
    cold_rate, _ = run_haggler(scenarios, args.repeats, cold=True)
    figures = {
        "benchmark": "engine",
        "negotiations": args.scenarios * args.repeats,
        "haggler_per_s": round(warm_rate, 1),
        "haggler_cold_per_s": round(cold_rate, 1),
        "negmas_per_s": round(negmas_rate, 1),
        "ratio": round(warm_rate / negmas_rate, 2),
        "ratio_cold": round(cold_rate / negmas_rate, 2),
        "haggler_turns_per_negotiation": round(turns, 2),
        "negmas_offers_per_negotiation": round(negmas_offers, 2),
        "target_ratio": 10,
    }
    print(f"haggler: {warm_rate:,.0f} negotiations/s ({cold_rate:,.0f}/s recomputing analytics every time)")
    print(f"NegMAS:  {negmas_rate:,.0f} negotiations/s")
    print(f"ratio:   {warm_rate / negmas_rate:.1f}x (cold {cold_rate / negmas_rate:.1f}x); target >= 10x")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
