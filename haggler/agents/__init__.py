"""Agents by spec string: ``scripted:NAME``, ``negmas:CLASSNAME``, ``hf:MODEL`` or ``openai:MODEL[@ENDPOINT]``.

``check_spec`` validates a spec without building anything, so the CLI can refuse a typo before a long
run starts; ``make_agent`` builds the agent for one side of one negotiation. Language-model agents
share their model through an ``AgentContext``: it is loaded once, whatever the number of negotiations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from haggler.agents.scripted import SCRIPTED, make_scripted
from haggler.agents.format.prompts import PromptSettings
from haggler.core.scenario import Scenario
from haggler.core.types import Side

KINDS = ("scripted", "negmas", "hf", "openai")


class SpecError(ValueError):
    """An agent spec that names no agent haggler can build."""


@dataclass
class AgentContext:
    """Settings and loaded models shared by every language-model agent of a run."""

    prompt: PromptSettings = field(default_factory=PromptSettings)
    temperature: float = 1.0
    kv_reuse: bool = True
    api_max_tokens: int = 300
    endpoints: dict[str, Any] = field(default_factory=dict)  # name -> Endpoint; "default" from the environment
    models: dict[str, Any] = field(default_factory=dict)
    clients: dict[tuple[str, str], Any] = field(default_factory=dict)
    trained_prompts: dict[str, PromptSettings | None] = field(default_factory=dict)
    # Set: every local-model agent samples from its own stream, seeded by this, its negotiation's seed and
    # its side, so a negotiation plays the same batched or alone. Unset (the default, and what training
    # needs: a group's copies of one task must sample differently) they share the process's stream.
    sample_seed: int | None = None

    def chat_client(self, model: str, endpoint: str) -> Any:
        from haggler.engine.backends.openai_api import DEFAULT_ENDPOINT, ChatClient, Endpoint

        if (model, endpoint) not in self.clients:
            if endpoint not in self.endpoints and endpoint != DEFAULT_ENDPOINT:
                raise SpecError(f"no endpoint named {endpoint!r} (known: {sorted(self.endpoints) or 'none'})")
            ep = self.endpoints.get(endpoint) or Endpoint()
            self.clients[(model, endpoint)] = ChatClient(ep, model)
        return self.clients[(model, endpoint)]

    def prompt_for(self, name: str) -> PromptSettings:
        """A model haggler trained plays in the prompt format it was trained on (recorded in its folder);
        any other model gets the run's settings."""
        if name not in self.trained_prompts:
            self.trained_prompts[name] = trained_prompt_settings(name)
        return self.trained_prompts[name] or self.prompt

    def hf_model(self, name: str) -> Any:
        if name not in self.models:
            from haggler.engine.backends.hf import HFModel

            self.models[name] = HFModel(name, kv_reuse=self.kv_reuse)
        return self.models[name]


MODEL_MARKER = "haggler-model.json"  # written last into a model folder that haggler trained


def trained_prompt_settings(name: str) -> PromptSettings | None:
    """The prompt settings recorded in a haggler-trained model folder, if ``name`` is one."""
    import json
    from pathlib import Path

    marker = Path(name) / MODEL_MARKER
    if not marker.is_file():
        return None
    recorded = json.loads(marker.read_text()).get("prompt")
    return PromptSettings(**recorded) if recorded else None


def split_spec(spec: str) -> tuple[str, str]:
    kind, sep, name = spec.partition(":")
    if not sep or not name:
        raise SpecError(f"agent spec {spec!r} must look like KIND:NAME, e.g. scripted:boulware")
    if kind not in KINDS:
        raise SpecError(f"agent spec {spec!r}: unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
    return kind, name


def split_openai(name: str) -> tuple[str, str]:
    from haggler.engine.backends.openai_api import DEFAULT_ENDPOINT

    model, sep, endpoint = name.rpartition("@")
    return (model, endpoint) if sep and model and endpoint else (name, DEFAULT_ENDPOINT)


def check_spec(spec: str, endpoints: dict[str, Any] | None = None) -> str:
    kind, name = split_spec(spec)
    if kind == "openai" and endpoints is not None:
        _, endpoint = split_openai(name)
        if endpoint != "default" and endpoint not in endpoints:
            raise SpecError(f"agent spec {spec!r}: no endpoint named {endpoint!r} (known: {sorted(endpoints) or 'none'})")
    if kind == "scripted" and name not in SCRIPTED:
        raise SpecError(f"agent spec {spec!r}: unknown scripted negotiator; known: {', '.join(SCRIPTED)}")
    if kind == "negmas":
        from haggler.agents.negmas import negmas_class

        try:
            negmas_class(name)
        except ValueError as err:
            raise SpecError(str(err)) from None
    return spec


def make_agent(spec: str, scenario: Scenario, side: Side, seed: int, context: AgentContext | None = None) -> Any:
    kind, name = split_spec(spec)
    if kind == "scripted":
        return make_scripted(name, scenario, side, seed)
    if kind == "negmas":
        from haggler.agents.negmas import NegmasAgent

        return NegmasAgent(scenario, side, name, seed)
    context = context or AgentContext()
    if kind == "openai":
        from haggler.agents.api import APIAgent

        model, endpoint = split_openai(name)
        return APIAgent(context.chat_client(model, endpoint), scenario, side, context.temperature,
                        context.api_max_tokens, spec)
    from haggler.agents.llm import HFAgent

    agent = HFAgent(context.hf_model(name), scenario, side, context.prompt_for(name), context.temperature, spec)
    if context.sample_seed is not None:
        import hashlib

        key = hashlib.sha256(f"{context.sample_seed}:{seed}:{side}".encode()).digest()
        agent.sample_seed = int.from_bytes(key[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF
    return agent
