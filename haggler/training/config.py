"""Training configuration: one YAML file plus command-line overrides, validated before anything heavy loads.

Only pydantic and PyYAML are imported here, so a misspelt key, a negative learning rate or a missing
model is reported within a second, naming the key, before torch, transformers or TRL are imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from haggler.agents.format.prompts import ACTION_STYLES, SLOT_STYLES, PromptSettings


class ConfigError(ValueError):
    """A training config that cannot be run; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PromptConfig(_Strict):
    cues: bool = True
    slots: Literal[SLOT_STYLES] = PromptSettings.slots  # type: ignore[valid-type]
    actions: Literal[ACTION_STYLES] = PromptSettings.actions  # type: ignore[valid-type]
    message_tokens: int = Field(0, ge=0)
    action_tokens: int = Field(6, ge=1)
    slot_tokens: int = Field(12, ge=1)
    reply_tokens: int = Field(160, ge=1)


class ScenarioSource(_Strict):
    """Training scenarios: generated with their own seed, or read from a file (not an evaluation grid's)."""

    n: int = Field(64, ge=1)
    seed: int = 1001
    max_turns: int = Field(4, ge=1)
    file: str | None = None  # a scenarios JSONL instead of generating


class BuyerEntry(_Strict):
    spec: str
    weight: float = Field(1.0, gt=0)


class WarmStartConfig(_Strict):
    """Imitation before RL: scripted sellers' negotiations rendered in the model's own action format."""

    teacher: str = "scripted:linear"
    buyers: list[str] = ["scripted:conceder", "scripted:linear"]
    scenarios: int = Field(24, ge=1)
    seed: int = 5003
    max_turns: int = Field(4, ge=1)
    learning_rate: float = Field(5e-5, gt=0)
    epochs: float = Field(1.0, gt=0)
    batch_size: int = Field(4, ge=1)
    max_steps: int = -1  # -1: as many as the epochs take
    output_dir: str | None = None  # default: <output_dir>/warm-start


class LoraConfig(_Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(32, ge=1)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"


class GRPOSettings(_Strict):
    """What reaches TRL's GRPOConfig (names as TRL spells them)."""

    learning_rate: float = Field(1e-6, gt=0)
    max_steps: int = Field(100, ge=1)
    num_generations: int = Field(8, ge=2)  # the group: one scenario, one buyer, one buyer seed, G seller samples
    per_device_train_batch_size: int = Field(8, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    temperature: float = Field(1.0, gt=0)
    beta: float = Field(0.0, ge=0)  # KL coefficient; 0 loads no reference model
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"] = "dapo"
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
    bf16: bool = False
    use_cpu: bool = False
    gradient_checkpointing: bool = False
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1)

    @model_validator(mode="after")
    def _batch_holds_whole_groups(self) -> GRPOSettings:
        batch = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if batch % self.num_generations:
            raise ValueError(f"per_device_train_batch_size x gradient_accumulation_steps ({batch}) must be a "
                             f"multiple of num_generations ({self.num_generations})")
        return self


class TrainConfig(_Strict):
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
    prompt: PromptConfig = PromptConfig()
    warm_start: WarmStartConfig | None = None
    lora: LoraConfig | None = None
    grpo: GRPOSettings = GRPOSettings()

    @model_validator(mode="after")
    def _names(self) -> TrainConfig:
        if not self.model.strip():
            raise ValueError("model: empty; give 'default', a model folder or a Hugging Face id")
        from haggler.agents import SpecError, check_spec

        for b in self.buyers:
            try:
                check_spec(b.spec)
            except SpecError as err:
                raise ValueError(f"buyers: {err}") from None
        if not self.buyers:
            raise ValueError("buyers: the training buyer pool is empty")
        return self

    def warm_start_dir(self) -> Path:
        assert self.warm_start is not None
        return Path(self.warm_start.output_dir or Path(self.output_dir) / "warm-start")

    def final_model_dir(self) -> Path:
        """Where the trained model lands as a complete Hugging Face folder (LoRA merged)."""
        return Path(self.output_dir) / "final"


def _describe(err: ValidationError, where: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"{where}: {key}: {msg}")
    return "\n".join(lines)


def set_key(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Apply one override, e.g. ``grpo.learning_rate=3e-6`` (the value is read as YAML)."""
    node = data
    parts = dotted.split(".")
    for p in parts[:-1]:
        if node.get(p) is None:
            node[p] = {}
        if not isinstance(node[p], dict):
            raise ConfigError(f"override {dotted}: {p} is not a section")
        node = node[p]
    node[parts[-1]] = value


def read_yaml(path: str | Path) -> Any:
    """A YAML file's content; a missing file or bad YAML is a ConfigError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        return yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None


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
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_describe(err, where)) from None


def _deep_copy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _deep_copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_deep_copy(v) for v in x]
    return x


def check_model_source(name: str, key: str = "model") -> None:
    """Fail fast on a model that cannot load: a folder that is not there, or not a model folder.

    A Hugging Face id (``org/name``) cannot be checked without the network, except offline, where it
    must already be in the local cache.
    """
    import os

    if name == "default":
        return
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ConfigError(f"{key}: {name!r} is a folder without config.json, not a model folder")
        return
    looks_like_hub_id = name.count("/") == 1 and not name.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise ConfigError(f"{key}: {name!r}: no such model folder (and not a Hugging Face id like org/name)")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(name, "config.json"), str):
            raise ConfigError(f"{key}: {name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1")
