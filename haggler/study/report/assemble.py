"""The report's numbers, from results records only: arms, per-arm figures, paired comparisons, verdicts.

Given only results files, every pair of sellers is compared on the cells both completed. Given the study's
arms, each arm's base, size, learning rate and seed are known: RL arms are compared with their base,
learning rates with each other at one size, and every arm with every reference seller, each family
Holm-corrected; intervals of multi-seed arms include training-seed variation. Everything is also broken
down per evaluation buyer. Errored cells are excluded from every score and counted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from haggler.evaluation.cost import dollars, total_usage
from haggler.evaluation.figures import fmt, mean
from haggler.evaluation.results import Record
from haggler.study.config import plan_arms
from haggler.study.selection import read_run
from haggler.evaluation.summary import behaviour_means
from haggler.evaluation.stats import cluster_bootstrap, holm, paired

POOLED = "all buyers"

ARM_COLUMNS = ["arm", "buyer", "completed", "errored", "seller_score", "ci_low", "ci_high", "surplus", "surplus_low",
               "surplus_high", "good_deal_rate", "loss_rate", "deal_rate",
               "seller_utility_given_deal", "buyer_utility", "pareto_optimal_rate", "nash_distance",
               "invalid_action_rate", "irrational_deal_rate", "seeds"]

HEADLINE = ["arm", "seller score", "95% CI", "surplus over no deal", "95% CI", "good deals", "losses", "deal rate",
            "invalid actions", "Pareto-optimal", "cells completed"]

HEADLINE_NOTE = ("Surplus over no deal is the seller's utility minus its own reservation value (0 without a deal): "
                 "a seller that refused every offer would score exactly 0, as the no-deal arm does, so only a surplus "
                 "whose interval lies above 0 shows negotiating beyond refusing. Good deals: cells ending in a deal "
                 "worth more to the seller than no deal; losses: deals worth less.")

COST_HEADER = ["arm", "buyer", "API calls", "prompt tokens", "completion tokens", "cached tokens", "cost"]


@dataclass
class ArmInfo:
    name: str
    kind: str = "seller"  # base | rl | reference | seller (results only)
    base: str | None = None
    size: float | None = None
    size_label: str | None = None
    learning_rate: float | None = None
    max_steps: int | None = None
    train_dirs: list[str] = field(default_factory=list)
    specs: dict[str, int | None] = field(default_factory=dict)  # seller spec -> training seed

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "base": self.base, "size": self.size, "size_label": self.size_label,
                "learning_rate": self.learning_rate, "max_steps": self.max_steps, "specs": self.specs}


def arm_table(records: list[Record], arms: list[Any] | None) -> dict[str, ArmInfo]:
    """Seller specs grouped into arms: from the study's arms, else one arm per seller spec."""
    table: dict[str, ArmInfo] = {}
    if arms:
        for a in arms:
            info = table.setdefault(a.name, ArmInfo(a.name, a.kind, a.base, a.size, a.size_label, a.learning_rate,
                                                    a.max_steps))
            info.specs[a.spec] = a.seed
            if a.train_dir:
                info.train_dirs.append(a.train_dir)
    known = {s for a in table.values() for s in a.specs}
    for r in records:
        if r.seller not in known:
            table.setdefault(r.seller, ArmInfo(r.seller)).specs[r.seller] = None
            known.add(r.seller)
    return table


def _seller_turns(r: Record) -> int:
    return sum(1 for t in r.transcript or [] if t.get("speaker") == "seller")


def _seed_spread(done: list[Record], seeds: dict[str, int | None], n_boot: int) -> dict[str, Any]:
    """Per training seed: its mean score and its own evaluation interval (scenarios resampled): the spread
    between seeds next to the noise of evaluating one seed."""
    per_seed: dict[Any, list[Record]] = defaultdict(list)
    for r in done:
        per_seed[seeds.get(r.seller)].append(r)
    means = {str(k): sum(r.seller_score for r in v) / len(v) for k, v in per_seed.items()}
    vals = list(means.values())
    sd = math.sqrt(sum((v - sum(vals) / len(vals)) ** 2 for v in vals) / (len(vals) - 1))
    half = {}
    for k, v in per_seed.items():
        ci = cluster_bootstrap([r.seller_score for r in v], [r.scenario_id for r in v], n_boot=n_boot)
        half[str(k)] = (ci.high - ci.low) / 2
    return {"seed_means": means, "seed_sd": sd, "seed_ci_halfwidth": half,
            "evaluation_halfwidth": sum(half.values()) / len(half)}


def arm_figures(records: list[Record], seeds: dict[str, int | None], n_boot: int) -> dict[str, Any]:
    done = [r for r in records if r.ended_by != "error"]
    errored = len(records) - len(done)
    out: dict[str, Any] = {"cells": len(records), "completed": len(done), "errored": errored,
                           "errored_share": errored / len(records) if records else None}
    usage = total_usage(records)  # both sides' API calls, errored cells included: they were paid for
    if usage.calls:
        out["api"] = usage.to_json()
    if not done:
        return out
    scores = [r.seller_score for r in done]
    multi = len({seeds.get(r.seller) for r in done}) > 1
    ci = cluster_bootstrap(scores, [r.scenario_id for r in done],
                           [seeds.get(r.seller) for r in done] if multi else None, n_boot=n_boot)
    deals = [r for r in done if r.deal]
    turns = sum(_seller_turns(r) for r in done)
    invalid = sum((r.invalid_actions or {}).get("seller", 0) for r in done)
    # surplus over no deal (score.py): 0 for the no-deal arm; files written before it was recorded have none
    surplus = [r.seller_surplus for r in done]
    if all(x is not None for x in surplus):
        out["surplus"] = cluster_bootstrap(surplus, [r.scenario_id for r in done],
                                           [seeds.get(r.seller) for r in done] if multi else None,
                                           n_boot=n_boot).to_json()
        out["good_deal_rate"] = sum(bool(r.good_deal) for r in done) / len(done)
        out["loss_rate"] = sum(x < 0 for x in surplus) / len(done)
    out.update({
        "seller_score": ci.to_json(),
        "deal_rate": len(deals) / len(done),
        "seller_utility_given_deal": mean([r.seller_utility for r in deals]),
        "buyer_utility": mean([r.buyer_utility for r in done]),
        "pareto_optimal_rate": len([r for r in done if r.pareto_optimal]) / len(done),
        "nash_distance": mean([r.nash_distance for r in done if r.nash_distance is not None]),
        "invalid_action_rate": invalid / turns if turns else None,
        "irrational_deal_rate": len([r for r in deals if r.individually_irrational]) / len(done),
        "seeds": len({seeds.get(r.seller) for r in done}),
        "behaviour": behaviour_means(done),
    })
    if multi:
        out.update(_seed_spread(done, seeds, n_boot))
    return out


def _cells(records: list[Record], seeds: dict[str, int | None], multi: bool) -> tuple[dict, dict | None]:
    """Completed cells as key -> (score, scenario); keyed by (seed, cell) for a multi-seed arm."""
    cells, seed_of = {}, {}
    for r in records:
        if r.ended_by == "error":
            continue
        if multi:
            key = (seeds.get(r.seller), r.cell_id)
            cells[key] = (r.seller_score, r.scenario_id)
            seed_of[key] = seeds.get(r.seller)
        else:
            cells[r.cell_id] = (r.seller_score, r.scenario_id)
    return cells, (seed_of if multi else None)


def comparison_pairs(table: dict[str, ArmInfo], with_study: bool) -> list[tuple[str, str, str]]:
    """(family, a, b): a is compared with b as a - b."""
    names = list(table)
    if not with_study:
        return [("pairs", a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    pairs = []
    rl = [a for a in table.values() if a.kind == "rl"]
    for a in rl:
        if a.base in table:
            pairs.append(("rl_vs_base", a.name, a.base))
    by_base = defaultdict(list)
    for a in rl:
        by_base[a.base].append(a)
    for group in by_base.values():
        group = sorted(group, key=lambda x: x.learning_rate or 0)
        for i, hi in enumerate(group):
            for lo in group[:i]:
                pairs.append(("learning_rates", hi.name, lo.name))
    refs = [a.name for a in table.values() if a.kind == "reference"]
    for a in table.values():
        if a.kind in ("base", "rl"):
            for ref in refs:
                pairs.append(("vs_reference", a.name, ref))
    return pairs


def compare(records_by_arm: dict[str, list[Record]], table: dict[str, ArmInfo], with_study: bool, margin: float,
            n_boot: int) -> list[dict[str, Any]]:
    rows = []
    for family, a, b in comparison_pairs(table, with_study):
        ra, rb = records_by_arm.get(a, []), records_by_arm.get(b, [])
        seeds_a = table[a].specs
        multi_a = len({s for s in seeds_a.values()}) > 1
        ca, seed_of = _cells(ra, seeds_a, multi_a)
        cb, _ = _cells(rb, table[b].specs, False)
        try:
            cmp = paired(a, ca, b, cb, margin=margin, n_boot=n_boot, a_seeds=seed_of)
        except ValueError as err:
            rows.append({"family": family, "a": a, "b": b, "error": str(err)})
            continue
        row = {"family": family, **cmp.to_json(), "a_kind": table[a].kind, "b_kind": table[b].kind}
        # cells either arm played but not both completed (errored or missing): excluded, and counted
        row["excluded_cells"] = len({r.cell_id for r in ra} | {r.cell_id for r in rb}) - cmp.common_cells
        rows.append(row)
    for family in {r["family"] for r in rows}:
        members = [r for r in rows if r["family"] == family and "error" not in r and not math.isnan(r["p_value"])]
        for r, p in zip(members, holm([r["p_value"] for r in members])):
            r["p_holm"] = p
    return rows


def verdict(row: dict[str, Any]) -> str:
    """What a comparison shows, in plain words."""
    if "error" in row:
        return f"not compared: {row['error']}"
    d = row["difference"]
    est, lo, hi = d["estimate"], d["low"], d["high"]
    p = row.get("p_holm") if row.get("p_holm") is not None else row["p_value"]
    words = f"{row['a']} - {row['b']} = {est:+.3f} (95% CI {lo:+.3f} to {hi:+.3f}; Holm p = {p:.3g})"
    eq = row.get("equivalence")
    if (lo > 0 or hi < 0) and p < 0.05:
        words += ": a detectable difference"
    elif lo > 0 or hi < 0:
        words += ": the interval excludes zero, but the test does not hold after Holm's correction (not conclusive)"
    elif eq and eq["equivalent"]:
        words += f": the interval includes zero, and the two are equivalent within +/-{eq['margin']:g} (TOST)"
    else:
        words += ": the interval includes zero (no detectable difference)"
        if eq:
            words += f", and equivalence within +/-{eq['margin']:g} is not shown either"
    if d.get("n_seeds", 1) <= 1 and "rl" in (row.get("a_kind"), row.get("b_kind")):
        words += "; one training seed: the interval covers evaluation noise only"
    return words


def by_arm(records: list[Record], table: dict[str, ArmInfo]) -> dict[str, list[Record]]:
    arm_of = {spec: a.name for a in table.values() for spec in a.specs}
    out: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        out[arm_of[r.seller]].append(r)
    return out


def per_buyer_figures(records_by_arm: dict[str, list[Record]], table: dict[str, ArmInfo], buyers: list[str],
                      n_boot: int) -> dict[str, dict[str, dict]]:
    """buyer (or POOLED) -> arm -> that arm's figures against that buyer."""
    per_buyer: dict[str, dict[str, dict]] = {}
    for buyer in [POOLED, *buyers]:
        per_buyer[buyer] = {}
        for name in table:
            rs = [r for r in records_by_arm.get(name, []) if buyer == POOLED or r.buyer == buyer]
            if rs:
                per_buyer[buyer][name] = arm_figures(rs, table[name].specs, n_boot)
    return per_buyer


def all_comparisons(records_by_arm: dict[str, list[Record]], table: dict[str, ArmInfo], buyers: list[str],
                    with_study: bool, margin: float, n_boot: int) -> list[dict[str, Any]]:
    """Every comparison, pooled and per buyer, each with its buyer and its verdict."""
    comparisons = []
    for buyer in [POOLED, *buyers]:
        subset = {a: [r for r in rs if buyer == POOLED or r.buyer == buyer] for a, rs in records_by_arm.items()}
        for row in compare(subset, table, with_study, margin, n_boot):
            row["buyer"] = buyer
            row["verdict"] = verdict(row)
            comparisons.append(row)
    return comparisons


def validation_verdicts(table: dict[str, ArmInfo]) -> list[dict[str, Any]]:
    """Per RL training run with validation: the step its final model is (the card's ``selected``, else the last
    validated step), that step's held-out change from step 0 with its paired interval, and whether it beat step 0.
    A run whose kept step did not is said so: it is still an arm of the study, not silently "the RL arm"."""
    out = []
    for arm in table.values():
        for d in arm.train_dirs:
            run = read_run(d)
            if run is None:
                continue
            kept = next(s for s in run.steps if s["step"] == run.kept_step)
            low, high = kept.get("validation/score_change_low"), kept.get("validation/score_change_high")
            change = kept.get("validation/score_change")
            beat = low is not None and low > 0
            how = "best validation score" if run.selected_by == "best" else "the last"
            words = (f"{arm.name} ({Path(d).name}): kept step {run.kept_step} ({how}), validation change from "
                     f"step 0 {fmt(change)} (95% CI {fmt(low)} to {fmt(high)}) over "
                     f"{int(kept.get('validation/negotiations', 0))} held-out negotiations: "
                     + ("it beat step 0" if beat else "it did not beat step 0"))
            out.append({"arm": arm.name, "train_dir": d, "step": run.kept_step, "selected_by": run.selected_by,
                        "score": kept.get("validation/score"), "change": change, "low": low, "high": high,
                        "beat_step0": beat, "verdict": words})
    return out


def put_forward(selection: dict[str, Any] | None, per_buyer: dict[str, dict[str, dict]],
                comparisons: list[dict[str, Any]]) -> list[str]:
    """For each RL arm the selection put forward (on validation): what the evaluation grid then says of it
    against its base and the reference sellers, and its good-deal rate beside its base's."""
    if not selection:
        return []
    lines = []
    pooled = per_buyer.get(POOLED, {})
    for base, s in selection.get("bases", {}).items():
        arm = s.get("chosen")
        if arm is None:
            lines.append(f"{base}: no RL arm was put forward (none beat step 0 on validation); the RL arms below "
                         "are reported as trained, not as the study's RL arm.")
            continue
        lines.append(f"{base}: the RL arm put forward on validation is {arm}.")
        for c in comparisons:
            if c["buyer"] == POOLED and c["a"] == arm and c["family"] in ("rl_vs_base", "vs_reference"):
                lines.append(f"  {c['verdict']}")
        good, base_good = (pooled.get(arm) or {}).get("good_deal_rate"), (pooled.get(base) or {}).get("good_deal_rate")
        if good is not None and base_good is not None:
            lines.append(f"  good deals {good:.3f} against the base's {base_good:.3f}"
                         + (": not below the base's" if good >= base_good else ": below the base's"))
    return lines


def run_settings(records: list[Record], study: Any, study_path: str | None) -> dict[str, Any]:
    """Every parameter that shaped the numbers: the study config, the run settings and agents as recorded."""
    out: dict[str, Any] = {}
    if study is not None:
        out["study"] = study.model_dump(mode="json")
        if study_path:
            out["study_file"] = study_path
        try:
            out["training"] = {tc: cfg.model_dump(mode="json") for tc, cfg in plan_arms(study)[1].items()}
        except Exception as err:  # noqa: BLE001 - the report still renders; say why this part is missing
            out["training_error"] = str(err)
    runs = {}
    for r in records:
        runs.setdefault(r.seller, {"run": r.settings, "agents": r.agents})
    out["runs"] = runs
    return out


def sampling_notes(records: list[Record]) -> list[str]:
    """How far the comparisons are paired beyond sharing cells: were the agents' random streams the cell's?"""
    rules = [(r.settings or {}).get("sampling") for r in records]
    seeded = [x for x in rules if x and x.get("seeded")]
    notes = []
    if records and len(seeded) == len(records):
        notes.append("Paired comparisons use the cells both arms completed, with common random numbers: every "
                     "language-model agent sampled from a stream seeded by the run, the cell and its side, so in "
                     "each cell every arm met the same buyer randomness.")
    elif any(x is not None for x in rules):
        notes.append(f"Only {len(seeded)} of {len(records)} cells were played with seeded sampling: paired "
                     "comparisons share cells, not the buyers' random streams.")
    # the temperature moves every language-model arm's figures (a 135M seller at 1.0 took losses its own policy
    # at 0.3 refused), so the report states it beside the numbers, not only in the settings dump
    temperatures: dict[float, set[str]] = {}
    for r in records:
        t = (r.settings or {}).get("temperature")
        if t is not None:
            temperatures.setdefault(float(t), set()).add(r.seller)
    if len(temperatures) == 1:
        notes.append(f"Language-model agents sampled at temperature {next(iter(temperatures)):g} in every cell "
                     "(scripted agents do not sample).")
    elif temperatures:
        notes.append("Language-model agents sampled at different temperatures: "
                     + "; ".join(f"{t:g} for {', '.join(sorted(sellers))}" for t, sellers in sorted(temperatures.items()))
                     + ", so their arms' differences include the temperature's.")
    api = any(a.get("backend") == "openai" for r in records for a in (r.agents or {}).values()
              if isinstance(a, dict))
    if api:
        notes.append("openai: agents send the request's seed where the server accepts one, but provider-side "
                     "sampling is not guaranteed reproducible.")
    return notes


# ---- rows for tables ----

def arm_rows(per_buyer: dict[str, dict[str, dict]]) -> list[dict[str, Any]]:
    rows = []
    for buyer, arms in per_buyer.items():
        for arm, f in arms.items():
            s, sp = f.get("seller_score") or {}, f.get("surplus") or {}
            rows.append({"arm": arm, "buyer": buyer, "completed": f["completed"], "errored": f["errored"],
                         "seller_score": s.get("estimate"), "ci_low": s.get("low"), "ci_high": s.get("high"),
                         "surplus": sp.get("estimate"), "surplus_low": sp.get("low"), "surplus_high": sp.get("high"),
                         **{k: f.get(k) for k in ARM_COLUMNS[10:]}})
    return rows


def comparison_rows(comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"family": c["family"], "buyer": c["buyer"], "a": c["a"], "b": c["b"],
             "difference": c.get("difference", {}).get("estimate"), "ci_low": c.get("difference", {}).get("low"),
             "ci_high": c.get("difference", {}).get("high"), "p_value": c.get("p_value"),
             "p_holm": c.get("p_holm"), "common_cells": c.get("common_cells"),
             "excluded_cells": c.get("excluded_cells"),
             "equivalent": (c.get("equivalence") or {}).get("equivalent"), "verdict": c["verdict"]}
            for c in comparisons]


def headline_rows(per_buyer: dict[str, dict[str, dict]]) -> list[list[Any]]:
    rows = []
    for arm, f in per_buyer.get(POOLED, {}).items():
        s, sp = f.get("seller_score") or {}, f.get("surplus") or {}
        rows.append([arm, s.get("estimate"), f"{fmt(s.get('low'))} to {fmt(s.get('high'))}" if s else "-",
                     sp.get("estimate"), f"{fmt(sp.get('low'))} to {fmt(sp.get('high'))}" if sp else "-",
                     f.get("good_deal_rate"), f.get("loss_rate"), f.get("deal_rate"), f.get("invalid_action_rate"), f.get("pareto_optimal_rate"),
                     f"{f['completed']}/{f['cells']}"])
    return rows


def cost_rows(per_buyer: dict[str, dict[str, dict]]) -> list[list[Any]]:
    """API calls, tokens and cost per arm and buyer (then all buyers), for arms whose negotiations called APIs."""
    rows = []
    arms = list(dict.fromkeys(a for figures in per_buyer.values() for a in figures))
    for arm in arms:
        for buyer in [b for b in per_buyer if b != POOLED] + [POOLED]:
            u = per_buyer[buyer].get(arm, {}).get("api")
            if not u:
                continue
            cost = "not priced" if u["cost"] is None else dollars(u["cost"])
            if u["cost"] is not None and u["unpriced_calls"]:
                cost += f" (+{u['unpriced_calls']} calls not priced)"
            rows.append([arm, buyer, u["calls"], f"{u['prompt_tokens']:,}", f"{u['completion_tokens']:,}",
                         f"{u['cached_tokens']:,}", cost])
    return rows
