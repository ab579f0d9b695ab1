"""How often does a seller produce a valid action? The figure that says whether RL gets any signal.

Plays negotiations of the seller against a scripted buyer with invalid actions never ending a
negotiation (so every turn counts), and counts the seller's valid actions (an offer, accept or walk away
that the engine accepted) over all its turns.
"""

from __future__ import annotations

import collections
import time
from typing import Any

from haggler.agents.registry import AgentContext, make_agent
from haggler.scenarios.generate import generate_scenarios
from haggler.agents.format.prompts import PromptSettings
from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.engine.rollout import Game, play_lockstep
from haggler.core.types import Invalid

MEASURE_SEED = 99  # scenarios of their own: neither a training nor a demo evaluation seed


def valid_action_rate(seller: str, negotiations: int = 20, turns: int = 4, settings: PromptSettings | None = None,
                      temperature: float = 1.0, buyer: str = "scripted:conceder", seed: int = 0,
                      context: AgentContext | None = None) -> dict[str, Any]:
    import torch

    torch.manual_seed(seed)
    settings = settings or PromptSettings()
    ctx = context or AgentContext(prompt=settings, temperature=temperature, sample_seed=seed)
    games = []
    for i, s in enumerate(generate_scenarios(negotiations, MEASURE_SEED, max_turns=turns)):
        neg = Negotiation(s, ProtocolConfig(opener="seller" if i % 2 == 0 else "buyer", max_invalid=10**6))
        games.append(Game(neg, {"seller": make_agent(seller, s, "seller", i, ctx),
                                "buyer": make_agent(buyer, s, "buyer", i, ctx)}))
    start = time.perf_counter()
    play_lockstep(games)
    wall = time.perf_counter() - start
    actions = [t.action for g in games for t in g.negotiation.turns if t.speaker == "seller"]
    kinds = collections.Counter(type(a).__name__ for a in actions)
    reasons = collections.Counter(a.reason[:48] for a in actions if isinstance(a, Invalid))
    # a model haggler trained plays in its own recorded format: report the settings the seller really used
    used = getattr(games[0].agents["seller"], "settings", settings) if games else settings
    return {"seller": seller, "temperature": temperature, "cues": used.cues, "slots": used.slots,
            "actions": used.actions, "message_tokens": used.message_tokens, "negotiations": negotiations,
            "max_turns": turns, "turns": len(actions),
            "valid_rate": round(1 - kinds["Invalid"] / len(actions), 3) if actions else None,
            "by_kind": dict(kinds), "top_invalid_reasons": dict(reasons.most_common(8)), "wall_s": round(wall, 1)}
