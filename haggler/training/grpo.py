"""GRPO training of a seller: TRL's ``GRPOTrainer`` with negotiations as rollouts.

Each training task is one scenario against one buyer with one buyer seed and one opener. TRL repeats
every prompt ``num_generations`` times; the prompt is the task's key, so the G copies of a group play
the same scenario against the same buyer with the same buyer seed, and only the seller's sampling
differs inside a group. A rollout is a whole negotiation played by the very engine that evaluates
(``rollout.py``), and the seller's side comes back token-in/token-out: ``prompt_ids``,
``completion_ids``, ``env_mask`` (only the seller's sampled tokens are trained on) and the sampler's
log-probabilities. The reward is the engine's seller score, minus an optional format penalty.

A negotiation that errored (a buyer's server that kept failing) is never scored: its tokens are masked
out and its reward set to its group's mean, so it moves neither the loss nor its group's baseline.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haggler.agents import MODEL_MARKER, AgentContext, make_agent
from haggler.agents.llm import HFAgent
from haggler.scenarios.generate import generate_scenarios
from haggler.agents.format.prompts import PromptSettings, observe, system_prompt_for
from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.engine.rollout import Game, play_lockstep
from haggler.core.scenario import Scenario, fingerprint, load_scenarios
from haggler.core.score import score
from haggler.training.config import ConfigError, TrainConfig
from haggler.core.types import Invalid, Side

FINAL_MARKER = MODEL_MARKER  # written last into the final model folder: its presence means complete


@dataclass(frozen=True)
class Task:
    key: str  # the prompt string TRL carries around; rollout_func finds the task by it
    scenario: Scenario
    buyer: str
    buyer_seed: int
    opener: Side


def prompt_settings(cfg: TrainConfig) -> PromptSettings:
    return PromptSettings(**cfg.prompt.model_dump())


def excluded_fingerprints(paths: list[str]) -> set[str]:
    out: set[str] = set()
    for p in paths:
        out |= {fingerprint(s) for s in load_scenarios(p).values()}
    return out


def training_scenarios(cfg: TrainConfig) -> list[Scenario]:
    src = cfg.scenarios
    if src.file:
        scenarios = list(load_scenarios(src.file).values())
    else:
        scenarios = generate_scenarios(src.n, src.seed, max_turns=src.max_turns)
    banned = excluded_fingerprints(cfg.exclude_scenarios)
    clash = [s.id for s in scenarios if fingerprint(s) in banned]
    if clash:
        raise ConfigError(f"scenarios: {len(clash)} training scenario(s) also appear in exclude_scenarios "
                          f"(an evaluation set), e.g. {clash[:3]}; use another scenarios.seed or file")
    return scenarios


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
    """TRL's ``rollout_func``: prompts (task keys) in, the seller's token trajectories and scores out."""

    def __init__(self, cfg: TrainConfig, tasks: list[Task], context: AgentContext | None = None) -> None:
        self.cfg = cfg
        self.tasks = {t.key: t for t in tasks}
        self.settings = prompt_settings(cfg)
        if context is None:
            endpoints = {}
            if cfg.endpoints:
                from haggler.engine.backends.openai_api import load_endpoints

                endpoints = load_endpoints(cfg.endpoints)
            context = AgentContext(prompt=self.settings, temperature=cfg.buyer_temperature, endpoints=endpoints)
        self.context = context  # the buyers' models and clients (never the policy)
        self._policy: Any = None
        self._last_call: float | None = None
        self._last_tokens = 0

    # ---- the policy as a rollout backend ----

    def policy(self, trainer: Any) -> Any:
        """The model being trained, behind the same sampling API the evaluation uses."""
        if getattr(trainer, "use_vllm", False):
            from haggler.engine.backends.vllm import VLLMModel

            if self._policy is None:
                self._policy = VLLMModel.from_trainer(trainer)
            return self._policy
        from haggler.engine.backends.hf import HFModel

        model = trainer.accelerator.unwrap_model(trainer.model)
        if hasattr(model, "get_base_model"):  # peft: the base model with the LoRA layers in it
            model = model.get_base_model()
        if self._policy is None or self._policy.model is not model:
            self._policy = HFModel(self.cfg.model, device=str(trainer.accelerator.device), model=model,
                                   tokenizer=trainer.processing_class)
        return self._policy

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, list]:
        was_training = bool(trainer.model.training)  # before the backend switches it to eval for sampling
        model = self.policy(trainer)
        torch_model = getattr(model, "model", None)
        start = time.perf_counter()
        try:
            if torch_model is not None:
                torch_model.eval()
            out = self.play(model, prompts, trainer.args.temperature)
        finally:
            if was_training:
                trainer.model.train()
        self._log(trainer, out, time.perf_counter() - start)
        return out

    def play(self, model: Any, prompts: list[str], temperature: float) -> dict[str, list]:
        """Play one negotiation per prompt with ``model`` as the seller; the engine's figures per row."""
        games = []
        for k, key in enumerate(prompts):
            task = self.tasks.get(key)
            if task is None:
                raise KeyError(f"rollout_func got a prompt that is no training task: {key[:80]!r}")
            neg = Negotiation(task.scenario, ProtocolConfig(opener=task.opener, max_invalid=self.cfg.max_invalid))
            seller = HFAgent(model, task.scenario, "seller", self.settings, temperature, f"hf:{self.cfg.model}")
            try:
                buyer = make_agent(task.buyer, task.scenario, "buyer", task.buyer_seed, self.context)
            except Exception as err:  # noqa: BLE001 - an unbuildable buyer errors this rollout, never scores it
                neg.fail(f"could not build the buyer: {type(err).__name__}: {err}")
                buyer = None
            games.append(Game(neg, {"seller": seller, "buyer": buyer}))
        play_lockstep([g for g in games if not g.negotiation.done], max_active=len(games))
        for g in games:
            g.agents["seller"].release()
        return self._collect(prompts, games)

    def _collect(self, prompts: list[str], games: list[Game]) -> dict[str, list]:
        tok = games[0].agents["seller"].tokenizer if games else None
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "env_mask", "logprobs",
                                                "seller_score", "invalid_share", "deal", "seller_turns", "errored")}
        for g in games:
            neg, seller = g.negotiation, g.agents["seller"]
            tr = seller.trajectory
            errored = neg.ended_by == "error"
            if tr is None:  # the seller never spoke (the buyer ended it first): nothing of its own to train on
                prompt = tok.apply_chat_template(
                    [{"role": "system", "content": system_prompt_for(neg.scenario, "seller", self.settings)},
                     {"role": "user", "content": observe(neg, "seller")}], add_generation_prompt=True, tokenize=True)
                prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
                completion, mask, lps = [tok.eos_token_id], [0], [0.0]
            else:
                prompt, completion, mask, lps = tr.prompt_ids, tr.completion_ids, tr.env_mask, tr.logprobs
            if errored:
                mask = [0] * len(mask)
            turns = _seller_turns(neg)
            figures = score(neg, self.cfg.no_deal)
            out["prompt_ids"].append(list(prompt))
            out["completion_ids"].append(list(completion))
            out["env_mask"].append(list(mask))
            out["logprobs"].append(list(lps))
            out["seller_score"].append(figures.seller_score)
            out["invalid_share"].append(sum(isinstance(a, Invalid) for a in turns) / len(turns) if turns else 0.0)
            out["deal"].append(bool(figures.deal))
            out["seller_turns"].append(len(turns))
            out["errored"].append(errored)
        _fill_errored_with_group_mean(prompts, out["seller_score"])
        return out

    def _log(self, trainer: Any, out: dict[str, list], rollout_s: float) -> None:
        metrics = getattr(trainer, "_metrics", None)
        if metrics is None:
            return
        m = metrics["train"]
        n = max(len(out["deal"]), 1)
        ok = [i for i, e in enumerate(out["errored"]) if not e]
        m["negotiation/deal_rate"].append(sum(out["deal"][i] for i in ok) / max(len(ok), 1))
        m["negotiation/invalid_action_rate"].append(sum(out["invalid_share"][i] for i in ok) / max(len(ok), 1))
        m["negotiation/seller_turns"].append(sum(out["seller_turns"]) / n)
        m["negotiation/error_rate"].append(sum(out["errored"]) / n)
        sampled = sum(sum(mask) for mask in out["env_mask"])
        m["rollout/seconds"].append(rollout_s)
        m["rollout/sampled_tokens_per_s"].append(sampled / rollout_s if rollout_s > 0 else 0.0)
        # Whole-step throughput (rollout + update) of the previous step: tokens TRL counted / wall time.
        now, seen = time.perf_counter(), int(getattr(trainer.state, "num_input_tokens_seen", 0) or 0)
        if self._last_call is not None and now > self._last_call:
            m["tokens_per_s"].append((seen - self._last_tokens) / (now - self._last_call))
        self._last_call, self._last_tokens = now, seen


def _fill_errored_with_group_mean(prompts: list[str], scores: list[float | None]) -> None:
    """An errored rollout takes its group's mean reward: zero advantage, and the group's baseline unchanged."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(p, []).append(i)
    for rows in groups.values():
        known = [scores[i] for i in rows if scores[i] is not None]
        fill = sum(known) / len(known) if known else 0.0
        for i in rows:
            if scores[i] is None:
                scores[i] = fill


def make_reward(format_penalty: float) -> Callable[..., list[float]]:
    def seller_score(prompts: list[str], completions: list[Any], seller_score: list[float],
                     invalid_share: list[float], **_: Any) -> list[float]:
        return [s - format_penalty * i for s, i in zip(seller_score, invalid_share)]

    return seller_score


# ---- assembling and running the trainer ----

def grpo_args(cfg: TrainConfig, **extra: Any) -> Any:
    from trl import GRPOConfig

    g = cfg.grpo
    kwargs = g.model_dump(exclude={"vllm_server_base_url"} if g.vllm_server_base_url is None else set())
    return GRPOConfig(output_dir=cfg.output_dir, top_k=0, top_p=1.0, log_completions=False,
                      save_strategy="steps", **kwargs, **extra)


def peft_config(cfg: TrainConfig) -> Any:
    if cfg.lora is None:
        return None
    from peft import LoraConfig

    return LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=cfg.lora.target_modules, task_type="CAUSAL_LM")


def base_model_path(cfg: TrainConfig) -> str:
    if cfg.warm_start is not None:
        return str(cfg.warm_start_dir())
    from haggler.engine.backends.hf import resolve_model_path

    return resolve_model_path(cfg.model)


def load_policy(path: str, dtype: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"auto": torch.bfloat16 if torch.cuda.is_available() else torch.float32,
                   "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    return model, tokenizer


def build_trainer(cfg: TrainConfig, model: Any, tokenizer: Any, tasks: list[Task] | None = None,
                  rollout: NegotiationRollout | None = None, callbacks: list[Any] | None = None) -> Any:
    import os

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL: pinned version
    from datasets import Dataset
    from trl import GRPOTrainer

    tasks = tasks if tasks is not None else training_tasks(cfg)
    rollout = rollout or NegotiationRollout(cfg, tasks)
    return GRPOTrainer(model=model, reward_funcs=[make_reward(cfg.format_penalty)], args=grpo_args(cfg),
                       train_dataset=Dataset.from_dict({"prompt": [t.key for t in tasks]}),
                       processing_class=tokenizer, rollout_func=rollout, peft_config=peft_config(cfg),
                       callbacks=callbacks)


def latest_checkpoint(output_dir: str) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None


def save_final(trainer: Any, cfg: TrainConfig, base: str) -> Path:
    """A complete Hugging Face folder (config, safetensors, tokenizer; LoRA merged) that ``hf:PATH`` loads."""
    final = cfg.final_model_dir()
    model = trainer.accelerator.unwrap_model(trainer.model)
    if trainer.accelerator.is_main_process:
        final.mkdir(parents=True, exist_ok=True)
        (final / FINAL_MARKER).unlink(missing_ok=True)
    if cfg.lora is not None and hasattr(model, "merge_and_unload"):
        if trainer.accelerator.is_main_process:
            model.merge_and_unload().save_pretrained(final, safe_serialization=True)
    else:
        trainer.save_model(str(final))
    if trainer.accelerator.is_main_process:
        trainer.processing_class.save_pretrained(final)
        marker = {"kind": "grpo", "base": base, "steps": trainer.state.global_step,
                  "prompt": cfg.prompt.model_dump(), "config": cfg.model_dump(mode="json")}
        (final / FINAL_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return final


def write_log(trainer: Any, cfg: TrainConfig) -> dict[str, Any]:
    """The step log as JSON lines (the report's reward curves read it) and the run's headline figures."""
    history = [h for h in trainer.state.log_history if "reward" in h]
    out = Path(cfg.output_dir)
    with open(out / "train_log.jsonl", "w") as f:
        for h in trainer.state.log_history:
            f.write(json.dumps(h) + "\n")
    rewards = [h["reward"] for h in history]
    fifth = max(1, len(rewards) // 5)
    figures = {
        "steps": trainer.state.global_step,
        "reward_first_fifth": _mean(rewards[:fifth]),
        "reward_last_fifth": _mean(rewards[-fifth:]),
        "invalid_action_rate_first_fifth": _mean([h.get("negotiation/invalid_action_rate") for h in history[:fifth]]),
        "invalid_action_rate_last_fifth": _mean([h.get("negotiation/invalid_action_rate") for h in history[-fifth:]]),
        "deal_rate_last_fifth": _mean([h.get("negotiation/deal_rate") for h in history[-fifth:]]),
    }
    (out / "train_summary.json").write_text(json.dumps(figures, indent=2) + "\n")
    return figures


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if isinstance(x, (int, float)) and not math.isnan(x)]
    return sum(xs) / len(xs) if xs else None


def run_training(cfg: TrainConfig, resume: bool = False, log: Callable[[str], None] = print) -> Path:
    """The whole recipe: the warm start (unless done), then GRPO, then the final model folder."""
    final = cfg.final_model_dir()
    if (final / FINAL_MARKER).is_file() and not resume:
        log(f"already trained: {final} (delete it, or pass --resume to continue from the last checkpoint)")
        return final
    tasks = training_tasks(cfg)  # refuses evaluation scenarios before any model loads
    if cfg.warm_start is not None:
        from haggler.training.sft import run_warm_start

        run_warm_start(cfg, log=log)
    base = base_model_path(cfg)
    model, tokenizer = load_policy(base, cfg.dtype)
    trainer = build_trainer(cfg, model, tokenizer, tasks)
    checkpoint = latest_checkpoint(cfg.output_dir) if resume else None
    if resume and checkpoint is None:
        log(f"no checkpoint in {cfg.output_dir} yet: starting at step 0")
    trainer.train(resume_from_checkpoint=checkpoint)
    figures = write_log(trainer, cfg)
    final = save_final(trainer, cfg, base)
    log(f"reward: first fifth of the steps {_fmt(figures['reward_first_fifth'])}, last fifth "
        f"{_fmt(figures['reward_last_fifth'])}; invalid actions {_fmt(figures['invalid_action_rate_first_fifth'])}"
        f" -> {_fmt(figures['invalid_action_rate_last_fifth'])}")
    log(f"trained model: {final} (evaluate it with --seller hf:{final})")
    return final


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"
