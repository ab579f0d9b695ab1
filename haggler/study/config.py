"""A study: seller arms, training, evaluation buyers, the grid and the margin, in one YAML file.

Validated with pydantic before anything heavy loads; errors name the file and the key. Paths inside are
relative to the study file's folder. A study may ``extends: OTHER.yaml`` and say only what it changes (see
``read_study_data``), so that a series of studies keeps one copy of what they share.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from haggler.agents.registry import SpecError, check_spec
from haggler.core.config import ConfigError, Strict, read_yaml, validate
from haggler.evaluation.settings import RunSettings
from haggler.training.config import TrainConfig, load_config


class RLArm(Strict):
    learning_rate: float = Field(gt=0)
    max_steps: int | None = Field(None, ge=1)  # default: the training config's
    seeds: list[int] = Field([0], min_length=1)
    label: str | None = None  # default: "<base>-rl-lr<rate>"
    # training settings of this arm only, over the study's (e.g. {"grpo.bf16": true} next to a float32 arm);
    # an arm with overrides needs a label, which names its training folders
    overrides: dict[str, Any] = {}

    @model_validator(mode="after")
    def _overrides_need_a_label(self) -> RLArm:
        if self.overrides and not self.label:
            raise ValueError("an RL arm with overrides needs a label (it names the arm and its training folders)")
        return self


class BaseArm(Strict):
    name: str = Field(min_length=1)  # e.g. "gemma4-e4b"; arms are named after it
    model: str = Field(min_length=1)  # hf: model (a Hugging Face id, a folder, or "default")
    size: float | None = Field(None, gt=0)  # in billions of parameters, for the gain-versus-size plot
    size_label: str | None = None  # e.g. "4.5B (effective)"
    warm_start: bool = False  # the base is the training config's warm-started model, not the raw one
    rl: list[RLArm] = []


class Reference(Strict):
    name: str = Field(min_length=1)
    spec: str = Field(min_length=1)  # any seller spec: openai:MODEL@ENDPOINT, scripted:..., hf:...


class EvalBuyer(Strict):
    spec: str = Field(min_length=1)
    family: str = Field(min_length=1)  # the model family, to see a gain that sits on a family


class GridConfig(Strict):
    scenarios: str | None = None  # a scenarios JSONL; else generated with n / seed / max_turns
    n: int = Field(24, ge=1)
    seed: int = 7
    max_turns: int = Field(10, ge=2)
    openers: list[Literal["seller", "buyer"]] = ["seller", "buyer"]
    repeats: int = Field(1, ge=1)
    grid_seed: int = 0


class SecurityGrid(Strict):
    """A small grid against adversarial buyers, played after the main one into the same results file; the
    report's security table reads it, and its score tables leave it out."""

    buyers: list[str] = Field(min_length=1)  # adversary:NAME[+SPEC] specs
    n: int = Field(4, ge=1)  # the evaluation set's first n scenarios
    openers: list[Literal["seller", "buyer"]] = ["seller", "buyer"]


class StudyConfig(Strict):
    name: str = Field(min_length=1)
    output_dir: str
    training: str  # a training config (YAML); each RL arm overrides model, learning rate, steps, seed
    training_overrides: dict[str, Any] = {}
    bases: list[BaseArm] = Field(min_length=1)
    references: list[Reference] = []
    # the "no deal" reference arm (scripted:no-deal: every cell ends at the seller's reservation value): on a grid
    # where buyers seldom offer anything worth accepting, refusing everything scores about what a good seller does,
    # and only the comparison with this arm tells a negotiating skill from a policy of refusing
    no_deal_arm: bool = True
    # processes that train each arm together (torch.distributed.run, data parallel: one per GPU, or CPU processes
    # over gloo); the global batch is the training config's on any number (grpo.global_batch_size)
    training_processes: int = Field(1, ge=1)
    buyers: list[EvalBuyer] = Field(min_length=2)
    grid: GridConfig = GridConfig()
    evaluation: RunSettings = RunSettings()  # as haggler run's flags; prompt fields left out: each model's card
    margin: float = Field(0.02, gt=0)  # equivalence margin on the seller score
    bootstrap: int = Field(4000, ge=200)
    endpoints: str | None = None
    security: SecurityGrid | None = None

    @model_validator(mode="after")
    def _checks(self) -> StudyConfig:
        names = [b.name for b in self.bases] + [r.name for r in self.references] + \
            (["no-deal"] if self.no_deal_arm and "scripted:no-deal" not in [r.spec for r in self.references] else [])
        if len(set(names)) != len(names):
            raise ValueError(f"bases and references: names must be unique, got {names}")
        specs = [b.spec for b in self.buyers]
        if len(set(specs)) != len(specs):
            raise ValueError(f"buyers: each evaluation buyer once, got {specs}")
        adversaries = self.security.buyers if self.security else []
        bad = [b for b in adversaries if not b.startswith("adversary:") or b in specs]
        if bad or len(set(adversaries)) != len(adversaries):
            raise ValueError("security.buyers: each an adversary:* spec, once, and not an evaluation buyer; got "
                             f"{bad or adversaries}")
        for where, spec in ([("buyers", b.spec) for b in self.buyers] + [("references", r.spec) for r in self.references]
                            + [("security.buyers", b) for b in adversaries]):
            try:
                check_spec(spec)
            except SpecError as err:
                raise ValueError(f"{where}: {err}") from None
        return self


def load_study(path: str | Path) -> StudyConfig:
    p = Path(path)
    data, chain = _read_chain(p)
    # an error in a setting names every file it may come from, the extending one first
    where = str(path) + (f" (extends {' < '.join(str(c) for c in chain[1:])})" if len(chain) > 1 else "")
    return _relative_to(validate(StudyConfig, data, where), p.parent)


# Keys whose values are paths, read relative to the folder of the file that gives them.
_PATH_KEYS = (("training",), ("endpoints",), ("grid", "scenarios"))


def read_study_data(path: Path) -> Any:
    """A study file's mapping with what it ``extends`` laid under it: a mapping given in both files merges key by
    key (``grid``, ``training_overrides``, ``evaluation``; the extending file's keys are applied last), anything
    else (a list of bases, a value) is the extending file's; nothing inherited can be removed, only replaced. It
    must name its own ``name`` and ``output_dir``, and not the other study's: sharing that study's folder would
    resume its training and results under different settings."""
    return _read_chain(path)[0]


def _read_chain(path: Path, _seen: tuple[Path, ...] = ()) -> tuple[Any, list[Path]]:
    data = read_yaml(path)
    if not isinstance(data, dict) or "extends" not in data:
        return data, [path]
    data = dict(data)
    parent = data.pop("extends")
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"{path}: extends: the path of another study file, got {parent!r}")
    missing = [k for k in ("name", "output_dir") if k not in data]
    if missing:
        raise ConfigError(f"{path}: a study that extends {parent} must give its own {' and '.join(missing)} "
                          "(else it would resume the other study's runs under different settings)")
    parent_path = Path(parent) if Path(parent).is_absolute() else path.parent / parent
    seen = (*_seen, path.resolve())
    if parent_path.resolve() in seen:
        raise ConfigError(f"{path}: extends: {parent} leads back to {path} (a cycle)")
    try:
        base, chain = _read_chain(parent_path, seen)
    except ConfigError as err:
        raise ConfigError(f"{path}: extends: {err}") from None
    if not isinstance(base, dict):
        raise ConfigError(f"{path}: extends: {parent_path}: the top level must be a mapping of keys to values")
    for key in ("name", "output_dir"):
        if key in base and str(base[key]) == str(data[key]):
            raise ConfigError(f"{path}: {key}: {data[key]!r} is also {parent_path}'s; a study that extends another "
                              "needs a name and folder of its own")
    if parent_path.parent.resolve() != path.parent.resolve():
        base = _paths_from(base, parent_path.parent)
    return _merge(base, data), [path, *chain]


def _paths_from(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``data`` with its relative paths read from ``folder``, for a file extended from another folder: as
    ``_relative_to`` reads the top file's (made absolute here, since the top file's folder is another)."""
    out = dict(data)
    for *sections, leaf in _PATH_KEYS:
        node: Any = out
        for k in sections:  # copied on the way down: the caller's mapping is not changed
            if not isinstance(node.get(k), dict):
                node = None
                break
            node[k] = dict(node[k])
            node = node[k]
        value = node.get(leaf) if node is not None else None
        if isinstance(value, str) and not Path(value).is_absolute():
            candidate = folder / value
            if candidate.exists() or not Path(value).exists():
                node[leaf] = str(candidate.resolve())
    return out


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    # the extending file's keys come last: dotted training overrides are applied in order, so a child's
    # "validation.n" must not be applied before a parent's "validation" section that would then replace it
    out = {k: v for k, v in base.items() if k not in over}
    for k, v in over.items():
        out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def _relative_to(cfg: StudyConfig, folder: Path) -> StudyConfig:
    """Paths in a study file are relative to the file's folder (absolute ones stay as they are)."""
    def fix(x: str | None) -> str | None:
        if x is None or Path(x).is_absolute():
            return x
        candidate = folder / x
        return str(candidate) if candidate.exists() or not Path(x).exists() else x

    grid = cfg.grid.model_copy(update={"scenarios": fix(cfg.grid.scenarios)})
    return cfg.model_copy(update={"training": fix(cfg.training), "endpoints": fix(cfg.endpoints), "grid": grid})


# ---- the arms a study config plans (the orchestrator runs them; the report reads them) ----

@dataclass(frozen=True)
class Arm:
    name: str  # the arm as the report names it (seeds of one RL arm share it)
    spec: str  # the seller spec that plays it
    kind: str  # "base", "rl" or "reference"
    base: str | None = None  # the base arm an RL arm was trained from
    size: float | None = None
    size_label: str | None = None
    learning_rate: float | None = None
    max_steps: int | None = None
    seed: int | None = None
    train_dir: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


NO_DEAL_ARM, NO_DEAL_SPEC = "no-deal", "scripted:no-deal"


def _rate(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


def study_dir(cfg: StudyConfig) -> Path:
    return Path(cfg.output_dir)


def scenarios_path(cfg: StudyConfig) -> Path:
    return Path(cfg.grid.scenarios) if cfg.grid.scenarios else study_dir(cfg) / "scenarios.jsonl"


def arm_training_config(cfg: StudyConfig, base_name: str, model: str, rl: Any, seed: int) -> TrainConfig:
    """The training config of one RL arm and seed: the study's training file with this arm's settings."""
    root = study_dir(cfg) / "train"
    folder = f"{base_name}-{rl.label}-s{seed}" if rl.overrides else f"{base_name}-lr{_rate(rl.learning_rate)}-s{seed}"
    overrides = {
        **cfg.training_overrides,
        **rl.overrides,
        "model": model,
        "output_dir": str(root / folder),
        "grpo.learning_rate": rl.learning_rate,
        "grpo.seed": seed,
        "exclude_scenarios": [str(scenarios_path(cfg))],
    }
    if rl.max_steps is not None:
        overrides["grpo.max_steps"] = rl.max_steps
    if cfg.endpoints:
        overrides["endpoints"] = cfg.endpoints
    tc = load_config(cfg.training, overrides)
    if tc.validation is not None and tc.validation.temperature is None:
        # the checkpoint is chosen playing as the evaluation grid is played (a temperature set in training stays)
        tc = tc.model_copy(update={"validation": tc.validation.model_copy(
            update={"temperature": cfg.evaluation.temperature})})
    if tc.warm_start is not None:  # one warm start per base, shared by every RL arm trained from it
        ws = tc.warm_start.model_copy(update={"output_dir": str(root / base_name / "warm-start")})
        tc = tc.model_copy(update={"warm_start": ws})
    return tc


def plan_arms(cfg: StudyConfig) -> tuple[list[Arm], dict[str, TrainConfig]]:
    """Every arm of the study, and the training config of each RL arm (keyed by its train dir)."""
    arms: list[Arm] = []
    trainings: dict[str, TrainConfig] = {}
    for b in cfg.bases:
        base_spec = f"hf:{b.model}"
        if b.warm_start:
            probe = load_config(cfg.training, {**cfg.training_overrides, "model": b.model, "output_dir": "unused"})
            if probe.warm_start is None:
                raise ValueError(f"bases: {b.name} asks for the warm-started model, but {cfg.training} names no "
                                 "warm_start")
            base_spec = f"hf:{study_dir(cfg) / 'train' / b.name / 'warm-start'}"
        arms.append(Arm(b.name, base_spec, "base", size=b.size, size_label=b.size_label))
        for rl in b.rl:
            label = rl.label or f"{b.name}-rl-lr{_rate(rl.learning_rate)}"
            for seed in rl.seeds:
                tc = arm_training_config(cfg, b.name, b.model, rl, seed)
                trainings[tc.output_dir] = tc
                arms.append(Arm(label, f"hf:{tc.final_model_dir()}", "rl", base=b.name, size=b.size,
                                size_label=b.size_label, learning_rate=rl.learning_rate,
                                max_steps=tc.grpo.max_steps, seed=seed, train_dir=tc.output_dir))
    for r in cfg.references:
        arms.append(Arm(r.name, r.spec, "reference"))
    if cfg.no_deal_arm and all(a.spec != NO_DEAL_SPEC for a in arms):
        arms.append(Arm(NO_DEAL_ARM, NO_DEAL_SPEC, "reference"))
    evaluation = {b.spec for b in cfg.buyers}
    for tc in trainings.values():
        met = sorted(evaluation & {b.spec for b in tc.buyers})
        if met:
            raise ValueError(f"buyers: {met} also in the training pool of {cfg.training}; evaluation buyers must "
                             "be ones the sellers never met in training")
        seen = sorted(evaluation & set(tc.validation.buyers or [])) if tc.validation else []
        if seen:
            raise ValueError(f"buyers: {seen} also validation buyers in {cfg.training}; evaluation buyers must "
                             "be ones the sellers never met in training or validation")
    return arms, trainings
