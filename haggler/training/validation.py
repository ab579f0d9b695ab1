"""Validation during training: does the policy get better at its own objective on negotiations it never
trains on?

Training reward is a poor learning signal: each step meets other tasks, so it tracks the tasks' difficulty.
Here a fixed set of held-out negotiations (scenarios of their own seed, refused if they overlap training or
an evaluation set; buyers from the training pool unless named; both openers) is played with the current
policy at step 0 and every ``eval_steps``. Every negotiation keeps its random streams from one evaluation to
the next (the buyer's and the seller's), so the change of a negotiation's score from step 0 is the policy's
doing, and the change of the mean is given with a paired, scenario-clustered 95% interval.

Results reach TRL's log (TensorBoard, ``train_log.jsonl``) through the trainer's public ``log``, and every
evaluation's per-negotiation scores are kept in ``OUTPUT/validation.jsonl`` (a resumed run reads its step-0
baseline there).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haggler.agents.llm import HFAgent
from haggler.agents.registry import AgentContext, make_agent, sample_seed
from haggler.core.config import ConfigError
from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.core.scenario import Scenario, fingerprint, load_scenarios
from haggler.core.score import score
from haggler.core.types import Invalid, Side
from haggler.engine.rollout import Game, play_lockstep
from haggler.evaluation.behaviour import seller_behaviour
from haggler.evaluation.stats import cluster_bootstrap
from haggler.evaluation.summary import BEHAVIOUR
from haggler.scenarios.generate import generate_scenarios
from haggler.training.common import buyer_context, excluded_fingerprints, training_format, training_scenarios
from haggler.training.config import TrainConfig


@dataclass(frozen=True)
class Case:
    """One held-out negotiation: always the same scenario, buyer, opener and random streams."""

    scenario: Scenario
    buyer: str
    opener: Side
    seed: int


def validation_cases(cfg: TrainConfig) -> list[Case]:
    """The held-out set; a scenario that is also a training or an excluded (evaluation) one is refused."""
    v = cfg.validation
    assert v is not None
    if v.file:
        scenarios = list(load_scenarios(v.file).values())
    else:
        scenarios = generate_scenarios(v.n, v.seed, max_turns=v.max_turns or cfg.scenarios.max_turns)
    banned = excluded_fingerprints(cfg.exclude_scenarios) | {fingerprint(s) for s in training_scenarios(cfg)}
    clash = [s.id for s in scenarios if fingerprint(s) in banned]
    if clash:
        raise ConfigError(f"validation: {len(clash)} held-out scenario(s) are also training or evaluation "
                          f"scenarios, e.g. {clash[:3]}; use another validation.seed or file")
    buyers = v.buyers or list(dict.fromkeys(b.spec for b in cfg.buyers))
    cases = []
    for s in scenarios:
        for buyer in buyers:
            for opener in v.openers:
                cases.append(Case(s, buyer, opener, len(cases)))
    return cases


class Validator:
    """Plays the held-out set with a sampler as the seller and says how it did, negotiation by negotiation."""

    def __init__(self, cfg: TrainConfig, context: AgentContext | None = None) -> None:
        self.cfg = cfg
        self.cases = validation_cases(cfg)
        self.settings = training_format(cfg)
        self.context = context or buyer_context(cfg, self.settings, cfg.validation.seed)

    def play(self, model: Any, temperature: float, rank: int = 0, processes: int = 1) -> list[dict[str, Any]]:
        """Every held-out negotiation's row, in the set's order. With ``processes`` > 1, this rank plays every
        ``processes``-th case from ``rank`` and the rows of all ranks are gathered (each case plays with its own
        seeds, so the rows are the ones one process would give)."""
        mine = list(range(rank, len(self.cases), processes))
        rows = self._play([self.cases[i] for i in mine], model, temperature)
        if processes == 1:
            return rows
        from accelerate.utils import gather_object  # lazy: accelerate is loaded with the trainer by now

        gathered = gather_object([(i, row) for i, row in zip(mine, rows)])
        return [row for _, row in sorted(gathered, key=lambda x: x[0])]

    def _play(self, cases: list[Any], model: Any, temperature: float) -> list[dict[str, Any]]:
        games = []
        for case in cases:
            neg = Negotiation(case.scenario, ProtocolConfig(opener=case.opener, max_invalid=self.cfg.max_invalid))
            seller = HFAgent(model, case.scenario, "seller", self.settings, temperature, f"hf:{self.cfg.model}")
            seller.sample_seed = sample_seed(self.cfg.validation.seed, case.seed, "seller")
            buyer = make_agent(case.buyer, case.scenario, "buyer", case.seed, self.context)
            games.append(Game(neg, {"seller": seller, "buyer": buyer}))
        play_lockstep(games, max_active=self.cfg.validation.batch_size)
        rows = []
        for case, g in zip(cases, games):
            g.agents["seller"].release()
            neg = g.negotiation
            figures = score(neg, self.cfg.no_deal)
            actions = [t.action for t in neg.turns if t.speaker == "seller"]
            rows.append({"case": case.seed, "scenario": case.scenario.id, "buyer": case.buyer,
                         "score": figures.seller_score, "deal": bool(figures.deal), "errored": neg.ended_by == "error",
                         "error": neg.error,
                         "invalid": sum(isinstance(a, Invalid) for a in actions) / len(actions) if actions else 0.0,
                         "behaviour": seller_behaviour(neg)})
        return rows


def summarize(rows: list[dict[str, Any]], baseline: list[dict[str, Any]] | None, n_boot: int) -> dict[str, float]:
    """Mean score, deal and invalid rates, and the paired, scenario-clustered change from ``baseline``."""
    ok = [r for r in rows if not r["errored"] and r["score"] is not None]
    out = {"validation/score": _mean([r["score"] for r in ok]),
           "validation/deal_rate": _mean([float(r["deal"]) for r in ok]),
           "validation/invalid_rate": _mean([r["invalid"] for r in ok]),
           "validation/errored": float(len(rows) - len(ok)),
           "validation/negotiations": float(len(rows))}
    for key in BEHAVIOUR.values():  # what the seller did: the figures that explain a change of score
        values = [float(r["behaviour"][key]) for r in ok if r.get("behaviour", {}).get(key) is not None]
        if values:
            out[f"validation/{key}"] = _mean(values)
    if baseline is not None:
        before = {r["case"]: r for r in baseline if not r["errored"] and r["score"] is not None}
        pairs = [(r["score"] - before[r["case"]]["score"], r["scenario"]) for r in ok if r["case"] in before]
        if pairs:
            ci = cluster_bootstrap([d for d, _ in pairs], [c for _, c in pairs], n_boot=n_boot)
            out.update({"validation/score_change": ci.estimate, "validation/score_change_low": ci.low,
                        "validation/score_change_high": ci.high})
    return out


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


class ValidationLog:
    """``OUTPUT/validation.jsonl``: one line per evaluation (step, summary, per-negotiation rows)."""

    def __init__(self, output_dir: str | Path) -> None:
        self.path = Path(output_dir) / "validation.jsonl"

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        entries = []
        for number, line in enumerate(self.path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as e:  # a run killed mid-write, or an edited file: say which, not only why
                raise ValueError(f"{self.path}: line {number} is not JSON ({e.msg}); the run's validation log is "
                                 "damaged") from e
        return entries

    def baseline(self) -> list[dict[str, Any]] | None:
        first = next((e for e in self.entries() if e["step"] == 0), None)
        return first["rows"] if first else None

    def add(self, step: int, summary: dict[str, float], rows: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **summary, "rows": rows}) + "\n")
