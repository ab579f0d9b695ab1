"""Which RL arm the study puts forward, decided on validation negotiations only, before the evaluation grid is
played.

Every RL training run with validation plays the same held-out negotiations (training-pool buyers, scenarios of
the validation seed, both openers, fixed random streams) at step 0 and every ``eval_steps``; its final model is
one of those steps (the card's ``selected`` with ``select: best``, else the last). For each RL arm (a learning
rate, all its training seeds) the change of the kept step's score from step 0 is paired negotiation by
negotiation, pooled over the seeds, with a 95% interval that resamples seeds and then scenarios.

The rule: an arm is eligible only if that interval lies above zero (its kept model beat its own step 0 on
held-out play); of the eligible arms of a base the one with the largest change is put forward, a tie going to
the lower learning rate. When none is eligible the study puts forward no RL arm for that base, and says so:
every arm is still evaluated and reported, but none is "the RL arm".

The decision is written to ``OUT/selection.json`` before any evaluation cell is played, with what was tried,
so that it cannot have looked at the evaluation grid. The kept step was itself chosen on the same validation
negotiations (``select: best``), so its change is optimistic; the evaluation grid then measures it afresh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haggler.evaluation.stats import cluster_bootstrap
from haggler.training.validation import ValidationLog

RULE = ("an RL arm is eligible when its kept step's validation change from step 0, paired by negotiation and pooled "
        "over its training seeds, has a 95% interval above zero; of a base's eligible arms the largest change is "
        "put forward (a tie: the lower learning rate); none eligible: no RL arm is put forward")


@dataclass
class RunValidation:
    """One training run's validation: the step its final model is, and the paired change from step 0."""

    train_dir: str
    seed: int | None
    kept_step: int
    selected_by: str  # "best" (the card's selected step) or "last"
    steps: list[dict[str, Any]]  # each validated step's summary (score, deal rate, change), in order
    pairs: list[tuple[float, str]] = field(default_factory=list)  # (kept - step 0, scenario) per negotiation


def read_run(train_dir: str | Path, seed: int | None = None) -> RunValidation | None:
    """A run's ``validation.jsonl`` and final model card; None without validation."""
    d = Path(train_dir)
    entries = ValidationLog(d).entries()  # the training run's own reader of its log
    if not entries:
        return None
    card = d / "final" / "haggler-model.json"
    selected = (json.loads(card.read_text()).get("selected") or {}) if card.is_file() else {}
    step = selected.get("step", entries[-1]["step"])
    by_step: dict[int, dict[str, Any]] = {}
    for e in entries:  # a resumed run appends the evaluations it repeats: the last of each step counts
        by_step[e["step"]] = e
    kept, first = by_step.get(step, entries[-1]), by_step.get(0)
    pairs = []
    if first is not None:
        before = {r["case"]: r for r in first["rows"] if not r["errored"] and r["score"] is not None}
        pairs = [(r["score"] - before[r["case"]]["score"], r["scenario"]) for r in kept["rows"]
                 if not r["errored"] and r["score"] is not None and r["case"] in before]
    steps = [{k: v for k, v in e.items() if k != "rows"} for _, e in sorted(by_step.items())]
    return RunValidation(str(d), seed, kept["step"], "best" if selected else "last", steps, pairs)


def select_arms(arms: list[Any], n_boot: int = 2000) -> dict[str, Any]:
    """The selection over the study's arms (``study.config.Arm``): per base, every RL arm tried with its
    validation figures, and the one put forward (or None)."""
    by_base: dict[str, dict[str, list[Any]]] = {}
    for a in arms:
        if a.kind == "rl" and a.train_dir:
            by_base.setdefault(a.base, {}).setdefault(a.name, []).append(a)
    out: dict[str, Any] = {"rule": RULE, "bases": {}}
    for base, named in by_base.items():
        tried = []
        for name, runs in named.items():
            rows = [(read_run(a.train_dir, a.seed), a) for a in runs]
            entry: dict[str, Any] = {"arm": name, "learning_rate": runs[0].learning_rate,
                                     "seeds": [a.seed for a in runs],
                                     "runs": [{"train_dir": a.train_dir, "seed": a.seed,
                                               "kept_step": v.kept_step if v else None,
                                               "selected_by": v.selected_by if v else None,
                                               "steps": v.steps if v else []} for v, a in rows]}
            pooled = [(d, scen, a.seed) for v, a in rows if v is not None for d, scen in v.pairs]
            missing = [a.train_dir for v, a in rows if v is None or not v.pairs]
            if missing:
                entry.update(eligible=False, why=f"no validation of step 0 and the kept step in {missing}")
            else:
                ci = cluster_bootstrap([d for d, _, _ in pooled], [s for _, s, _ in pooled],
                                       [k for _, _, k in pooled] if len(runs) > 1 else None, n_boot=n_boot)
                entry.update(change=ci.estimate, low=ci.low, high=ci.high, negotiations=len(pooled),
                             eligible=ci.low > 0,
                             why="beat step 0" if ci.low > 0 else "did not beat step 0")
            tried.append(entry)
        eligible = [t for t in tried if t["eligible"]]
        chosen = max(eligible, key=lambda t: (t["change"], -(t["learning_rate"] or 0)))["arm"] if eligible else None
        out["bases"][base] = {"tried": tried, "chosen": chosen}
    return out


def selection_lines(selection: dict[str, Any]) -> list[str]:
    """The selection in words, one line per base and one per arm tried."""
    lines = [f"Rule: {selection['rule']}."]
    for base, s in selection.get("bases", {}).items():
        lines.append(f"{base}: put forward {s['chosen']}" if s["chosen"] else
                     f"{base}: no RL arm put forward (none beat step 0 on validation)")
        for t in s["tried"]:
            if "change" in t:
                kept = ", ".join(f"seed {r['seed']} step {r['kept_step']}" for r in t["runs"])
                temps = sorted({e["validation/temperature"] for r in t["runs"] for e in r["steps"]
                                if e.get("validation/temperature") is not None})
                played = f" at temperature {', '.join(f'{x:g}' for x in temps)}" if temps else ""
                lines.append(f"  {t['arm']} (lr {t['learning_rate']:g}; {kept}): validation{played} change "
                             f"{t['change']:+.3f} (95% CI {t['low']:+.3f} to {t['high']:+.3f}) over "
                             f"{t['negotiations']} paired negotiations: {t['why']}")
            else:
                lines.append(f"  {t['arm']}: not eligible, {t['why']}")
    return lines


def write_selection(arms: list[Any], path: str | Path, n_boot: int = 2000) -> dict[str, Any]:
    selection = select_arms(arms, n_boot)
    Path(path).write_text(json.dumps(selection, indent=2) + "\n")
    return selection
