"""Agents by spec string: ``scripted:NAME``, ``negmas:CLASSNAME``, ``hf:MODEL``, ``openai:MODEL[@ENDPOINT]`` or
``adversary:NAME[+SPEC]`` (an adversarial buyer, see ``adversary.py``).

``check_spec`` validates a spec without building anything heavy (no model loads), so a typo, a missing
model folder or an unknown endpoint is refused before a long run starts; ``make_agent`` builds the agent
for one side of one negotiation. Language-model agents share their model through an ``AgentContext``: it
is loaded once, whatever the number of negotiations.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haggler.agents.adversary import AdversaryError, make_adversary, split_adversary
from haggler.agents.api import APIAgent
from haggler.agents.format.prompts import PromptSettings
from haggler.agents.llm import HFAgent
from haggler.agents.scripted import SCRIPTED, make_scripted
from haggler.core.scenario import Scenario
from haggler.core.types import Side
from haggler.engine.backends.openai_api import DEFAULT_ENDPOINT, ChatClient, Endpoint
from haggler.engine.backends.embedded import EMBEDDED as EMBEDDED_MODELS, resolve_model_path
from haggler.engine.backends.embedded import missing as missing_embedded
from haggler.engine.card import card_prompt

KINDS = ("scripted", "negmas", "hf", "openai", "adversary")
EMBEDDED = "default"  # hf:default is the embedded SmolLM2


class SpecError(ValueError):
    """An agent spec that names no agent haggler can build."""


@dataclass
class AgentContext:
    """Settings and loaded models shared by every language-model agent of a run."""

    prompt: PromptSettings = field(default_factory=PromptSettings)  # its explicit fields override model cards
    temperature: float = 1.0
    kv_reuse: bool = True
    api_max_tokens: int = 300
    endpoints: dict[str, Endpoint] = field(default_factory=dict)  # by name; "default" from the environment
    models: dict[str, Any] = field(default_factory=dict)
    clients: dict[tuple[str, str], ChatClient] = field(default_factory=dict)
    prompts: dict[str, PromptSettings] = field(default_factory=dict)
    # Set: every language-model agent samples from its own stream, seeded by this, its negotiation's seed and
    # its side, so a negotiation plays the same batched or alone, in any order, resumed or not (runs set it
    # by default: RunSettings.sample_seed). Unset: they share the process's stream.
    sample_seed: int | None = None

    def chat_client(self, model: str, endpoint: str) -> ChatClient:
        if (model, endpoint) not in self.clients:
            if endpoint not in self.endpoints and endpoint != DEFAULT_ENDPOINT:
                raise SpecError(f"no endpoint named {endpoint!r} (known: {sorted(self.endpoints) or 'none'})")
            ep = self.endpoints.get(endpoint) or Endpoint()
            self.clients[(model, endpoint)] = ChatClient(ep, model)
        return self.clients[(model, endpoint)]

    def prompt_for(self, name: str) -> PromptSettings:
        """The format a model plays in: its card's (the format it was trained or measured in), with the run's
        explicit settings laid over it; a model without a card gets the run's settings."""
        if name not in self.prompts:
            self.prompts[name] = prompt_for_model(name, self.prompt)
        return self.prompts[name]

    def hf_model(self, name: str) -> Any:
        if name not in self.models:
            # Lazy: loading torch and transformers takes seconds, and only local-model runs need them.
            from haggler.engine.backends.hf import HFModel

            self.models[name] = HFModel(name, kv_reuse=self.kv_reuse)
        return self.models[name]


def prompt_for_model(name: str, settings: PromptSettings) -> PromptSettings:
    """``hf:NAME``'s format: its card's, with the explicit fields of ``settings`` laid over it (a model
    without a card: ``settings`` as they are)."""
    recorded = card_prompt(model_folder(name))
    return settings.under(PromptSettings(**recorded)) if recorded else settings


def model_folder(name: str) -> Path:
    """Where ``hf:NAME`` is on disk: the embedded model's materialized folder, or NAME as a path (which
    does not exist for a Hugging Face id)."""
    return Path(resolve_model_path(name)).expanduser()


def check_model_source(name: str) -> None:
    """Fail fast on a model that cannot load: a folder that is not there, or not a model folder.

    A Hugging Face id (``org/name``) cannot be checked without the network, except offline, where it
    must already be in the local cache.
    """
    if name in EMBEDDED_MODELS:
        why = missing_embedded(name)
        if why:
            raise SpecError(why)
        return
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise SpecError(f"{name!r} is a folder without config.json, not a model folder")
        return
    looks_like_hub_id = name.count("/") == 1 and not name.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise SpecError(f"no model folder at {name}, and it is not a Hugging Face id (org/name)")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        # Lazy: only offline runs consult the local hub cache.
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(name, "config.json"), str):
            raise SpecError(f"{name!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1")


def split_spec(spec: str) -> tuple[str, str]:
    kind, sep, name = spec.partition(":")
    if not sep or not name:
        raise SpecError(f"agent spec {spec!r} must look like KIND:NAME, e.g. scripted:boulware")
    if kind not in KINDS:
        raise SpecError(f"agent spec {spec!r}: unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
    return kind, name


def split_openai(name: str) -> tuple[str, str]:
    model, sep, endpoint = name.rpartition("@")
    return (model, endpoint) if sep and model and endpoint else (name, DEFAULT_ENDPOINT)


def check_spec(spec: str, endpoints: dict[str, Any] | None = None, models: bool = True) -> str:
    """``spec`` if an agent can be built from it, else a SpecError saying why. With ``models``, an ``hf:``
    model must be there (a folder, or something that looks like a Hugging Face id)."""
    kind, name = split_spec(spec)
    if kind == "adversary":
        try:
            _, wrapped = split_adversary(name)
        except AdversaryError as err:
            raise SpecError(f"agent spec {spec!r}: {err}") from None
        if wrapped is not None:  # the wrapped buyer must be buildable too
            check_spec(wrapped, endpoints, models)
        return spec
    if kind == "openai" and endpoints is not None:
        _, endpoint = split_openai(name)
        if endpoint != DEFAULT_ENDPOINT and endpoint not in endpoints:
            raise SpecError(f"agent spec {spec!r}: no endpoint named {endpoint!r} (known: {sorted(endpoints) or 'none'})")
    if kind == "scripted" and name not in SCRIPTED:
        raise SpecError(f"agent spec {spec!r}: unknown scripted negotiator; known: {', '.join(SCRIPTED)}")
    if kind == "negmas":
        from haggler.agents.negmas import negmas_class  # lazy: importing NegMAS takes about a second

        try:
            negmas_class(name)
        except ValueError as err:
            raise SpecError(str(err)) from None
    if kind == "hf" and models:
        try:
            check_model_source(name)
        except SpecError as err:
            raise SpecError(f"agent spec {spec!r}: {err}") from None
    return spec


def sample_seed(run_seed: int, negotiation_seed: int, side: Side) -> int:
    """The seed of one agent's own random stream (see ``AgentContext.sample_seed``)."""
    key = hashlib.sha256(f"{run_seed}:{negotiation_seed}:{side}".encode()).digest()
    return int.from_bytes(key[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def make_agent(spec: str, scenario: Scenario, side: Side, seed: int, context: AgentContext | None = None) -> Any:
    kind, name = split_spec(spec)
    if kind == "scripted":
        return make_scripted(name, scenario, side, seed)
    if kind == "adversary":
        return make_adversary(name, scenario, side, seed, lambda wrapped: make_agent(wrapped, scenario, side, seed, context))
    if kind == "negmas":
        from haggler.agents.negmas import NegmasAgent  # lazy: see check_spec

        return NegmasAgent(scenario, side, name, seed)
    context = context or AgentContext()
    if kind == "openai":
        model, endpoint = split_openai(name)
        api = APIAgent(context.chat_client(model, endpoint), scenario, side, context.temperature,
                       context.api_max_tokens, spec)
        if context.sample_seed is not None:
            api.seed = sample_seed(context.sample_seed, seed, side) % 2**31
        return api
    agent = HFAgent(context.hf_model(name), scenario, side, context.prompt_for(name), context.temperature, spec)
    if context.sample_seed is not None:
        agent.sample_seed = sample_seed(context.sample_seed, seed, side)
    return agent
