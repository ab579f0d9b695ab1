"""A negotiator behind an OpenAI-compatible chat endpoint (``openai:MODEL`` or ``openai:MODEL@ENDPOINT``).

It keeps the conversation as chat messages (the server applies its own template) and writes whole
free-form replies, which the parser reads; cues need token-level control and are for local models.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from haggler.agents.format.parse import parse_reply
from haggler.agents.format.prompts import observe, system_prompt
from haggler.core.protocol import Negotiation
from haggler.core.scenario import Scenario
from haggler.core.types import Reply, Side
from haggler.engine.backends.openai_api import ChatClient


@dataclass(frozen=True)
class ChatRequest:
    """One chat completion to run: an ``AsyncRequest``, which the rollout driver awaits concurrently."""

    client: ChatClient
    messages: list[dict[str, str]]
    temperature: float
    max_tokens: int

    async def run(self) -> str:
        return await self.client.chat(self.messages, self.temperature, self.max_tokens)


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
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt(scenario, side)}]

    def describe(self) -> dict[str, Any]:
        return {**self.client.describe(), "temperature": self.temperature, "max_tokens": self.max_tokens,
                "cues": False}

    def turn(self, negotiation: Negotiation) -> Generator[ChatRequest, str, Reply]:
        self.messages.append({"role": "user", "content": observe(negotiation, self.side)})
        text = yield ChatRequest(self.client, list(self.messages), self.temperature, self.max_tokens)
        self.messages.append({"role": "assistant", "content": text})
        return Reply(text, parse_reply(text, self.scenario))
