"""The whole training recipe: the imitation warm start (unless done), then GRPO, then the final model folder."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from haggler.engine.backends.embedded import resolve_model_path
from haggler.engine.card import is_complete
from haggler.evaluation.figures import fmt
from haggler.training.common import load_policy
from haggler.training.config import TrainConfig
from haggler.training.grpo import (
    build_trainer,
    latest_checkpoint,
    save_final,
    training_tasks,
    write_log,
)
from haggler.training.sft import run_warm_start


def base_model_path(cfg: TrainConfig) -> str:
    """What GRPO starts from: the warm-started model, or the configured one."""
    return str(cfg.warm_start_dir()) if cfg.warm_start is not None else resolve_model_path(cfg.model)


def run_training(cfg: TrainConfig, resume: bool = False, log: Callable[[str], None] = print) -> Path:
    """The warm start (unless done), then GRPO (from the last checkpoint with ``resume``), then the final
    model folder; a complete final folder is left as it is unless ``resume``."""
    final = cfg.final_model_dir()
    if is_complete(final) and not resume:
        log(f"already trained: {final} (delete it, or pass --resume to continue from the last checkpoint)")
        return final
    tasks = training_tasks(cfg)  # refuses evaluation scenarios before any model loads
    if cfg.warm_start is not None:
        run_warm_start(cfg, log=log)
    base = base_model_path(cfg)
    model, tokenizer = load_policy(base, cfg.dtype)
    trainer = build_trainer(cfg, model, tokenizer, tasks)
    checkpoint = latest_checkpoint(cfg.output_dir) if resume else None
    if resume and checkpoint is None:
        log(f"no checkpoint in {cfg.output_dir} yet: starting at step 0")
    trainer.train(resume_from_checkpoint=checkpoint)
    main = trainer.accelerator.is_main_process  # with several processes, one writes and speaks
    figures = write_log(trainer, cfg) if main else {}
    final = save_final(trainer, cfg, base, selected=restore_best(trainer))
    trainer.accelerator.wait_for_everyone()  # final/ complete before any rank goes on (a study evaluates it next)
    del trainer, model  # a study trains its arms and then evaluates in this process: free them (cycles) now
    gc.collect()
    if not main:
        return final
    log(f"reward: first fifth of the steps {_fmt(figures['reward_first_fifth'])}, last fifth "
        f"{_fmt(figures['reward_last_fifth'])}; invalid actions {_fmt(figures['invalid_action_rate_first_fifth'])}"
        f" -> {_fmt(figures['invalid_action_rate_last_fifth'])}")
    log(f"trained model: {final} (evaluate it with --seller hf:{final})")
    return final


def restore_best(trainer: Any) -> dict[str, Any] | None:
    """With validation's ``select: best``, the best step's weights back in the model (and what it was)."""
    from haggler.training.callbacks import ValidationCallback  # lazy: imports transformers (loaded by now)

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, ValidationCallback):
            return callback.restore_best()
    return None


def _fmt(x: float | None) -> str:
    return fmt(x, 3, "n/a")
