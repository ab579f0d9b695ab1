"""Training configuration: one YAML file plus command-line overrides, validated before anything heavy loads.

Only pydantic and PyYAML are imported here, so a misspelt key, a negative learning rate or a missing
model is reported within a second, naming the key, before torch, transformers or TRL are imported.
The prompt format is haggler's one ``PromptSettings``: what the config leaves out comes from the model's
card (the embedded model's is the format it was measured in), and a trained model's card records it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from haggler.agents.format.prompts import PromptSettings
from haggler.agents.registry import SpecError, check_spec
from haggler.core.config import ConfigError, Strict, read_yaml, set_key, validate


class ScenarioSource(Strict):
    """Training scenarios: generated with their own seed, or read from a file (not an evaluation grid's)."""

    n: int = Field(64, ge=1)
    seed: int = 1001
    max_turns: int = Field(4, ge=1)
    file: str | None = None  # a scenarios JSONL instead of generating


class ValidationConfig(Strict):
    """Held-out negotiations played with the current policy at step 0 and every ``eval_steps``: the same
    scenarios, buyers, openers and random streams each time, so a change of score is the policy's."""

    n: int = Field(16, ge=1)  # held-out scenarios: generated with their own seed, or read from ``file``
    seed: int = 3001
    max_turns: int | None = Field(None, ge=2)  # default: the training scenarios'
    file: str | None = None
    buyers: list[str] | None = None  # default: the training pool's buyers; never an evaluation buyer
    openers: list[Literal["seller", "buyer"]] = ["seller", "buyer"]
    eval_steps: int = Field(4, ge=1)
    select: Literal["last", "best"] = "last"  # best: the final model is the step with the best validation score
    # the seller's sampling temperature in validation (0: greedy); default: the rollouts' (grpo.temperature). A study
    # sets it to its evaluation's, so that the checkpoint is chosen playing as the grid will be played
    temperature: float | None = Field(None, ge=0)
    bootstrap: int = Field(2000, ge=200)  # resamples for the paired, scenario-clustered interval
    # negotiations played at once (a sliding window): each running one holds its key-value cache, so this bounds
    # validation's memory; 96 demo negotiations took 143 s 32 at a time and 159 s all at once
    batch_size: int = Field(32, ge=1)


class BuyerEntry(Strict):
    spec: str
    weight: float = Field(1.0, gt=0)


class WarmStartConfig(Strict):
    """Imitation before RL: scripted sellers' negotiations rendered in the model's own action format."""

    teacher: str = "scripted:linear"
    buyers: list[str] = ["scripted:conceder", "scripted:linear"]
    scenarios: int = Field(24, ge=1)
    seed: int = 5003
    max_turns: int = Field(4, ge=1)
    learning_rate: float = Field(5e-5, gt=0)
    epochs: float = Field(1.0, gt=0)
    batch_size: int = Field(4, ge=1)  # examples per optimizer step
    # examples per forward and backward pass (default: batch_size); the rest of a batch comes by gradient
    # accumulation, its loss divided by the whole batch's label tokens as one pass's would be: the same objective
    # (float rounding aside, so not part of the warm start's identity) with a fraction of the activations held
    micro_batch_size: int | None = Field(None, ge=1)
    max_steps: int = -1  # -1: as many as the epochs take
    # recompute each layer's activations in the backward pass instead of keeping them: the same model, less
    # memory (not part of the warm start's identity: a finished one is not redone when this changes)
    gradient_checkpointing: bool = False
    output_dir: str | None = None  # default: <output_dir>/warm-start

    @model_validator(mode="after")
    def _micro_batches_fill_a_batch(self) -> WarmStartConfig:
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of micro_batch_size "
                             f"({self.micro_batch_size})")
        return self

    @property
    def pass_size(self) -> int:
        """Examples per forward and backward pass."""
        return self.micro_batch_size or self.batch_size

    @property
    def accumulation(self) -> int:
        """Micro-batches per optimizer step (on one process)."""
        return self.batch_size // self.pass_size

    def accumulation_for(self, processes: int) -> int:
        """Each rank's micro-batches per optimizer step that keep ``batch_size`` examples per step over every
        process; a batch that does not split is refused, naming the numbers."""
        if self.batch_size % (self.pass_size * processes):
            raise ValueError(f"warm_start: batch_size {self.batch_size} does not split into {processes} processes x "
                             f"micro_batch_size {self.pass_size} x a whole number of accumulation steps")
        return self.batch_size // (self.pass_size * processes)


class LoraConfig(Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"
    # adapt only the top N decoder layers: nothing below them trains, so the backward pass stops there (on the
    # CPU, forward and backward of 2 x 700 tokens through SmolLM2-135M: 6.1 s with all 30 layers, 3.4 s with 10)
    layers: int | None = Field(None, ge=1)


class GRPOSettings(Strict):
    """What reaches TRL's GRPOConfig (names as TRL spells them)."""

    learning_rate: float = Field(1e-6, gt=0)
    max_steps: int = Field(100, ge=1)
    num_generations: int = Field(8, ge=2)  # the group: one scenario, one buyer, one buyer seed, G seller samples
    per_device_train_batch_size: int = Field(8, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    # negotiations per optimizer step over every process (per-rank batch x processes x accumulation): the
    # experiment, kept on any number of processes by deriving each rank's accumulation (``accumulation_for``).
    # Default: per_device_train_batch_size x gradient_accumulation_steps, the recipe as written for one process
    global_batch_size: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, gt=0)
    beta: float = Field(0.0, ge=0)  # KL coefficient; 0 loads no reference model
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"] = "dapo"
    num_iterations: int = Field(1, ge=1)  # updates per batch of rollouts (GRPO's mu); above 1 the ratio is clipped
    scale_rewards: Literal["group", "batch", "none"] = "group"
    epsilon: float = Field(0.2, gt=0)
    max_grad_norm: float = Field(1.0, gt=0)
    warmup_steps: int = Field(0, ge=0)
    lr_scheduler_type: str = "constant"
    seed: int = 0
    save_steps: int = Field(10, ge=1)
    save_total_limit: int | None = 3
    logging_steps: int = Field(1, ge=1)
    report_to: str | list[str] = "tensorboard"
    # bf16 autocast for the update (weights and optimizer stay float32). "auto": on a GPU that computes bf16; float32
    # on any CPU, where autocast was slower over a whole demo and changed its conclusion (training/common.py)
    bf16: bool | Literal["auto"] = False
    use_cpu: bool = False
    gradient_checkpointing: bool = False
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1)

    @model_validator(mode="after")
    def _batch_holds_whole_groups(self) -> GRPOSettings:
        batch = self.global_batch
        if batch % self.num_generations:
            raise ValueError(f"the global batch ({batch}: global_batch_size, or per_device_train_batch_size x "
                             f"gradient_accumulation_steps) must be a multiple of num_generations "
                             f"({self.num_generations})")
        return self

    @property
    def global_batch(self) -> int:
        return self.global_batch_size or self.per_device_train_batch_size * self.gradient_accumulation_steps

    def accumulation_for(self, processes: int) -> int:
        """Each rank's gradient accumulation that keeps the global batch on ``processes`` processes; a global batch
        that does not split is refused, naming the numbers."""
        per_step = self.per_device_train_batch_size * processes
        if self.global_batch % per_step:
            raise ValueError(f"grpo: a global batch of {self.global_batch} negotiations does not split into "
                             f"{processes} processes x per_device_train_batch_size {self.per_device_train_batch_size}"
                             f" x a whole number of accumulation steps; set grpo.global_batch_size or "
                             f"grpo.per_device_train_batch_size so that it does")
        return self.global_batch // per_step


class TrainConfig(Strict):
    model: str  # "default" (the embedded SmolLM2), a local folder or a Hugging Face id
    output_dir: str
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    scenarios: ScenarioSource = ScenarioSource()
    exclude_scenarios: list[str] = []  # evaluation scenario files: training refuses any scenario in them
    buyers: list[BuyerEntry] = [BuyerEntry(spec="scripted:conceder")]
    endpoints: str | None = None  # a YAML endpoint table for openai: buyers
    buyer_temperature: float = Field(1.0, ge=0)
    opener: Literal["seller", "buyer", "alternate"] = "alternate"
    max_invalid: int = Field(3, ge=1)
    no_deal: Literal["reservation", "zero"] = "reservation"
    format_penalty: float = Field(0.0, ge=0)  # subtracted per invalid seller action share
    # what GRPO maximises. score: the seller's score (no deal: the no_deal value). outcome: +1 a deal above the
    # seller's reservation, -1 one below it, 0 no deal; the price of a good deal does not count. Why: the copies of
    # a group meet one buyer, and at low sampling temperatures they often all deal (benchmarks/group_outcomes.py;
    # training logs the share of split groups), and a group that all deal compares prices alone, paying the copies
    # that conceded least; under outcome only groups that differ in what they closed speak
    reward: Literal["score", "outcome"] = "score"
    # a training step in which this share of the negotiations errored (a buyer's server down, a model that cannot
    # play) stops the run with the first error, before anything is saved as a trained model; 1.0: only when all did
    max_rollout_errors: float = Field(1.0, gt=0, le=1)
    prompt: PromptSettings = PromptSettings()  # fields left out: the model card's
    warm_start: WarmStartConfig | None = None
    validation: ValidationConfig | None = None
    lora: LoraConfig | None = None
    grpo: GRPOSettings = GRPOSettings()

    @model_validator(mode="after")
    def _names(self) -> TrainConfig:
        if not self.model.strip():
            raise ValueError("model: empty; give 'default', a model folder or a Hugging Face id")
        for b in self.buyers:
            try:
                check_spec(b.spec)
            except SpecError as err:
                raise ValueError(f"buyers: {err}") from None
        if not self.buyers:
            raise ValueError("buyers: the training buyer pool is empty")
        for spec in (self.validation.buyers or []) if self.validation else []:
            try:
                check_spec(spec)
            except SpecError as err:
                raise ValueError(f"validation.buyers: {err}") from None
        return self

    def warm_start_dir(self) -> Path:
        assert self.warm_start is not None
        return Path(self.warm_start.output_dir or Path(self.output_dir) / "warm-start")

    def final_model_dir(self) -> Path:
        """Where the trained model lands as a complete Hugging Face folder (LoRA merged)."""
        return Path(self.output_dir) / "final"


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None,
                data: dict[str, Any] | None = None) -> TrainConfig:
    """Read a config file (or ``data``), apply dotted-key overrides, validate. Errors name file and key."""
    where = str(path) if path is not None else "config"
    if data is None:
        if path is None:
            raise ConfigError("no config given")
        data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping of keys to values")
    data = _deep_copy(data)
    for key, value in (overrides or {}).items():
        set_key(data, key, value)
    return validate(TrainConfig, data, where)


def _deep_copy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _deep_copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_deep_copy(v) for v in x]
    return x
