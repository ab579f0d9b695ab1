"""How a grid is played: the one declaration of these settings and their defaults, used by ``haggler run``'s
flags and by a study config's ``evaluation:`` section alike."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from pydantic import Field

from haggler import __version__
from haggler.agents.format.prompts import PromptSettings
from haggler.core.config import Strict


class RunSettings(Strict):
    no_deal: Literal["reservation", "zero"] = "reservation"  # the seller's score without a deal
    max_invalid: int = Field(3, ge=1)  # invalid actions before a side is taken to walk away
    temperature: float = Field(1.0, ge=0)  # sampling temperature of language-model agents
    prompt: PromptSettings = PromptSettings()  # explicit fields override a model's card
    batch_size: int = Field(64, ge=1)  # negotiations in play at once (local models batch them; APIs run concurrently)
    api_max_tokens: int = Field(300, ge=1)  # reply budget of openai: agents
    # Every language-model agent samples from a random stream of its own, seeded from this, its cell's seed and
    # its side (``agents.registry.sample_seed``): a cell plays the same whatever the batch, the order or a
    # resume, and arms on one grid meet the same buyer randomness. None: one shared stream (not reproducible).
    sample_seed: int | None = 0

    def to_json(self, endpoints: dict[str, Any] | None = None) -> dict[str, Any]:
        """What every result record keeps of the run's settings (keys in this order, as results files have them)."""
        return {"no_deal": self.no_deal, "max_invalid": self.max_invalid, "temperature": self.temperature,
                "prompt": self.prompt.model_dump(), "api_max_tokens": self.api_max_tokens,
                "sampling": sampling_rule(self.sample_seed), "haggler": __version__,
                "endpoints": {n: asdict(e) for n, e in (endpoints or {}).items()}}


def sampling_rule(seed: int | None) -> dict[str, Any]:
    """How the run's language-model agents sampled, as recorded with every result."""
    if seed is None:
        return {"seeded": False, "rule": "one random stream shared by every agent: not reproducible"}
    return {"seeded": True, "seed": seed,
            "rule": "each agent its own stream, seeded by sha256('{seed}:{cell seed * 2 + (side == buyer)}:{side}')"}


def default(field: str) -> Any:
    """A setting's default, for a command-line flag that must agree with it."""
    return RunSettings.model_fields[field].default
