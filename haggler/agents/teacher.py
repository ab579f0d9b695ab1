"""Imitation data for the warm start: scripted negotiators' seller turns in the LLM seller's exact tokens.

A ``TeacherAgent`` is an ``HFAgent`` whose slots are filled not by sampling but with what a scripted
negotiator decided (its message, its action, each issue's option), tokenized exactly as a rollout is:
cue ids from the environment, then the continuation's ids, never re-tokenized across the boundary. Its
trajectory therefore has the same prompt, cues, template tokens and mask as a real rollout; only the
masked-in tokens differ, and they are the scripted seller's choices. Such examples are what supervised
fine-tuning needs before GRPO (the loss on the seller's tokens only).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from haggler.agents import make_agent
from haggler.agents.llm import HFAgent, SampleRequest, Trajectory
from haggler.engine.backends.hf import Sample
from haggler.agents.format.parse import split_message
from haggler.agents.format.prompts import PromptSettings
from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.engine.rollout import Game, play_lockstep
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Offer, Reply


class _NoModel:
    """Stands in for a model: a teacher never samples, but agents describe their model."""

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer = tokenizer
        self.name = name

    def describe(self) -> dict[str, Any]:
        return {"backend": "teacher", "model": self.name}


class TeacherAgent(HFAgent):
    def __init__(self, tokenizer: Any, teacher_spec: str, scenario: Scenario, seed: int,
                 settings: PromptSettings) -> None:
        super().__init__(_NoModel(tokenizer, teacher_spec), scenario, "seller", settings, 1.0,
                         f"teacher:{teacher_spec}")
        self.teacher = make_agent(teacher_spec, scenario, "seller", seed)
        self._reply: Reply | None = None

    def turn(self, negotiation: Negotiation) -> Generator[SampleRequest, Sample, Reply]:
        self._reply = self.teacher.respond(negotiation)
        return (yield from super().turn(negotiation))

    def _slot_text(self, slot: str) -> str:
        reply, s = self._reply, self.scenario
        message = split_message(reply.text)
        action = reply.action
        word = "offer" if isinstance(action, Offer) else "accept" if isinstance(action, Accept) else "walk away"
        if slot == "message":
            return f" {message}\n"
        if slot == "action":
            if self.settings.numbered_actions:
                return f" {1 + ('offer', 'accept', 'walk away').index(word)}\n"
            return f" {word}\n"
        if slot.startswith("issue:"):
            k = int(slot.split(":")[1])
            o = action.outcome[k]
            return f" {o + 1}\n" if self.settings.numbered else f" {s.issues[k].options[o]}\n"
        lines = [f"Message: {message}", f"Action: {word}"]
        if isinstance(action, Offer):
            lines += [f"{k}: {v}" for k, v in s.names_of(action.outcome).items()]
        return "\n".join(lines)

    def _sample(self, max_new: int, stop_chars: str, slot: str) -> Generator[SampleRequest, Sample, tuple[str, Sample]]:
        text = self._slot_text(slot)
        ids = self._encode(text)
        stopped = "stop"
        if slot == "reply":  # a whole free-form reply ends the turn itself, on the end-of-turn token
            ids = ids + [self.tokenizer.eos_token_id]
            stopped = "eos"
        self.sequence.extend(ids)
        self.trajectory.add(ids, sampled=True, logprobs=[0.0] * len(ids))
        self.generated_texts.append(self.tokenizer.decode(ids))
        return text, Sample(ids=ids, logprobs=[0.0] * len(ids), stopped=stopped)
        yield  # pragma: no cover - makes this a generator, like the method it replaces


def render_examples(tokenizer: Any, scenarios: list[Scenario], teacher: str, buyers: list[str],
                    settings: PromptSettings | None = None, seed: int = 0) -> list[tuple[Game, Trajectory]]:
    """Play every scenario against every buyer (both openers) with the teacher as seller."""
    settings = settings or PromptSettings()
    games = []
    for i, s in enumerate(scenarios):
        for j, buyer in enumerate(buyers):
            for opener in ("seller", "buyer"):
                k = seed + 1000 * i + 10 * j + (opener == "buyer")
                agents = {"seller": TeacherAgent(tokenizer, teacher, s, k, settings),
                          "buyer": make_agent(buyer, s, "buyer", k + 7)}
                games.append(Game(Negotiation(s, ProtocolConfig(opener=opener)), agents))
    play_lockstep(games)
    return [(g, g.agents["seller"].trajectory) for g in games if g.agents["seller"].trajectory is not None]
