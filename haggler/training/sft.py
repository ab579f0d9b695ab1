"""The imitation warm start: supervised fine-tuning on scripted sellers' negotiations, in rollout tokens.

A small model barely produces valid actions on its own, and a GRPO group whose rewards are all equal
teaches nothing. So before RL the model imitates a scripted seller (``warmstart.py`` renders its
negotiations exactly as the LLM seller's prompts, cues and action format), with TRL's ``SFTTrainer``
and the loss on the seller's own turns only (labels -100 on the prompt, the buyer's turns, template
tokens and cues).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from haggler.agents import MODEL_MARKER
from haggler.scenarios.generate import generate_scenarios
from haggler.training.config import ConfigError, TrainConfig

DONE_MARKER = MODEL_MARKER  # written last: its presence means the warm start is complete


def warm_start_rows(cfg: TrainConfig, tokenizer: Any) -> list[dict[str, list[int]]]:
    """Pre-tokenized examples: ``input_ids`` and ``labels`` (-100 wherever the seller did not speak)."""
    from haggler.training.grpo import excluded_fingerprints, prompt_settings
    from haggler.core.scenario import fingerprint
    from haggler.agents.teacher import render_examples

    ws = cfg.warm_start
    assert ws is not None
    scenarios = generate_scenarios(ws.scenarios, ws.seed, max_turns=ws.max_turns)
    banned = excluded_fingerprints(cfg.exclude_scenarios)
    if any(fingerprint(s) in banned for s in scenarios):
        raise ConfigError("warm_start.seed: its scenarios overlap exclude_scenarios (an evaluation set)")
    rows = []
    for _game, tr in render_examples(tokenizer, scenarios, ws.teacher, list(ws.buyers), prompt_settings(cfg), ws.seed):
        labels = [-100] * len(tr.prompt_ids) + [t if m else -100 for t, m in zip(tr.completion_ids, tr.env_mask)]
        if any(x != -100 for x in labels):
            rows.append({"input_ids": tr.prompt_ids + tr.completion_ids, "labels": labels})
    return rows


def is_done(cfg: TrainConfig) -> bool:
    """Complete, and made with this config's prompt format and warm-start settings (else it is redone)."""
    marker = cfg.warm_start_dir() / DONE_MARKER
    if not marker.is_file():
        return False
    info = json.loads(marker.read_text())
    return (info.get("prompt") == cfg.prompt.model_dump() and info.get("warm_start") == _ws_settings(cfg)
            and info.get("base") == cfg.model)


def _ws_settings(cfg: TrainConfig) -> dict[str, Any]:
    assert cfg.warm_start is not None
    return cfg.warm_start.model_dump(mode="json", exclude={"output_dir"})


def run_warm_start(cfg: TrainConfig, force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Fine-tune ``cfg.model`` on the teacher's negotiations; a complete model folder at ``warm_start_dir``."""
    import os
    import time

    out = cfg.warm_start_dir()
    if cfg.warm_start is not None and is_done(cfg) and not force:
        log(f"warm start already done: {out}")
        return out
    if cfg.warm_start is None:
        raise ConfigError("warm_start: this config names no warm start")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from haggler.training.grpo import load_policy
    from haggler.engine.backends.hf import resolve_model_path

    ws, g = cfg.warm_start, cfg.grpo
    model, tokenizer = load_policy(resolve_model_path(cfg.model), cfg.dtype)
    rows = warm_start_rows(cfg, tokenizer)
    tokens = sum(len(r["input_ids"]) for r in rows)
    log(f"warm start: {len(rows)} teacher negotiations ({ws.teacher}), {tokens} tokens")
    args = SFTConfig(output_dir=str(out / "trainer"), learning_rate=ws.learning_rate, num_train_epochs=ws.epochs,
                     max_steps=ws.max_steps, per_device_train_batch_size=ws.batch_size, logging_steps=1,
                     save_strategy="no", report_to="none", bf16=g.bf16, use_cpu=g.use_cpu,
                     gradient_checkpointing=False, seed=ws.seed, max_length=None, lr_scheduler_type="constant",
                     dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False)
    start = time.perf_counter()
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    trainer.train()
    seconds = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    (out / DONE_MARKER).unlink(missing_ok=True)
    trainer.save_model(str(out))
    tokenizer.save_pretrained(out)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    info = {"kind": "warm-start", "prompt": cfg.prompt.model_dump(), "warm_start": _ws_settings(cfg), "teacher": ws.teacher, "buyers": ws.buyers, "examples": len(rows), "tokens": tokens,
            "steps": trainer.state.global_step, "seconds": round(seconds, 1),
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
            "base": cfg.model}
    (out / DONE_MARKER).write_text(json.dumps(info, indent=2) + "\n")
    log(f"warm start done in {seconds:.0f} s ({info['steps']} steps, loss {info['loss_first']} -> "
        f"{info['loss_last']}): {out}")
    return out
