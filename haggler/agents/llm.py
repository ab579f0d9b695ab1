"""A negotiator behind a local transformers model (``hf:NAME``), built token-in/token-out.

The agent keeps one growing token sequence per negotiation: the chat-templated system prompt and first
user message (the prompt), then, turn after turn, the tokens it sampled and the tokens the environment
wrote (the other side's turns, template tokens, cues). Sampled ids are appended exactly as sampled and
history is never re-rendered, so the sequence is exactly what the model saw, and its ``Trajectory``
(prompt ids, completion ids, a mask of sampled tokens, the sampler's log-probabilities) is ready for RL.

Chat formatting comes from the tokenizer's own template, probed once with placeholders (``engine/chat.py``):
the text that closes an assistant turn and opens the next user turn, where the system prompt goes, the token
that ends a turn, the thinking mode. No model family is special-cased.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from haggler.agents.format.parse import parse_reply, read_action_slot, read_slot
from haggler.agents.format.prompts import (MESSAGE_CUE, PromptSettings, accept_note, action_cue, low_options, observe,
                                           slot_cue, system_prompt_for)
from haggler.core.protocol import Negotiation
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Action, Invalid, Offer, Reply, Side, WalkAway
from haggler.engine.chat import chat_format
from haggler.engine.interfaces import Sample, Sampler, SampleRequest, Sequence


@dataclass
class Trajectory:
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)  # 1: sampled by the agent; 0: written by the environment
    logprobs: list[float] = field(default_factory=list)  # the sampler's, one per completion token (0.0 where mask is 0)

    def add(self, ids: list[int], sampled: bool, logprobs: list[float] | None = None) -> None:
        self.completion_ids.extend(ids)
        self.env_mask.extend([1 if sampled else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


class HFAgent:
    """One side of one negotiation, played by a local model. ``turn`` is a generator of ``SampleRequest``s."""

    def __init__(self, model: Sampler, scenario: Scenario, side: Side, settings: PromptSettings,
                 temperature: float, spec: str) -> None:
        self.model = model
        self.tokenizer = model.tokenizer
        self.scenario = scenario
        self.side = side
        self.settings = settings
        self.temperature = temperature
        self.spec = spec
        self.frame = chat_format(self.tokenizer, settings.thinking)
        self.sequence: Sequence | None = None
        self.trajectory: Trajectory | None = None
        self.generated_texts: list[str] = []  # each sampled segment, decoded, in order
        self.sample_seed: int | None = None  # set: this agent samples from a stream of its own (see AgentContext)

    def release(self) -> None:
        """Drop the key-value cache (the largest thing a finished negotiation holds); keep the tokens."""
        if self.sequence is not None:
            self.sequence.cache, self.sequence.cached = None, 0

    def describe(self) -> dict[str, Any]:
        # "prompt": the whole format this agent played, as resolved from its model card; the run's own settings
        # record only what was asked for, and a trained model plays the format it was trained in
        return {**self.model.describe(), "temperature": self.temperature, "cues": self.settings.cues,
                "slots": self.settings.slots,
                "max_tokens": self.settings.reply_tokens if not self.settings.cues else
                {"message": self.settings.message_tokens, "action": self.settings.action_tokens,
                 "slot": self.settings.slot_tokens},
                "prompt": self.settings.model_dump()}

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _env(self, text: str) -> None:
        ids = self._encode(text)
        self.sequence.extend(ids)
        self.trajectory.add(ids, sampled=False)

    def _first_prompt(self, negotiation: Negotiation) -> list[int]:
        """The chat-templated system prompt and first user message, through the generation prompt."""
        return self.frame.first_prompt(self.tokenizer, system_prompt_for(self.scenario, self.side, self.settings),
                                       observe(negotiation, self.side, self.settings))

    def final_trajectory(self, negotiation: Negotiation) -> Trajectory:
        """What a trainer gets of this agent once ``negotiation`` is over: its trajectory, or, if it never
        spoke (the other side ended it first), the prompt it would have read with one end-of-turn token
        that it did not sample (nothing of its own to train on)."""
        if self.trajectory is not None:
            return self.trajectory
        empty = Trajectory(prompt_ids=self._first_prompt(negotiation))
        empty.add([self.frame.end_of_turn], sampled=False)
        return empty

    def _open_turn(self, negotiation: Negotiation) -> None:
        if self.sequence is None:
            ids = self._first_prompt(negotiation)
            self.sequence = Sequence(ids=list(ids))
            if self.sample_seed is not None:
                import torch  # here: the agents stay importable without torch; a seeded agent has a local model

                self.sequence.generator = torch.Generator(device=getattr(self.model, "device", "cpu")).manual_seed(self.sample_seed)
            self.trajectory = Trajectory(prompt_ids=list(ids))
        else:
            self._env(self.frame.open_user + observe(negotiation, self.side, self.settings) + self.frame.after_user)

    def _sample(self, max_new: int, stop_chars: str, slot: str,
                stop_ids: frozenset[int] = frozenset()) -> Generator[SampleRequest, Sample, tuple[str, Sample]]:
        """Fill one slot ("thought", "reply", "message", "action" or "issue:K") with the model's own tokens."""
        sample = yield SampleRequest(self.model, self.sequence, max_new, self.temperature, stop_chars, stop_ids)
        self.trajectory.add(sample.ids, sampled=True, logprobs=sample.logprobs)
        self.generated_texts.append(self.tokenizer.decode(sample.ids))
        # The end-of-turn token closes the slot; it is not part of the answer ("3<|im_end|>" reads as "3").
        said = sample.ids[:-1] if sample.stopped == "eos" and sample.ids else sample.ids
        return self.tokenizer.decode(said), sample

    def _close_turn(self, last: Sample | None) -> None:
        # Only the template's own end of turn closes it: a turn that stopped at another EOS id (Gemma's <eos>)
        # still gets the template's close, so the next user turn opens where the template would open it
        if last is None or not last.ids or last.ids[-1] != self.frame.end_of_turn:
            self._env(self.frame.close_assistant)

    def _think(self) -> Generator[SampleRequest, Sample, str]:
        """The thought before the answer, in the template's markers: the environment opens it, the model writes
        it until its closing token (or its budget, when the environment closes it). Its tokens are the model's."""
        thought = self.frame.thought
        if thought.open:  # empty where the generation prompt opened it already
            self._env(thought.open)
        said, sample = yield from self._sample(self.settings.thought_tokens, "", "thought", frozenset({thought.close_id}))
        if sample.ids and sample.ids[-1] == thought.close_id:
            said = self.tokenizer.decode(sample.ids[:-1])
        else:
            self._env(thought.close)
        return said.strip()

    def turn(self, negotiation: Negotiation) -> Generator[SampleRequest, Sample, Reply]:
        self._open_turn(negotiation)
        thought = (yield from self._think()) if self.frame.thought is not None else ""
        if not self.settings.cues:
            text, last = yield from self._sample(self.settings.reply_tokens, "", "reply")
            self._close_turn(last)
            return Reply(text, parse_reply(text, self.scenario), thought)
        # Cues on: the environment writes the skeleton, the model fills one slot at a time, and each
        # slot is read on its own (a number or a name for an issue, one keyword for the action).
        text = ""
        last: Sample | None = None

        def cue(s: str) -> None:
            nonlocal text
            s = s.removeprefix("\n") if (not text or text.endswith("\n")) else s
            self._env(s)
            text += s

        if self.settings.message_tokens > 0:  # 0: no free text at all (small models derail on their own chatter)
            cue(MESSAGE_CUE)
            segment, last = yield from self._sample(self.settings.message_tokens, "\n", "message")
            text += segment
        # A slot ends at a newline or at the end-of-turn token alike ("1<|im_end|>" answers "1"): the
        # environment owns the skeleton and asks for the next slot either way, so an offer is not lost
        # because the model closed its turn after naming the action. The sampled token stays in the sequence.
        action: Action | None = None
        cue(action_cue(self.settings, accept_note(negotiation, self.side, self.settings)))
        segment, last = yield from self._sample(self.settings.action_tokens, "\n", "action")
        text += segment
        kind, why = read_action_slot(segment, self.settings.numbered_actions)
        if kind is None:
            action = Invalid(why)
        elif kind == "accept":
            action = Accept()
        elif kind == "walk_away":
            action = WalkAway()
        if action is None:  # an offer: one cued slot per issue
            chosen: list[int] = []
            for k, issue in enumerate(self.scenario.issues):
                low = (low_options(self.scenario, self.side, tuple(chosen)) if self.settings.offer_verdict
                       else frozenset[int]())
                cue(slot_cue(self.scenario, k, self.settings, low))
                segment, last = yield from self._sample(self.settings.slot_tokens, "\n", f"issue:{k}")
                text += segment
                option, why = read_slot(segment, issue.options, self.settings.numbered)
                if option is None:
                    action = Invalid(f"issue {issue.name!r}: {why}")
                    break
                chosen.append(option)
            else:
                action = Offer(tuple(chosen))
        self._close_turn(last)
        return Reply(text, action, thought)

    def respond(self, negotiation: Negotiation) -> Reply:
        """Play one turn alone (no batching with other negotiations)."""
        gen = self.turn(negotiation)
        try:
            request = next(gen)
        except StopIteration as done:
            return done.value
        while True:
            (sample,) = request.model.continue_batch([request.sequence], request.max_new_tokens,
                                                     request.temperature, request.stop_chars, **request.stops())
            try:
                request = gen.send(sample)
            except StopIteration as done:
                return done.value
