"""Imitation data for the warm start: scripted negotiators' seller turns in the LLM seller's exact tokens.

The teacher is a sampler, not a special agent: a ``TeacherSampler`` answers each slot an ``HFAgent`` asks
to have filled with the tokens of what a scripted negotiator decided (its message, its action, each
issue's option), appended to the sequence exactly as a model's sample is. A ``TeacherAgent`` asks the
scripted seller for its reply when a turn opens, queues that reply's slot texts on its sampler, and lets
an ordinary ``HFAgent`` play the turn. Cue ids come from the environment and the continuation's ids are
never re-tokenized across the boundary, so the trajectory has the same prompt, cues, template tokens and
mask as a real rollout; only the masked-in tokens differ, and they are the scripted seller's choices.
Such examples are what supervised fine-tuning needs before GRPO (the loss on the seller's tokens only).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

from haggler.agents.format.parse import split_message
from haggler.agents.format.prompts import PromptSettings
from haggler.agents.llm import HFAgent, Trajectory
from haggler.agents.registry import AgentContext, make_agent
from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Offer, Reply
from haggler.engine.chat import chat_format
from haggler.engine.interfaces import Sample, SampleRequest, Sequence
from haggler.engine.rollout import Game, play_lockstep

ACTION_WORDS = ("offer", "accept", "walk away")


class TeacherSampler:
    """The sampler of one negotiation's teacher seller: every continuation it gives was queued beforehand.

    One per negotiation: its queue holds the slot texts of the turn in progress, in the order the agent
    asks for them. A queued text is given whole, whatever the slot's token budget, and a whole free-form
    reply ends on the end-of-turn token, as a model closes its turn.
    """

    def __init__(self, tokenizer: Any, name: str, end_of_turn: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.name = name
        self.end_of_turn = end_of_turn if end_of_turn is not None else chat_format(tokenizer).end_of_turn
        self._queue: deque[Sample] = deque()

    def describe(self) -> dict[str, Any]:
        return {"backend": "teacher", "model": self.name}

    def queue(self, texts: list[str], end_turn: bool = False) -> None:
        """The continuations of the next ``len(texts)`` slots; ``end_turn``: the last one closes the turn."""
        if self._queue:
            raise RuntimeError(f"teacher {self.name}: the previous turn left {len(self._queue)} slot(s) unasked")
        for i, text in enumerate(texts):
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            last = end_turn and i == len(texts) - 1
            if last:
                ids = ids + [self.end_of_turn]
            self._queue.append(Sample(ids=ids, logprobs=[0.0] * len(ids), stopped="eos" if last else "stop"))

    def continue_batch(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
                       stop_chars: str = "\n", generator: Any = None,
                       stop_ids: frozenset[int] = frozenset()) -> list[Sample]:
        """Append the next queued continuation to each sequence and return it (as a model's samples are)."""
        out = []
        for seq in seqs:
            if not self._queue:
                raise RuntimeError(f"teacher {self.name}: asked for a slot that no scripted reply filled")
            sample = self._queue.popleft()
            seq.extend(sample.ids)
            out.append(sample)
        return out


def slot_texts(reply: Reply, scenario: Scenario, settings: PromptSettings, thought_close: str | None = None) -> list[str]:
    """A (valid) reply as the texts of the slots an ``HFAgent`` with ``settings`` asks for, in its order:
    an empty thought (``thought_close``, the template's closing marker, where the format thinks), the message
    (if it has that slot), the action, one option per issue for an offer; or, cues off, the whole reply."""
    message = split_message(reply.text)
    action = reply.action
    word = "offer" if isinstance(action, Offer) else "accept" if isinstance(action, Accept) else "walk away"
    thought = [thought_close] if settings.thinking and thought_close else []
    if not settings.cues:
        lines = [f"Message: {message}", f"Action: {word}"]
        if isinstance(action, Offer):
            lines += [f"{k}: {v}" for k, v in scenario.names_of(action.outcome).items()]
        return thought + ["\n".join(lines)]
    texts = thought + ([f" {message}\n"] if settings.message_tokens > 0 else [])
    texts.append(f" {1 + ACTION_WORDS.index(word)}\n" if settings.numbered_actions else f" {word}\n")
    if isinstance(action, Offer):
        for k, o in enumerate(action.outcome):
            texts.append(f" {o + 1}\n" if settings.numbered else f" {scenario.issues[k].options[o]}\n")
    return texts


class TeacherAgent:
    """The seller of one negotiation: a scripted negotiator's decisions, played through an ``HFAgent``."""

    def __init__(self, tokenizer: Any, teacher_spec: str, scenario: Scenario, seed: int,
                 settings: PromptSettings) -> None:
        self.sampler = TeacherSampler(tokenizer, teacher_spec)
        self.agent = HFAgent(self.sampler, scenario, "seller", settings, 1.0, f"teacher:{teacher_spec}")
        self.teacher = make_agent(teacher_spec, scenario, "seller", seed)
        self.spec = self.agent.spec

    @property
    def trajectory(self) -> Trajectory | None:
        return self.agent.trajectory

    @property
    def generated_texts(self) -> list[str]:
        return self.agent.generated_texts

    def describe(self) -> dict[str, Any]:
        return self.agent.describe()

    def turn(self, negotiation: Negotiation) -> Generator[SampleRequest, Sample, Reply]:
        reply = self.teacher.respond(negotiation)  # decided when the turn opens, from what the seller sees
        settings = self.agent.settings
        thought = self.agent.frame.thought
        self.sampler.queue(slot_texts(reply, self.agent.scenario, settings, thought.close if thought else None),
                           end_turn=not settings.cues)
        return (yield from self.agent.turn(negotiation))


def render_examples(tokenizer: Any, scenarios: list[Scenario], teacher: str, buyers: list[str],
                    settings: PromptSettings | None = None, seed: int = 0,
                    context: AgentContext | None = None) -> list[tuple[Game, Trajectory]]:
    """Play every scenario against every buyer (both openers) with the teacher as seller; the buyers are built in
    ``context`` (a training run's: its endpoints). A game that errored (a buyer's server down) is left out."""
    settings = settings or PromptSettings()
    games = []
    for i, s in enumerate(scenarios):
        for j, buyer in enumerate(buyers):
            for opener in ("seller", "buyer"):
                k = seed + 1000 * i + 10 * j + (opener == "buyer")
                agents = {"seller": TeacherAgent(tokenizer, teacher, s, k, settings),
                          "buyer": make_agent(buyer, s, "buyer", k + 7, context)}
                games.append(Game(Negotiation(s, ProtocolConfig(opener=opener)), agents))
    play_lockstep(games)
    return [(g, g.agents["seller"].trajectory) for g in games
            if g.agents["seller"].trajectory is not None and g.negotiation.ended_by != "error"]
