"""API calls, tokens and cost: what results records say was spent, and what a run will spend at most.

Every ``openai:`` agent records its calls and the tokens its replies reported (``agents[side]["usage"]``)
and its endpoint's prices per million tokens, when the endpoints file gives them (``price_per_mtok``, or
the endpoint as the record's settings keep it). A record's cost is its API agents' tokens at those prices;
cached prompt tokens cost the cached price. Calls on an endpoint without prices are counted, not priced.

``estimate`` works before anything is spent: for every negotiation and every API side, calls as if the
negotiation runs to its turn limit, and tokens per call from the stated ``Assumptions``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from haggler.agents.api import tools_prompt
from haggler.agents.format.prompts import system_prompt
from haggler.agents.format.tools import tool_specs
from haggler.agents.registry import check_spec, split_openai, split_spec
from haggler.core.scenario import Scenario, load_scenarios
from haggler.engine.backends.openai_api import CHARS_PER_TOKEN, Endpoint
from haggler.evaluation.grid import load_grid
from haggler.evaluation.results import Record, read_latest

_PRICE_KEYS = {"in": "price_in_per_mtok", "out": "price_out_per_mtok", "cached_in": "price_cached_in_per_mtok"}


@dataclass
class Usage:
    """Calls, tokens and cost summed over negotiations (``cost`` covers the priced calls only)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    priced_calls: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def priced(self) -> bool:
        """Some calls were priced (else the cost is unknown, not zero)."""
        return self.priced_calls > 0

    def add(self, other: Usage) -> None:
        for k in ("calls", "prompt_tokens", "completion_tokens", "cached_tokens", "cost", "priced_calls"):
            setattr(self, k, getattr(self, k) + getattr(other, k))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "tokens": self.tokens, "cost": self.cost if self.priced else None,
                "unpriced_calls": self.calls - self.priced_calls}


def _prices(agent: dict[str, Any], settings: dict[str, Any]) -> dict[str, float] | None:
    if agent.get("price_per_mtok"):
        return agent["price_per_mtok"]
    endpoint = (settings.get("endpoints") or {}).get(agent.get("endpoint"))
    if not endpoint or (endpoint.get("price_in_per_mtok") is None and endpoint.get("price_out_per_mtok") is None):
        return None
    price_in = endpoint.get("price_in_per_mtok") or 0.0
    cached = endpoint.get("price_cached_in_per_mtok")
    return {"in": price_in, "out": endpoint.get("price_out_per_mtok") or 0.0,
            "cached_in": price_in if cached is None else cached}


def price(usage: dict[str, int], prices: dict[str, float]) -> float:
    """Dollars for these tokens at these prices per million tokens."""
    cached = usage.get("cached_tokens", 0)
    fresh = usage.get("prompt_tokens", 0) - cached
    return (fresh * prices["in"] + cached * prices["cached_in"] + usage.get("completion_tokens", 0) * prices["out"]) / 1e6


def _unwrap(agent: dict[str, Any]) -> dict[str, Any]:
    """An agent that wraps another (an adversary) records the wrapped one's keys under a prefix
    (``offers_usage``, ``offers_endpoint``): read those as the agent's own."""
    if "usage" in agent:
        return agent
    prefix = next((k[: -len("usage")] for k, v in agent.items() if k.endswith("_usage") and isinstance(v, dict)), None)
    return agent if prefix is None else {k[len(prefix):]: v for k, v in agent.items() if k.startswith(prefix)}


def agent_usage(agent: dict[str, Any], settings: dict[str, Any]) -> Usage:
    """One side's usage in one negotiation (zero for an agent that calls no API)."""
    agent = _unwrap(agent)
    used = agent.get("usage") or {}
    out = Usage(calls=int(used.get("calls", 0)), prompt_tokens=int(used.get("prompt_tokens", 0)),
                completion_tokens=int(used.get("completion_tokens", 0)), cached_tokens=int(used.get("cached_tokens", 0)))
    prices = _prices(agent, settings) if out.calls else None
    if prices is not None:
        out.cost = price(used, prices)
        out.priced_calls = out.calls
    return out


def record_usage(record: Record, sides: Iterable[str] = ("seller", "buyer")) -> Usage:
    """Both sides' API usage in one negotiation (errored ones too: their calls were made)."""
    total = Usage()
    for side in sides:
        total.add(agent_usage((record.agents or {}).get(side) or {}, record.settings or {}))
    return total


def total_usage(records: Iterable[Record]) -> Usage:
    total = Usage()
    for r in records:
        total.add(record_usage(r))
    return total


def usage_by_endpoint(records: Iterable[Record]) -> dict[str, Usage]:
    out: dict[str, Usage] = defaultdict(Usage)
    for r in records:
        for side, agent in (r.agents or {}).items():
            agent = _unwrap(agent or {})
            if agent.get("usage"):
                out[agent.get("endpoint", "?")].add(agent_usage(agent, r.settings or {}))
    return dict(out)


# ---- before a run: an estimate ----

@dataclass(frozen=True)
class Assumptions:
    """What the estimate takes a turn to cost: stated with every estimate."""

    observation_tokens: int = 80  # the user message before each turn, besides the other side's message in it
    reply_tokens: int = 100  # each reply (at most the reply budget), and each message of the other side relayed
    message_tokens: int = 4  # each chat message's own overhead (role, separators)
    tool_result_tokens: int = 20  # with tools: each call's result, returned before the next turn

    def describe(self, reply_budget: int) -> str:
        reply = min(self.reply_tokens, reply_budget)
        return (f"calls as if every negotiation runs to its turn limit; tokens per call: the system prompt (and with"
                f" tools the tool schemas) as measured at {CHARS_PER_TOKEN} characters a token, {self.observation_tokens}"
                f" per observation plus the other side's message relayed ({reply}), {reply} per reply (the reply budget"
                f" is {reply_budget}), {self.tool_result_tokens} per tool result, {self.message_tokens} per message, the"
                " whole conversation resent each turn, no cached-token discount")


@dataclass
class EndpointEstimate:
    negotiations: int = 0
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prices: dict[str, float] | None = None
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None

    def minutes(self) -> tuple[float, str] | None:
        """The least time the endpoint's budgets allow for these calls, and which budget binds."""
        paces = [(self.calls / self.requests_per_minute, f"{self.requests_per_minute:g} requests/min")
                 if self.requests_per_minute else None,
                 ((self.prompt_tokens + self.completion_tokens) / self.tokens_per_minute,
                  f"{self.tokens_per_minute:g} tokens/min") if self.tokens_per_minute else None]
        return max((p for p in paces if p), default=None)

    @property
    def cost(self) -> float | None:
        if self.prices is None:
            return None
        return price({"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}, self.prices)


@dataclass
class Estimate:
    assumptions: str
    negotiations: int = 0  # negotiations to play, API or not
    endpoints: dict[str, EndpointEstimate] = field(default_factory=dict)


def dollars(x: float) -> str:
    return f"${x:,.2f}" if x >= 1 else f"${x:.4f}"


def _conversation(scenario: Scenario, side: str, tools: bool, turns: int, a: Assumptions, reply: int) -> int:
    """Prompt tokens over ``turns`` calls of one side: each call resends the conversation so far."""
    prompt = tools_prompt(scenario, side) if tools else system_prompt(scenario, side)
    fixed = len(prompt) // CHARS_PER_TOKEN + a.message_tokens
    if tools:
        fixed += len(json.dumps(tool_specs(scenario))) // CHARS_PER_TOKEN
    observation = a.observation_tokens + reply + a.message_tokens
    answered = reply + a.message_tokens + (a.tool_result_tokens + a.message_tokens if tools else 0)
    return sum(fixed + k * observation + (k - 1) * answered for k in range(1, turns + 1))


def estimate(plays: Iterable[tuple[Scenario, str, str, str]], endpoints: dict[str, Endpoint], reply_budget: int,
             assumptions: Assumptions | None = None) -> Estimate:
    """``plays``: (scenario, seller spec, buyer spec, opener) per negotiation to play."""
    a = assumptions or Assumptions()
    reply = min(a.reply_tokens, reply_budget)
    out = Estimate(a.describe(reply_budget))
    cache: dict[tuple, int] = {}
    for scenario, seller, buyer, opener in plays:
        out.negotiations += 1
        for side, spec in (("seller", seller), ("buyer", buyer)):
            kind, name = split_spec(spec)
            if kind == "adversary" and "+" in name:  # an adversary acts through the buyer it wraps
                kind, name = split_spec(name.partition("+")[2])
            if kind != "openai":
                continue
            endpoint = endpoints.get(split_openai(name)[1]) or Endpoint(name=split_openai(name)[1])
            turns = math.ceil(scenario.max_turns / 2) if side == opener else scenario.max_turns // 2
            tools = endpoint.action_format == "tools"
            key = (scenario.id, side, tools, turns)
            if key not in cache:
                cache[key] = _conversation(scenario, side, tools, turns, a, reply)
            row = out.endpoints.setdefault(endpoint.name, EndpointEstimate(
                prices=endpoint.prices(), requests_per_minute=endpoint.requests_per_minute,
                tokens_per_minute=endpoint.tokens_per_minute))
            row.negotiations += 1
            row.calls += turns
            row.prompt_tokens += cache[key]
            row.completion_tokens += turns * reply
    return out


def render_estimate(est: Estimate) -> str:
    if not est.endpoints:
        return ("API: no negotiation left to play" if not est.negotiations else
                f"API: no openai: agent in these {est.negotiations} negotiations") + "; nothing to spend"
    lines = [f"API estimate for {est.negotiations} negotiations ({est.assumptions}):"]
    total = 0.0
    for name, e in est.endpoints.items():
        cost = e.cost
        total += cost or 0.0
        pace = f"; at least {e.minutes()[0]:.1f} min at {e.minutes()[1]}" if e.minutes() else ""
        lines.append(f"  endpoint {name}: {e.negotiations} agents (negotiation sides), {e.calls} calls, {e.prompt_tokens:,} prompt"
                     f" + {e.completion_tokens:,} completion tokens, cost "
                     f"{'not priced' if cost is None else dollars(cost)}{pace}")
    if any(e.prices for e in est.endpoints.values()):
        lines.append(f"  total priced cost: {dollars(total)}")
    return "\n".join(lines)


def estimate_run(grid_path: Any, scenarios_path: Any, seller: str, out_path: Any, reply_budget: int,
                 endpoints: dict[str, Endpoint]) -> Estimate:
    """What ``haggler run`` would spend: the cells this seller has not finished in ``out_path`` (which is
    read, never written), every spec checked as a run checks them."""
    check_spec(seller, endpoints)
    cells = load_grid(grid_path)
    scenarios = load_scenarios(scenarios_path)
    for buyer in sorted({c.buyer for c in cells}):
        check_spec(buyer, endpoints)
    done = {cid for (s, cid), r in read_latest(out_path).items() if s == seller and r.ended_by != "error"}
    plays = [(scenarios[c.scenario_id], seller, c.buyer, c.opener) for c in cells if c.cell_id not in done]
    return estimate(plays, endpoints, reply_budget)
