"""The trainer callbacks haggler adds to TRL's GRPOTrainer (transformers' public ``TrainerCallback`` API).

Imported only where a trainer is built: transformers takes seconds to import, and config validation and
``--help`` must not wait for it.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback

from haggler.training.common import sampling_mode
from haggler.training.validation import ValidationLog, Validator, summarize


class ValidationCallback(TrainerCallback):
    """Plays the held-out set at step 0 and every ``eval_steps`` (and at the last step), logs the figures
    next to TRL's, and with ``select: best`` keeps the best step's weights for the final model."""

    def __init__(self, validator: Validator, policy: Any, output_dir: str) -> None:
        self.validator = validator
        self.policy = policy  # trainer -> the sampler that plays the current weights (the rollout's)
        self.log = ValidationLog(output_dir)
        v = validator.cfg.validation
        self.eval_steps, self.select, self.n_boot = v.eval_steps, v.select, v.bootstrap
        self.trainer: Any = None
        self.best: tuple[float, int, dict[str, Any]] | None = None  # score, step, weights
        self.baseline: list[dict[str, Any]] | None = None  # step 0's rows (the log's, once it has them)

    def attach(self, trainer: Any) -> None:
        self.trainer = trainer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.baseline = self.log.baseline()  # a resumed run's step 0 (every rank reads it before any writes)
        if self.baseline is None:
            self.evaluate(state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.eval_steps == 0 or state.global_step >= state.max_steps:
            should_log = control.should_log
            self.evaluate(state.global_step)
            # Logging the validation figures (trainer.log) marks the step's logging done (the callback handler's
            # on_log clears should_log), and the step's own training log (loss, reward) was lost with it
            control.should_log = should_log

    def evaluate(self, step: int) -> dict[str, float]:
        trainer = self.trainer
        accelerator = trainer.accelerator
        with sampling_mode(trainer):  # first: it reads the training mode that the sampler's wrapper switches off
            model = self.policy(trainer)
            # With several processes each plays its share of the held-out set and every rank gets all the rows, in
            # the set's order: the same summary everywhere (the same best step), written once, by the main process
            temperature = self.temperature(trainer)
            rows = self.validator.play(model, temperature, accelerator.process_index, accelerator.num_processes)
            if self.baseline is None:
                self.baseline = rows
            # the temperature is logged with the figures: the same seller scores differently at another one
            summary = {**summarize(rows, self.baseline, self.n_boot), "validation/temperature": float(temperature)}
            if accelerator.is_main_process:
                self.log.add(step, summary, rows)
            # Logged while the model is in eval mode: GRPOTrainer.log then merges only its (empty) eval
            # metrics into this entry and leaves the training metrics of the step for its own log.
            trainer.log(dict(summary))
        if self.select == "best" and (self.best is None or summary["validation/score"] > self.best[0]):
            self.best = None  # the step it replaces goes first: never two copies at once
            self.best = (summary["validation/score"], step, trained_weights(accelerator.unwrap_model(trainer.model)))
        return summary

    def temperature(self, trainer: Any) -> float:
        """validation.temperature, else the rollouts' sampling temperature."""
        chosen = self.validator.cfg.validation.temperature
        return trainer.args.temperature if chosen is None else chosen

    def restore_best(self) -> dict[str, Any] | None:
        """With ``select: best``, put the best step's weights back; what the model card records of it."""
        if self.select != "best" or self.best is None:
            return None
        score, step, weights = self.best
        params = dict(self.trainer.accelerator.unwrap_model(self.trainer.model).named_parameters())
        with torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(value)
        return {"by": "validation score", "step": step, "score": score}


def trained_weights(model: Any) -> dict[str, Any]:
    """Copies of the parameters that training moves, all that ``select: best`` must keep of a step: a LoRA
    policy's adapters (every parameter without LoRA). The frozen base stays out: the whole state of the demo's
    135M model was 671 MB held from step 0 to the end, under the demo's peak; its adapters are 19.5 MB
    (benchmarks/bench_select_best.py). (Sampling merges the adapters into the base and takes them out again,
    which moves a base weight by a rounding error at most.)"""
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters() if p.requires_grad}
