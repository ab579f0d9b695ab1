"""Agents by spec string: ``scripted:NAME`` or ``negmas:CLASSNAME``.

``check_spec`` validates a spec without building anything, so the CLI can refuse a typo before
a long run starts; ``make_agent`` builds the agent for one side of one negotiation.
"""

from __future__ import annotations

from haggler.agents.scripted import SCRIPTED, make_scripted
from haggler.protocol import Agent
from haggler.scenario import Scenario
from haggler.types import Side

KINDS = ("scripted", "negmas")


class SpecError(ValueError):
    """An agent spec that names no agent haggler can build."""


def split_spec(spec: str) -> tuple[str, str]:
    kind, sep, name = spec.partition(":")
    if not sep or not name:
        raise SpecError(f"agent spec {spec!r} must look like KIND:NAME, e.g. scripted:boulware")
    if kind not in KINDS:
        raise SpecError(f"agent spec {spec!r}: unknown kind {kind!r}; known kinds: {', '.join(KINDS)}")
    return kind, name


def check_spec(spec: str) -> str:
    kind, name = split_spec(spec)
    if kind == "scripted" and name not in SCRIPTED:
        raise SpecError(f"agent spec {spec!r}: unknown scripted negotiator; known: {', '.join(SCRIPTED)}")
    if kind == "negmas":
        from haggler.agents.negmas_agent import negmas_class

        try:
            negmas_class(name)
        except ValueError as err:
            raise SpecError(str(err)) from None
    return spec


def make_agent(spec: str, scenario: Scenario, side: Side, seed: int) -> Agent:
    kind, name = split_spec(spec)
    if kind == "scripted":
        return make_scripted(name, scenario, side, seed)
    from haggler.agents.negmas_agent import NegmasAgent

    return NegmasAgent(scenario, side, name, seed)
