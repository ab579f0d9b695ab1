"""What a GRPO group can teach: do a group's copies end differently, or do they all deal (or all fail)?

GRPO compares the G copies of one task, which meet the same buyer with the same buyer seed; only the seller's
sampling differs. A group whose copies all deal compares prices alone (under ``reward: score`` it pays the copies
that conceded least); a group that all fail is silent; only a group split on deal says whether closing paid. This
plays a study's (or a training config's) starting model as the seller on the first training tasks of each pool
buyer, G copies each, at each temperature asked, and gives per group the deals and rewards, and per buyer the
push GRPO's advantages give deals (the advantage of each deal copy weighted by its share of the step's sampled
tokens, as ``loss_type: dapo`` weights it; positive: toward dealing) under ``reward: score`` and ``outcome``;
and, under ``reward: score``, how much the score differs within a group that all dealt against one split on deal,
and the share of the advantage mass that split groups get when advantages are scaled per group or per batch
(``grpo.scale_rewards``).

Reads training tasks only (training scenarios and pool buyers), never the evaluation grid.

    .venv/bin/python benchmarks/group_outcomes.py configs/matched-study.yaml --temperatures 0.3 0.5 1.0
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from haggler.engine.backends.hf import HFModel
from haggler.training.config import TrainConfig, load_config
from haggler.training.groups import split_on_deal
from haggler.training.grpo import NegotiationRollout, training_tasks
from haggler.training.recipe import base_model_path


def train_config(path: str) -> TrainConfig:
    """A training config, or a study's first RL arm's (a study names its bases and grid, or extends one)."""
    import yaml

    from haggler.study.config import load_study, plan_arms

    if not {"bases", "extends", "grid"} & set(yaml.safe_load(Path(path).read_text()) or {}):
        return load_config(path)
    _, trainings = plan_arms(load_study(path))
    if not trainings:
        raise SystemExit(f"{path}: the study trains no RL arm")
    return next(iter(trainings.values()))


def advantages(groups: dict[str, list[dict]], key: str, penalty: float, scale: str) -> dict[str, list[float]]:
    """Each copy's advantage as TRL makes it: the reward column ``key`` less the format penalty, minus its group's
    mean, divided as ``scale`` (``grpo.scale_rewards``) says; the batch's std taken over every group played here."""
    rewards = {k: [r[key] - penalty * r["invalid_share"] for r in rows] for k, rows in groups.items()}
    batch_sd = statistics.stdev([v for values in rewards.values() for v in values])
    out = {}
    for k, values in rewards.items():
        sd = {"group": statistics.stdev(values), "batch": batch_sd, "none": None}[scale]
        mean = statistics.mean(values)
        out[k] = [(v - mean) / (sd + 1e-4 if sd is not None else 1.0) for v in values]
    return out


def push_on_deals(groups: dict[str, list[dict]], key: str, cfg: TrainConfig) -> dict[str, float]:
    """Per buyer: sum over deal copies of advantage x (copy's sampled tokens / all sampled tokens), the advantage
    as TRL makes it from ``key`` under the config's format penalty and ``grpo.scale_rewards``."""
    total = sum(r["tokens"] for g in groups.values() for r in g) or 1
    adv = advantages(groups, key, cfg.format_penalty, cfg.grpo.scale_rewards)
    push: dict[str, float] = defaultdict(float)
    for k, rows in groups.items():
        for r, a in zip(rows, adv[k]):
            if r["deal"]:
                push[r["buyer"]] += a * r["tokens"] / total
    return dict(push)


def split_groups_share(groups: dict[str, list[dict]], key: str, penalty: float) -> dict[str, float]:
    """Per ``scale_rewards``: the share of the step's advantage mass (sum of |advantage| x sampled tokens) that
    falls on groups split on deal, the only groups that say whether closing paid; the rest compare prices (all
    dealt) or nothing (all failed)."""
    share = {}
    for scale in ("group", "batch"):
        adv = advantages(groups, key, penalty, scale)
        mass = {True: 0.0, False: 0.0}
        for k, rows in groups.items():
            split = len({r["deal"] for r in rows}) > 1
            mass[split] += sum(abs(a) * r["tokens"] for r, a in zip(rows, adv[k]))
        share[scale] = mass[True] / ((mass[True] + mass[False]) or 1)
    return share


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config", help="a study config (its first RL arm) or a training config")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.3, 0.5, 1.0])
    p.add_argument("--per-buyer", type=int, default=2, help="training tasks per pool buyer")
    p.add_argument("--out", type=Path, default=None, help="write every copy's row here (JSON)")
    args = p.parse_args()

    cfg = train_config(args.config)
    tasks = training_tasks(cfg)
    chosen, seen = [], defaultdict(int)
    for t in tasks:  # the first tasks of each buyer, in the training order
        if seen[t.buyer] < args.per_buyer:
            chosen.append(t)
            seen[t.buyer] += 1
    model = HFModel(base_model_path(cfg), device="cpu", dtype="float32")
    rollout = NegotiationRollout(cfg, tasks)
    prompts = [t.key for t in chosen for _ in range(cfg.grpo.num_generations)]
    summary, rows_out = {}, {}
    for temp in args.temperatures:
        out = rollout.play(model, prompts, temp, f"group-outcomes-{temp}")
        groups: dict[str, list[dict]] = defaultdict(list)
        for i, key in enumerate(prompts):
            if out["errored"][i]:  # never scored, as in training
                continue
            groups[key].append({"buyer": rollout.tasks[key].buyer, "deal": out["deal"][i],
                                "score": out["seller_score"][i], "outcome": out["outcome"][i],
                                "invalid_share": out["invalid_share"][i], "tokens": sum(out["env_mask"][i])})
        groups = {k: g for k, g in groups.items() if len(g) > 1}
        split = split_on_deal([(k, r["deal"]) for k, g in groups.items() for r in g])
        print(f"temperature {temp}: {split:.0%} of {len(groups)} groups split on deal (G = {cfg.grpo.num_generations}, "
              f"scale_rewards: {cfg.grpo.scale_rewards})")
        for rows in groups.values():
            deals = [r for r in rows if r["deal"]]
            print(f"  {rows[0]['buyer']:24s} deals {len(deals)}/{len(rows)}  good {sum(r['outcome'] > 0 for r in rows)}"
                  f"  losses {sum(r['outcome'] < 0 for r in rows)}  scores {[round(r['score'], 2) for r in rows]}")
        pushes = {key: push_on_deals(groups, key, cfg) for key in ("score", "outcome")}
        for key, push in pushes.items():
            print(f"  push on deals under reward {key}: " + ", ".join(f"{b} {v:+.3f}" for b, v in sorted(push.items()))
                  + f"; total {sum(push.values()):+.3f}")
        spreads = {kind: [statistics.stdev([r["score"] for r in g]) for g in groups.values()
                          if {r["deal"] for r in g} == deals] for kind, deals in
                   (("all_dealt", {True}), ("split", {True, False}))}
        spread = {kind: statistics.mean(v) if v else None for kind, v in spreads.items()}
        share = split_groups_share(groups, "score", cfg.format_penalty)
        print(f"  score's spread within a group: all dealt {spread['all_dealt']}, split {spread['split']}; share of "
              f"the advantage mass on split groups under reward score: group-scaled {share['group']:.0%}, "
              f"batch-scaled {share['batch']:.0%}")
        played = [r for g in groups.values() for r in g]
        summary[str(temp)] = {"groups": len(groups), "split_on_deal": split,
                              "deal_rate": sum(r["deal"] for r in played) / max(len(played), 1),
                              "push_on_deals": {k: sum(v.values()) for k, v in pushes.items()},
                              "score_spread_within_group": spread, "split_groups_advantage_share": share}
        rows_out[str(temp)] = groups
    if args.out:
        args.out.write_text(json.dumps(rows_out, indent=1))
    print(json.dumps({"benchmark": "group_outcomes", "model": base_model_path(cfg),
                      "copies": cfg.grpo.num_generations, "by_temperature": summary}))


if __name__ == "__main__":
    main()
