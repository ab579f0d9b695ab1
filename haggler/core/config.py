"""The one base for every validated file and config (scenarios, grids, results, training and study
configs), and the one formatter that turns pydantic's errors into messages naming the key.

Only pydantic and PyYAML are imported here, so a bad file is reported within a second, before torch,
transformers or TRL are imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigError(ValueError):
    """A config that cannot be run; the message names the file and the key."""


class Strict(BaseModel):
    """Frozen, and a key it does not know is an error (a misspelt key must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def error_items(err: ValidationError) -> list[tuple[str, str]]:
    """(dotted key, message) per problem, in words a user of the file reads (not pydantic's type names)."""
    items = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "missing":
            msg = "required key is missing"
        items.append((key, msg))
    return items


def describe(err: ValidationError, where: str) -> str:
    """One line per problem: ``FILE: KEY: MESSAGE``."""
    return "\n".join(f"{where}: {key or '(top level)'}: {msg}" for key, msg in error_items(err))


M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any, where: str) -> M:
    """``model`` from a mapping; any problem is a ConfigError naming ``where`` and the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the top level must be a mapping of keys to values")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(describe(err, where)) from None


def read_yaml(path: str | Path) -> Any:
    """A YAML file's content; a missing file or bad YAML is a ConfigError naming the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        return yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None


def set_key(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Apply one override, e.g. ``grpo.learning_rate=3e-6`` (the value is read as YAML by the caller)."""
    node = data
    parts = dotted.split(".")
    for p in parts[:-1]:
        if node.get(p) is None:
            node[p] = {}
        if not isinstance(node[p], dict):
            raise ConfigError(f"override {dotted}: {p} is not a section")
        node = node[p]
    node[parts[-1]] = value
