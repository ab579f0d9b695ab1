"""The imitation warm start: supervised fine-tuning on scripted sellers' negotiations, in rollout tokens.

A small model barely produces valid actions on its own, and a GRPO group whose rewards are all equal
teaches nothing. So before RL the model imitates a scripted seller (``agents/teacher.py`` renders its
negotiations exactly as the LLM seller's prompts, cues and action format), with TRL's ``SFTTrainer``
and the loss on the seller's own turns only (labels -100 on the prompt, the buyer's turns, template
tokens and cues). The result is a complete model folder whose card, written last, records the format.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from haggler.agents.format.prompts import PromptSettings
from haggler.agents.teacher import render_examples
from haggler.core.config import ConfigError
from haggler.core.scenario import fingerprint
from haggler.engine.backends.embedded import resolve_model_path
from haggler.engine.card import clear_card, read_card, write_card
from haggler.scenarios.generate import generate_scenarios
from haggler.training.common import (buyer_context, excluded_fingerprints, load_policy, process_count,
                                     resolve_bf16, training_format)
from haggler.training.config import TrainConfig


def warm_start_rows(cfg: TrainConfig, tokenizer: Any,
                    settings: PromptSettings | None = None) -> list[dict[str, list[int]]]:
    """Pre-tokenized examples: ``input_ids`` and ``labels`` (-100 wherever the seller did not speak)."""
    ws = cfg.warm_start
    assert ws is not None
    scenarios = generate_scenarios(ws.scenarios, ws.seed, max_turns=ws.max_turns)
    banned = excluded_fingerprints(cfg.exclude_scenarios)
    if any(fingerprint(s) in banned for s in scenarios):
        raise ConfigError("warm_start.seed: its scenarios overlap exclude_scenarios (an evaluation set)")
    settings = settings or training_format(cfg)
    rows = []
    examples = render_examples(tokenizer, scenarios, ws.teacher, list(ws.buyers), settings, ws.seed,
                               buyer_context(cfg, settings, ws.seed))
    if not examples:
        raise ConfigError(f"warm_start: none of the teacher's negotiations played (buyers {list(ws.buyers)}); "
                          "is a buyer's server down?")
    for _game, tr in examples:
        labels = [-100] * len(tr.prompt_ids) + [t if m else -100 for t, m in zip(tr.completion_ids, tr.env_mask)]
        if any(x != -100 for x in labels):
            rows.append({"input_ids": tr.prompt_ids + tr.completion_ids, "labels": labels})
    return rows


def shared_rows(cfg: TrainConfig, tokenizer: Any, settings: PromptSettings) -> list[dict[str, list[int]]]:
    """The warm start's examples, the same on every process: with several, the main process plays the teacher's
    negotiations and sends its rows to the others (an API buyer's answers, or its errors, may differ between
    ranks, and ranks with different data would take different numbers of steps and hang the collectives)."""
    if process_count() == 1:
        return warm_start_rows(cfg, tokenizer, settings)
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    state = PartialState()
    payload: list[Any] = [None]
    if state.is_main_process:
        try:
            payload = [warm_start_rows(cfg, tokenizer, settings)]
        except ConfigError as err:  # said on every rank, not only the main one
            payload = [err]
    broadcast_object_list(payload)
    if isinstance(payload[0], ConfigError):
        raise payload[0]
    return payload[0]


def is_done(cfg: TrainConfig) -> bool:
    """Complete, and made from this base in this config's prompt format with its warm-start settings
    (else it is redone)."""
    card = read_card(cfg.warm_start_dir())
    if card is None:
        return False
    # The card's format read as settings: a prompt option added since it was written takes its default (the
    # format that warm start was trained in), so an older warm start is not redone over a field it never had.
    try:
        made_in = PromptSettings.model_validate(card.get("prompt")).model_dump()
    except ValidationError:
        return False
    return (made_in == training_format(cfg).model_dump() and card.get("warm_start") == _ws_settings(cfg)
            and card.get("base") == cfg.model)


def _ws_settings(cfg: TrainConfig) -> dict[str, Any]:
    assert cfg.warm_start is not None
    return cfg.warm_start.model_dump(mode="json", exclude={"output_dir", "gradient_checkpointing", "micro_batch_size"})


def run_warm_start(cfg: TrainConfig, force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Fine-tune ``cfg.model`` on the teacher's negotiations; a complete model folder at ``warm_start_dir``."""
    if cfg.warm_start is None:
        raise ConfigError("warm_start: this config names no warm start")
    out = cfg.warm_start_dir()
    if is_done(cfg) and not force:
        log(f"warm start already done: {out}")
        return out
    ws, settings = cfg.warm_start, training_format(cfg)
    model, tokenizer = load_policy(resolve_model_path(cfg.model), cfg.dtype)
    rows = shared_rows(cfg, tokenizer, settings)
    tokens = sum(len(r["input_ids"]) for r in rows)
    log(f"warm start: {len(rows)} teacher negotiations ({ws.teacher}), {tokens} tokens")
    start = time.perf_counter()
    trainer = _sft_trainer(cfg, model, tokenizer, rows)
    trainer.train()
    seconds = time.perf_counter() - start
    main = trainer.accelerator.is_main_process  # with several processes, one writes the folder
    if main:
        out.mkdir(parents=True, exist_ok=True)
        clear_card(out)  # incomplete until the card is written again, last
    trainer.save_model(str(out))  # every rank takes part (a sharded model gathers); the Trainer writes once
    if main:
        tokenizer.save_pretrained(out)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    card = {"kind": "warm-start", "prompt": settings.model_dump(), "warm_start": _ws_settings(cfg),
            "teacher": ws.teacher, "buyers": ws.buyers, "examples": len(rows), "tokens": tokens,
            "steps": trainer.state.global_step, "seconds": round(seconds, 1),
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
            "base": cfg.model}
    if main:
        write_card(out, card)
    trainer.accelerator.wait_for_everyone()  # GRPO, next on every rank, loads this folder
    # The trainer holds reference cycles (callbacks, accelerator): collect them now, so that GRPO, next in this
    # process, reuses the warm start's memory instead of adding its own peak on top of it.
    del trainer, model
    gc.collect()
    if main:
        log(f"warm start done in {seconds:.0f} s ({card['steps']} steps, loss {card['loss_first']} -> "
            f"{card['loss_last']}): {out}")
    return out


def _sft_trainer(cfg: TrainConfig, model: Any, tokenizer: Any, rows: list[dict[str, list[int]]]) -> Any:
    """TRL's SFTTrainer on pre-tokenized rows (its own dataset preparation skipped: the labels are ours)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    # Lazy: datasets and TRL take seconds to import; config validation and --help must not wait.
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    ws, g = cfg.warm_start, cfg.grpo
    assert ws is not None
    args = SFTConfig(output_dir=str(cfg.warm_start_dir() / "trainer"), learning_rate=ws.learning_rate,
                     num_train_epochs=ws.epochs, max_steps=ws.max_steps,
                     per_device_train_batch_size=ws.pass_size,
                     gradient_accumulation_steps=ws.accumulation_for(process_count()),
                     logging_steps=1, save_strategy="no", report_to="none", bf16=resolve_bf16(cfg), use_cpu=g.use_cpu,
                     gradient_checkpointing=ws.gradient_checkpointing, seed=ws.seed, max_length=None, lr_scheduler_type="constant",
                     dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    if args.gradient_accumulation_steps > 1:
        # Micro-batches must add up to one batch's loss: TRL's SFT loss divides by the accumulated batch's label
        # tokens (``num_items_in_batch``) itself, but transformers counts them only for a model that declares it takes
        # loss arguments; Gemma 4's multimodal class declares it does not, and each micro-batch would then be
        # averaged on its own. Public Trainer attribute.
        trainer.model_accepts_loss_kwargs = True
    return trainer
