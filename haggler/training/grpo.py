"""GRPO training of a seller: TRL's ``GRPOTrainer`` with negotiations as rollouts.

Each training task is one scenario against one buyer with one buyer seed and one opener. TRL repeats
every prompt ``num_generations`` times; the prompt is the task's key, so the G copies of a group play
the same scenario against the same buyer with the same buyer seed, and only the seller's sampling
differs inside a group. A rollout is a whole negotiation played by the very engine that evaluates
(``rollout.py``), and the seller's side comes back token-in/token-out: ``prompt_ids``,
``completion_ids``, ``env_mask`` (only the seller's sampled tokens are trained on) and the sampler's
log-probabilities. The reward is the engine's seller score (``reward: outcome``: the deal's sign against the
seller's reservation), minus an optional format penalty.

A negotiation that errored (a buyer's server that kept failing) is never scored: its tokens are masked
out and its reward set to its group's mean, so it moves neither the loss nor its group's baseline.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from haggler.agents.llm import HFAgent
from haggler.agents.registry import AgentContext, make_agent, sample_seed
from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.core.scenario import Scenario
from haggler.core.score import score
from haggler.core.types import Invalid, Side
from haggler.engine.backends.vllm import VLLMModel
from haggler.engine.card import clear_card, write_card
from haggler.engine.rollout import Game, play_lockstep
from haggler.evaluation.figures import mean
from haggler.training.common import (buyer_context, process_count, resolve_bf16, sampling_mode, training_format,
                                     training_scenarios)
from haggler.training.config import TrainConfig
from haggler.training.errors import RolloutErrors
from haggler.training.groups import (earlier_copies, fill_errored_with_group_mean, sign_against_no_deal,
                                     split_on_deal)
from haggler.training.lora import peft_config
from haggler.training.validation import Validator


@dataclass(frozen=True)
class Task:
    key: str  # the prompt string TRL carries around; rollout_func finds the task by it
    scenario: Scenario
    buyer: str
    buyer_seed: int
    opener: Side


def training_tasks(cfg: TrainConfig) -> list[Task]:
    """One task per training scenario; the buyer drawn from the weighted pool with the scenarios' seed."""
    rng = random.Random(f"tasks|{cfg.scenarios.seed}")
    specs = [b.spec for b in cfg.buyers]
    weights = [b.weight for b in cfg.buyers]
    tasks = []
    for i, s in enumerate(training_scenarios(cfg)):
        buyer = rng.choices(specs, weights)[0]
        opener: Side = ("seller" if i % 2 == 0 else "buyer") if cfg.opener == "alternate" else cfg.opener
        tasks.append(Task(f"task {i} | {s.id} | {buyer} | {opener} opens", s, buyer, rng.randrange(2**31), opener))
    return tasks


def _seller_turns(neg: Negotiation) -> list[Any]:
    return [t.action for t in neg.turns if t.speaker == "seller"]


class NegotiationRollout:
    """TRL's ``rollout_func``: prompts (task keys) in, the seller's token trajectories and scores out.

    Each call also measures the rollout (deal rate, invalid actions, throughput); those figures wait in
    ``figures`` until the reward function hands them to TRL (``log_figures``).
    """

    def __init__(self, cfg: TrainConfig, tasks: list[Task], context: AgentContext | None = None) -> None:
        self.cfg = cfg
        self.tasks = {t.key: t for t in tasks}
        self.settings = training_format(cfg)
        # Buyers sample from streams seeded by the run's seed and the task's buyer seed: a group's G copies of a task
        # meet the same buyer, and a rerun meets the same buyers.
        self.context = context if context is not None else buyer_context(cfg, self.settings, cfg.grpo.seed)
        self._step_calls = (-1, 0)  # (trainer step, rollout calls made in it): part of the sellers' seeds
        self.figures: dict[str, float] = {}
        self._policy: Any = None
        self._last_call: float | None = None
        self._last_tokens = 0
        self.last_errors: list[str | None] = []  # the last rollout's negotiations' errors (None: no error)
        self.scored: list[float] = []  # the last rollout's unerrored seller scores, over every rank
        self.split = 0.0  # the last rollout's share of groups split on deal (split_on_deal), over every rank

    # ---- the policy as a rollout backend ----

    def policy(self, trainer: Any) -> Any:
        """The model being trained, behind the same sampling API the evaluation uses."""
        if trainer.args.use_vllm:
            if self._policy is None:
                self._policy = VLLMModel.from_trainer(trainer)
            return self._policy
        # Lazy: the hf backend imports torch and transformers.
        from haggler.engine.backends.hf import HFModel

        model = trainer.accelerator.unwrap_model(trainer.model)
        if hasattr(model, "get_base_model"):  # peft: the base model with the LoRA layers in it
            model = model.get_base_model()
        if self._policy is None or self._policy.model is not model:
            # Samples in the model's own dtype, not under the update's bf16 autocast: autocast read prompts 1.6x faster
            # here, but a row's bf16 results depend on which rows share its pass, and continuous batching groups rows
            # by timing, so two runs of one seed sampled different negotiations (fp32: 96 of 96 identical).
            self._policy = HFModel(self.cfg.model, device=str(trainer.accelerator.device), model=model,
                                   tokenizer=trainer.processing_class)
        return self._policy

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, list]:
        start = time.perf_counter()
        with sampling_mode(trainer):  # first: it reads the training mode that the sampler's wrapper switches off
            model = self.policy(trainer)
            out = self.play(model, prompts, trainer.args.temperature, self._rollout_id(trainer.state.global_step),
                            earlier_copies(prompts, trainer.accelerator.process_index,
                                           trainer.accelerator.num_processes), trainer.accelerator.num_processes)
        self.figures = self._measure(out, time.perf_counter() - start, trainer.state)
        self.refuse_to_train_on_nothing(out["errored"], trainer.state.global_step)
        return out

    def refuse_to_train_on_nothing(self, errored: list[bool], step: int) -> None:
        """Stop the run when the step's errored share reaches ``max_rollout_errors`` (default: every negotiation
        errored, a buyer's server that is down): rewards of nothing would still make "a trained model". Decided
        on the whole step's rollouts, gathered from every process, so that every rank stops together."""
        from accelerate.utils import gather_object  # lazy: accelerate is loaded with the trainer by now

        first = next((e for e, bad in zip(self.last_errors, errored) if bad), None)
        ranks = gather_object([(sum(errored), len(errored), first)])
        bad, n = sum(r[0] for r in ranks), sum(r[1] for r in ranks)
        if n and bad / n >= self.cfg.max_rollout_errors:
            first = next(r[2] for r in ranks if r[2] is not None)
            raise RolloutErrors(f"training step {step + 1}: {bad} of {n} negotiations errored (max_rollout_errors: "
                                f"{self.cfg.max_rollout_errors}), nothing saved as a trained model; the first: {first}")

    def _rollout_id(self, step: int) -> str:
        """Which rollout call of the run this is: the trainer's step and the call's index within it (so a
        resumed run, whose step continues, seeds its sellers as the uninterrupted run did)."""
        last, calls = self._step_calls
        self._step_calls = (step, calls + 1 if step == last else 0)
        return f"{step}.{self._step_calls[1]}"

    def seller_seed(self, rollout: str, key: str, copy: int) -> int:
        """The seed of one seller's own sampling stream: the run's seed, the rollout call, the task and the
        copy's index in its group, so a group's copies differ and a rerun samples the same tokens."""
        digest = hashlib.sha256(f"{rollout}|{key}|{copy}".encode()).hexdigest()
        return sample_seed(self.cfg.grpo.seed, int(digest[:15], 16), "seller")

    def play(self, model: Any, prompts: list[str], temperature: float, rollout: str = "0.0",
             first_copy: dict[str, int] | None = None, processes: int = 1) -> dict[str, list]:
        """Play one negotiation per prompt with ``model`` as the seller; the engine's figures per row.
        ``first_copy``: per task, the copies of its group that earlier ranks play (their sellers' seeds are taken);
        ``processes``: the ranks playing this rollout together (an errored row takes its whole group's mean)."""
        games = []
        copies: dict[str, int] = {key: n - 1 for key, n in (first_copy or {}).items()}
        for key in prompts:
            task = self.tasks.get(key)
            if task is None:
                raise KeyError(f"rollout_func got a prompt that is no training task: {key[:80]!r}")
            neg = Negotiation(task.scenario, ProtocolConfig(opener=task.opener, max_invalid=self.cfg.max_invalid))
            seller = HFAgent(model, task.scenario, "seller", self.settings, temperature, f"hf:{self.cfg.model}")
            copies[key] = copies.get(key, -1) + 1
            seller.sample_seed = self.seller_seed(rollout, key, copies[key])
            try:
                buyer = make_agent(task.buyer, task.scenario, "buyer", task.buyer_seed, self.context)
            except Exception as err:  # noqa: BLE001 - an unbuildable buyer errors this rollout, never scores it
                neg.fail(f"could not build the buyer: {type(err).__name__}: {err}")
                buyer = None
            games.append(Game(neg, {"seller": seller, "buyer": buyer}))
        play_lockstep([g for g in games if not g.negotiation.done], max_active=len(games))
        for g in games:
            g.agents["seller"].release()
        return self._collect(prompts, games, processes)

    def _collect(self, prompts: list[str], games: list[Game], processes: int = 1) -> dict[str, list]:
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "env_mask", "logprobs",
                                                "seller_score", "outcome", "invalid_share", "deal", "seller_turns",
                                                "errored")}
        for g in games:
            neg = g.negotiation
            tr = g.agents["seller"].final_trajectory(neg)
            errored = neg.ended_by == "error"
            turns = _seller_turns(neg)
            figures = score(neg, self.cfg.no_deal)
            out["prompt_ids"].append(list(tr.prompt_ids))
            out["completion_ids"].append(list(tr.completion_ids))
            out["env_mask"].append([0] * len(tr.env_mask) if errored else list(tr.env_mask))
            out["logprobs"].append(list(tr.logprobs))
            out["seller_score"].append(figures.seller_score)
            out["outcome"].append(None if figures.deal is None else sign_against_no_deal(figures.seller_surplus))
            out["invalid_share"].append(sum(isinstance(a, Invalid) for a in turns) / len(turns) if turns else 0.0)
            out["deal"].append(bool(figures.deal))
            out["seller_turns"].append(len(turns))
            out["errored"].append(errored)
        rows = list(zip(prompts, out["seller_score"], out["outcome"], out["deal"], out["errored"]))
        if processes > 1:  # a group can span ranks: its mean is over every rank's copies (TRL's baseline is)
            from accelerate.utils import gather_object  # lazy: accelerate is loaded with the trainer by now

            rows = gather_object(rows)
        self.scored = [s for _, s, _, _, bad in rows if not bad]  # before the errored rows are filled in
        fill_errored_with_group_mean(prompts, out["seller_score"], [(p, s) for p, s, _, _, _ in rows])
        fill_errored_with_group_mean(prompts, out["outcome"], [(p, o) for p, _, o, _, _ in rows])
        self.split = split_on_deal([(p, deal) for p, _, _, deal, bad in rows if not bad])
        self.last_errors = [g.negotiation.error for g in games]
        return out

    # ---- what a rollout measured, for TRL's log ----

    def _measure(self, out: dict[str, list], rollout_s: float, state: Any) -> dict[str, float]:
        n = max(len(out["deal"]), 1)
        ok = [i for i, e in enumerate(out["errored"]) if not e]
        sampled = sum(sum(mask) for mask in out["env_mask"])
        figures = {
            "negotiation/deal_rate": sum(out["deal"][i] for i in ok) / max(len(ok), 1),
            "negotiation/invalid_action_rate": sum(out["invalid_share"][i] for i in ok) / max(len(ok), 1),
            "negotiation/seller_turns": sum(out["seller_turns"]) / n,
            "negotiation/error_rate": sum(out["errored"]) / n,
            # these two over every rank's rows (a group can span ranks); the rates above are this rank's
            "negotiation/groups_split_on_deal": self.split,
            # the score whatever the reward is (reward: outcome leaves the price out of TRL's own "reward")
            "negotiation/seller_score": sum(self.scored) / len(self.scored) if self.scored else 0.0,
            "rollout/seconds": rollout_s,
            "rollout/sampled_tokens_per_s": sampled / rollout_s if rollout_s > 0 else 0.0,
        }
        # Whole-step throughput (rollout + update) of the previous step: tokens TRL counted / wall time.
        now, seen = time.perf_counter(), int(getattr(state, "num_input_tokens_seen", 0) or 0)
        if self._last_call is not None and now > self._last_call:
            figures["tokens_per_s"] = (seen - self._last_tokens) / (now - self._last_call)
        self._last_call, self._last_tokens = now, seen
        return figures

    def log_figures(self, log_metric: Callable[[str, float], None]) -> None:
        """Hand the last rollout's figures to TRL's ``log_metric`` (averaged per logging step, like its own)."""
        for name, value in self.figures.items():
            log_metric(name, value)
        self.figures = {}


def make_reward(format_penalty: float, rollout: NegotiationRollout | None = None,
                kind: Literal["score", "outcome"] = "score") -> Callable[..., list[float]]:
    """The reward function: each rollout row's seller score (``kind`` outcome: its sign against no deal, see
    TrainConfig.reward), less the format penalty. TRL calls it right after each rollout with a ``log_metric``
    callback, which gets that rollout's figures; TRL logs the reward under the function's name."""

    column = "seller_score" if kind == "score" else "outcome"  # the rollout's column, and the logged name

    def reward(prompts: list[str], completions: list[Any], invalid_share: list[float],
               log_metric: Callable[[str, float], None] | None = None, **columns: Any) -> list[float]:
        if rollout is not None and log_metric is not None:
            rollout.log_figures(log_metric)
        return [v - format_penalty * i for v, i in zip(columns[column], invalid_share)]

    reward.__name__ = column
    return reward


# ---- assembling the trainer, saving what it made ----

def grpo_args(cfg: TrainConfig, **extra: Any) -> Any:
    # Lazy: TRL takes seconds to import; config validation and --help must not wait.
    from trl import GRPOConfig

    g = cfg.grpo
    kwargs = g.model_dump(exclude={"global_batch_size"} | ({"vllm_server_base_url"} if g.vllm_server_base_url is None
                                                           else set()))
    kwargs["bf16"] = resolve_bf16(cfg)  # "auto" decided for this machine
    kwargs["gradient_accumulation_steps"] = g.accumulation_for(process_count())  # the global batch, kept
    return GRPOConfig(output_dir=cfg.output_dir, top_k=0, top_p=1.0, log_completions=False,
                      save_strategy="steps", **kwargs, **extra)


def build_trainer(cfg: TrainConfig, model: Any, tokenizer: Any, tasks: list[Task] | None = None,
                  rollout: NegotiationRollout | None = None, callbacks: list[Any] | None = None,
                  loss_tokens_only: bool = True) -> Any:
    """TRL's GRPO trainer over the negotiation tasks. ``loss_tokens_only``: the update projects only the seller's
    sampled tokens through the vocabulary (``loss_tokens.py``: the same loss); False keeps TRL's head as it is
    (``benchmarks/bench_train.py``'s before)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL: pinned version
    # Lazy: datasets and TRL take seconds to import; config validation and --help must not wait.
    from datasets import Dataset
    from trl import GRPOTrainer

    from haggler.training.loss_tokens import LossTokenGRPOTrainer

    tasks = tasks if tasks is not None else training_tasks(cfg)
    rollout = rollout or NegotiationRollout(cfg, tasks)
    callbacks = list(callbacks or [])
    validation = None
    if cfg.validation is not None:
        from haggler.training.callbacks import ValidationCallback  # lazy: imports transformers

        validation = ValidationCallback(Validator(cfg), rollout.policy, cfg.output_dir)
        callbacks.append(validation)
    trainer_class = LossTokenGRPOTrainer if loss_tokens_only else GRPOTrainer
    trainer = trainer_class(model=model, reward_funcs=[make_reward(cfg.format_penalty, rollout, cfg.reward)],
                            args=grpo_args(cfg), train_dataset=Dataset.from_dict({"prompt": [t.key for t in tasks]}),
                            processing_class=tokenizer, rollout_func=rollout, peft_config=peft_config(cfg, model),
                            callbacks=callbacks)
    if validation is not None:
        validation.attach(trainer)
    return trainer


def latest_checkpoint(output_dir: str) -> str | None:
    """The newest complete ``checkpoint-N``: one whose ``trainer_state.json`` is there. The Trainer writes that file
    last, so a run killed while it saved leaves a newer folder without it, which cannot be resumed from."""
    out = Path(output_dir)
    if not out.is_dir():
        return None
    steps = [(int(p.name.split("-", 1)[1]), p) for p in out.glob("checkpoint-*")
             if p.name.split("-", 1)[1].isdigit() and (p / "trainer_state.json").is_file()]
    return str(max(steps)[1]) if steps else None


def save_final(trainer: Any, cfg: TrainConfig, base: str, selected: dict[str, Any] | None = None) -> Path:
    """A complete Hugging Face folder (config, safetensors, tokenizer; LoRA merged) that ``hf:PATH`` loads;
    its card, written last, records the format it was trained in."""
    final = cfg.final_model_dir()
    model = trainer.accelerator.unwrap_model(trainer.model)
    main = trainer.accelerator.is_main_process
    if main:
        final.mkdir(parents=True, exist_ok=True)
        clear_card(final)  # incomplete until the card is written again, last
    if cfg.lora is not None and hasattr(model, "merge_and_unload"):
        if main:
            model.merge_and_unload().save_pretrained(final, safe_serialization=True)
    else:
        trainer.save_model(str(final))
    if main:
        trainer.processing_class.save_pretrained(final)
        card = {"kind": "grpo", "base": base, "steps": trainer.state.global_step,
                "prompt": training_format(cfg).model_dump(), "config": cfg.model_dump(mode="json"),
                "bf16": bool(trainer.args.bf16)}  # as applied ("auto" decided for the machine it ran on)
        if selected is not None:  # validation picked another step than the last
            card["selected"] = selected
        write_card(final, card)
    return final


def write_log(trainer: Any, cfg: TrainConfig) -> dict[str, Any]:
    """The step log as JSON lines (the report's reward curves read it) and the run's headline figures."""
    history = [h for h in trainer.state.log_history if "reward" in h]
    out = Path(cfg.output_dir)
    with open(out / "train_log.jsonl", "w") as f:
        for h in trainer.state.log_history:
            f.write(json.dumps(h) + "\n")
    fifth = max(1, len(history) // 5)

    def over(key: str, rows: list[dict[str, Any]]) -> float | None:
        return mean(_numbers([h.get(key) for h in rows]))

    figures = {
        "steps": trainer.state.global_step,
        "reward_first_fifth": over("reward", history[:fifth]),
        "reward_last_fifth": over("reward", history[-fifth:]),
        # the rollouts' seller score: the reward itself under reward: score (less any format penalty), not under outcome
        "seller_score_first_fifth": over("negotiation/seller_score", history[:fifth]),
        "seller_score_last_fifth": over("negotiation/seller_score", history[-fifth:]),
        "invalid_action_rate_first_fifth": over("negotiation/invalid_action_rate", history[:fifth]),
        "invalid_action_rate_last_fifth": over("negotiation/invalid_action_rate", history[-fifth:]),
        "deal_rate_last_fifth": over("negotiation/deal_rate", history[-fifth:]),
    }
    (out / "train_summary.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def _numbers(xs: list[Any]) -> list[float]:
    """The figures a log really has (a step without one has None; a failed average NaN)."""
    return [x for x in xs if isinstance(x, (int, float)) and not math.isnan(x)]
