"""A negotiator behind an OpenAI-compatible chat endpoint (``openai:MODEL`` or ``openai:MODEL@ENDPOINT``).

It keeps the conversation as chat messages (the server applies its own template). In the text format (the
default) it writes whole free-form replies, which the parser reads; cues need token-level control and are
for local models. With its endpoint's ``action_format: tools`` it acts through function calling instead
(``format/tools.py``): every request carries the three functions, the call is the action and its
``message`` argument the message, and the engine's reading of a call is returned to the model as the
call's result before the next turn. Each agent counts its calls and the tokens they used, for the record.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from haggler.agents.format.parse import parse_reply
from haggler.agents.format.prompts import observe, system_prompt
from haggler.agents.format.tools import describe_call, read_tool_calls, tool_specs
from haggler.core.protocol import Negotiation
from haggler.core.scenario import Scenario
from haggler.core.types import Reply, Side, other
from haggler.engine.backends.openai_api import ChatClient, ChatReply


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to run: an ``AsyncRequest``, which the rollout driver awaits concurrently."""

    client: ChatClient
    messages: list[dict[str, Any]]
    temperature: float
    max_tokens: int
    tools: list[dict[str, Any]] | None = None
    seed: int | None = None  # sent where the endpoint accepts one (provider-side sampling stays best-effort)

    async def run(self) -> ChatReply:
        return await self.client.chat(self.messages, self.temperature, self.max_tokens, self.tools, self.seed)


def tools_prompt(scenario: Scenario, side: Side) -> str:
    """The system prompt of an agent that acts through function calling."""
    counterpart = other(side)
    return "\n".join([
        system_prompt(scenario, side, cued=True),
        f"Act by calling exactly one function each turn: make_offer (an option for every issue), accept (the"
        f" {counterpart}'s last offer) or walk_away. Put what you say to the {counterpart} in its message argument.",
    ])


class APIAgent:
    """One side of one negotiation, played by an API model: a ``TurnTakingAgent`` whose turns ask one
    ``ChatRequest`` each."""

    def __init__(self, client: ChatClient, scenario: Scenario, side: Side, temperature: float, max_tokens: int,
                 spec: str) -> None:
        self.client = client
        self.scenario = scenario
        self.side = side
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.spec = spec
        self.action_format = client.endpoint.action_format
        self.tools = tool_specs(scenario) if self.action_format == "tools" else None
        prompt = tools_prompt(scenario, side) if self.tools else system_prompt(scenario, side)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": prompt}]
        self.usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        self._open_calls: list[str] = []  # ids of the last reply's tool calls, answered before the next turn
        self.seed: int | None = None  # set by the registry from the run's sampling rule: each request its own

    def describe(self) -> dict[str, Any]:
        out = {**self.client.describe(), "temperature": self.temperature, "max_tokens": self.max_tokens,
               "cues": False, "action_format": self.action_format, "usage": dict(self.usage),
               "seed": self.seed, "seed_sent": self.seed is not None and self.client.endpoint.send_seed}
        if self.tools:
            out["tool_choice"] = self.client.tool_choice or self.client.endpoint.tool_choice
        return out

    def _answer_calls(self, negotiation: Negotiation) -> None:
        """Every tool call of the last reply gets its result: the engine's reading of this side's last turn."""
        if not self._open_calls:
            return
        mine = [t for t in negotiation.turns if t.speaker == self.side]
        result = describe_call(mine[-1].action, self.scenario) if mine else "Not recorded."
        if len(self._open_calls) > 1:
            result = "Not recorded: call exactly one function per turn."
        self.messages += [{"role": "tool", "tool_call_id": i, "content": result} for i in self._open_calls]
        self._open_calls = []

    def _count(self, reply: ChatReply) -> None:
        self.usage["calls"] += 1
        self.usage["prompt_tokens"] += reply.usage.prompt_tokens
        self.usage["completion_tokens"] += reply.usage.completion_tokens
        self.usage["cached_tokens"] += reply.usage.cached_tokens

    def turn(self, negotiation: Negotiation) -> Generator[ChatRequest, ChatReply, Reply]:
        self._answer_calls(negotiation)
        self.messages.append({"role": "user", "content": observe(negotiation, self.side)})
        seed = None if self.seed is None else (self.seed + self.usage["calls"]) % 2**31  # one per request
        reply = yield ChatRequest(self.client, list(self.messages), self.temperature, self.max_tokens, self.tools, seed)
        self._count(reply)
        if self.tools is None:
            self.messages.append({"role": "assistant", "content": reply.content})
            return Reply(reply.content, parse_reply(reply.content, self.scenario))
        if reply.tool_calls:
            self.messages.append({"role": "assistant", "content": reply.content or None,
                                  "tool_calls": reply.tool_calls})
        else:
            self.messages.append({"role": "assistant", "content": reply.content})
        self._open_calls = [str(c.get("id")) for c in reply.tool_calls]
        message, action = read_tool_calls(reply.tool_calls, reply.content, self.scenario)
        return Reply(message, action)
