"""A study: seller arms, training, evaluation buyers, the grid and the margin, in one YAML file.

Validated with pydantic before anything heavy loads; errors name the file and the key. Paths inside are
relative to the study file's folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from haggler.agents.format.prompts import ACTION_STYLES, SLOT_STYLES, PromptSettings
from haggler.training.config import ConfigError, _describe, read_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RLArm(_Strict):
    learning_rate: float = Field(gt=0)
    max_steps: int | None = Field(None, ge=1)  # default: the training config's
    seeds: list[int] = Field([0], min_length=1)
    label: str | None = None  # default: "<base>-rl-lr<rate>"


class BaseArm(_Strict):
    name: str = Field(min_length=1)  # e.g. "gemma4-e4b"; arms are named after it
    model: str = Field(min_length=1)  # hf: model (a Hugging Face id, a folder, or "default")
    size: float | None = Field(None, gt=0)  # in billions of parameters, for the gain-versus-size plot
    size_label: str | None = None  # e.g. "4.5B (effective)"
    warm_start: bool = False  # the base is the training config's warm-started model, not the raw one
    rl: list[RLArm] = []


class Reference(_Strict):
    name: str = Field(min_length=1)
    spec: str = Field(min_length=1)  # any seller spec: openai:MODEL@ENDPOINT, scripted:..., hf:...


class EvalBuyer(_Strict):
    spec: str = Field(min_length=1)
    family: str = Field(min_length=1)  # the model family, to see a gain that sits on a family


class GridConfig(_Strict):
    scenarios: str | None = None  # a scenarios JSONL; else generated with n / seed / max_turns
    n: int = Field(24, ge=1)
    seed: int = 7
    max_turns: int = Field(10, ge=2)
    openers: list[Literal["seller", "buyer"]] = ["seller", "buyer"]
    repeats: int = Field(1, ge=1)
    grid_seed: int = 0


class EvalSettings(_Strict):
    temperature: float = Field(0.7, ge=0)
    no_deal: Literal["reservation", "zero"] = "reservation"
    max_invalid: int = Field(3, ge=1)
    batch_size: int = Field(32, ge=1)
    api_max_tokens: int = Field(300, ge=1)
    cues: bool = True
    slots: Literal[SLOT_STYLES] = PromptSettings.slots  # type: ignore[valid-type]
    actions: Literal[ACTION_STYLES] = PromptSettings.actions  # type: ignore[valid-type]
    message_tokens: int = Field(40, ge=0)


class StudyConfig(_Strict):
    name: str = Field(min_length=1)
    output_dir: str
    training: str  # a training config (YAML); each RL arm overrides model, learning rate, steps, seed
    training_overrides: dict[str, Any] = {}
    bases: list[BaseArm] = Field(min_length=1)
    references: list[Reference] = []
    buyers: list[EvalBuyer] = Field(min_length=2)
    grid: GridConfig = GridConfig()
    evaluation: EvalSettings = EvalSettings()
    margin: float = Field(0.02, gt=0)  # equivalence margin on the seller score
    bootstrap: int = Field(4000, ge=200)
    endpoints: str | None = None

    @model_validator(mode="after")
    def _checks(self) -> StudyConfig:
        from haggler.agents import SpecError, check_spec

        names = [b.name for b in self.bases] + [r.name for r in self.references]
        if len(set(names)) != len(names):
            raise ValueError(f"bases and references: names must be unique, got {names}")
        specs = [b.spec for b in self.buyers]
        if len(set(specs)) != len(specs):
            raise ValueError(f"buyers: each evaluation buyer once, got {specs}")
        for where, spec in [("buyers", b.spec) for b in self.buyers] + [("references", r.spec) for r in self.references]:
            try:
                check_spec(spec)
            except SpecError as err:
                raise ValueError(f"{where}: {err}") from None
        return self


def load_study(path: str | Path) -> StudyConfig:
    p = Path(path)
    data = read_yaml(p)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    try:
        cfg = StudyConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_describe(err, str(path))) from None
    return _relative_to(cfg, p.parent)


def _relative_to(cfg: StudyConfig, folder: Path) -> StudyConfig:
    """Paths in a study file are relative to the file's folder (absolute ones stay as they are)."""
    def fix(x: str | None) -> str | None:
        if x is None or Path(x).is_absolute():
            return x
        candidate = folder / x
        return str(candidate) if candidate.exists() or not Path(x).exists() else x

    grid = cfg.grid.model_copy(update={"scenarios": fix(cfg.grid.scenarios)})
    return cfg.model_copy(update={"training": fix(cfg.training), "endpoints": fix(cfg.endpoints), "grid": grid})
