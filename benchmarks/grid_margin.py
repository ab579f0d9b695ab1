"""Which evaluation grid separates a negotiating skill from refusing every offer?

On a grid whose buyers seldom offer anything worth accepting before the deadline, a seller that refuses
everything scores about what a good seller does, and a score gain there cannot tell a skill from refusing.
This plays scripted sellers (no model) on candidate grids, each a deadline and a pair of buyers, and gives
each seller's surplus over no deal (score minus its own reservation; the no-deal arm's is exactly 0) with a
scenario-clustered 95% interval, and its good-deal and loss rates.

The scenarios are drawn with a seed of their own (``--seed``, not the demo's evaluation seed), so choosing
the demo's grid here does not look at the negotiations its arms are then measured on.

    .venv/bin/python benchmarks/grid_margin.py --turns 4 6 8 --n 24
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from haggler.core.scenario import write_scenarios
from haggler.evaluation.grid import make_grid, write_grid
from haggler.evaluation.results import read_records
from haggler.evaluation.runner import run
from haggler.evaluation.stats import cluster_bootstrap
from haggler.scenarios.generate import generate_scenarios

BUYER_SETS = {
    "tft+aspiration": ["scripted:tft", "negmas:AspirationNegotiator"],
    "tft+conceder-negmas": ["scripted:tft", "negmas:NaiveTitForTatNegotiator"],
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, nargs="+", default=[4, 6, 8])
    p.add_argument("--n", type=int, default=24, help="scenarios per grid")
    p.add_argument("--seed", type=int, default=99, help="scenario seed (not an evaluation grid's)")
    p.add_argument("--buyers", nargs="+", default=list(BUYER_SETS), choices=list(BUYER_SETS))
    p.add_argument("--sellers", nargs="+", default=["scripted:linear", "scripted:boulware", "scripted:conceder",
                                                     "scripted:tft"])
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for turns in args.turns:
            scen = Path(tmp) / f"s{turns}.jsonl"
            scenarios = generate_scenarios(args.n, args.seed, max_turns=turns)
            write_scenarios(scenarios, scen)
            ids = [s.id for s in scenarios]
            for label in args.buyers:
                grid = Path(tmp) / f"g{turns}-{label}.jsonl"
                write_grid(make_grid(ids, BUYER_SETS[label], ["seller", "buyer"], 1, 0), grid)
                for seller in args.sellers:
                    out = Path(tmp) / f"r{turns}-{label}-{seller.replace(':', '_')}.jsonl"
                    run(grid, scen, seller, out, progress=False)
                    recs = [r for r in read_records(out) if r.ended_by != "error"]
                    ci = cluster_bootstrap([r.seller_surplus for r in recs], [r.scenario_id for r in recs],
                                           n_boot=2000)
                    row = {"turns": turns, "buyers": label, "seller": seller, "cells": len(recs),
                           "surplus": round(ci.estimate, 4), "low": round(ci.low, 4), "high": round(ci.high, 4),
                           "good_deal_rate": round(sum(bool(r.good_deal) for r in recs) / len(recs), 3),
                           "loss_rate": round(sum(r.seller_surplus < 0 for r in recs) / len(recs), 3),
                           "deal_rate": round(sum(bool(r.deal) for r in recs) / len(recs), 3)}
                    rows.append(row)
                    print(f"{turns:>2} turns  {label:<20} {seller:<18} surplus {ci.estimate:+.3f} "
                          f"({ci.low:+.3f} to {ci.high:+.3f})  good {row['good_deal_rate']:.2f}  "
                          f"losses {row['loss_rate']:.2f}  deals {row['deal_rate']:.2f}", flush=True)
    print(json.dumps({"benchmark": "grid_margin", "seed": args.seed, "n": args.n, "rows": rows}))


if __name__ == "__main__":
    main()
