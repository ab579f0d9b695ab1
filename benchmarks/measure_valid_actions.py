"""How often does a local model, untrained, produce a valid action? (Issue target: >= 30% at T = 1.0.)

Plays N negotiations of the model as seller against a scripted Conceder buyer, with invalid actions
never ending a negotiation, and counts the seller's valid actions (offer, accept or walk away that the
engine accepted) over all its turns. Ends with one JSON line.

    .venv/bin/python benchmarks/measure_valid_actions.py [--seller hf:default] [--negotiations 20]
        [--temperature 1.0] [--no-cues] [--slots numbers|names|plain] [--actions words|numbers] [--message-tokens 40]
"""

from __future__ import annotations

import argparse
import collections
import json
import time

import torch

from haggler.agents import AgentContext, make_agent
from haggler.generate import generate_scenarios
from haggler.prompts import PromptSettings
from haggler.protocol import Negotiation, ProtocolConfig
from haggler.rollout import Game, play_lockstep
from haggler.types import Invalid


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seller", default="hf:default")
    p.add_argument("--negotiations", type=int, default=20)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--no-cues", action="store_true")
    p.add_argument("--slots", default="numbers")
    p.add_argument("--message-tokens", type=int, default=40)
    p.add_argument("--actions", default="words", help="the action cue: words or numbers")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    settings = PromptSettings(cues=not args.no_cues, slots=args.slots, actions=args.actions,
                              message_tokens=args.message_tokens)
    ctx = AgentContext(prompt=settings, temperature=args.temperature)
    games = []
    for i, s in enumerate(generate_scenarios(args.negotiations, 99, max_turns=args.turns)):
        neg = Negotiation(s, ProtocolConfig(opener="seller" if i % 2 == 0 else "buyer", max_invalid=10**6))
        games.append(Game(neg, {"seller": make_agent(args.seller, s, "seller", i, ctx),
                                "buyer": make_agent("scripted:conceder", s, "buyer", i, ctx)}))
    start = time.perf_counter()
    play_lockstep(games)
    wall = time.perf_counter() - start
    actions = [t.action for g in games for t in g.negotiation.turns if t.speaker == "seller"]
    kinds = collections.Counter(type(a).__name__ for a in actions)
    reasons = collections.Counter(a.reason.split(":")[0][:40] for a in actions if isinstance(a, Invalid))
    valid = 1 - kinds["Invalid"] / len(actions)
    figures = {"measure": "valid_actions", "seller": args.seller, "temperature": args.temperature,
               "cues": settings.cues, "slots": settings.slots, "actions": settings.actions,
               "message_tokens": settings.message_tokens,
               "turns": len(actions), "valid_rate": round(valid, 3), "by_kind": dict(kinds),
               "top_invalid_reasons": dict(reasons.most_common(5)), "wall_s": round(wall, 1)}
    print(f"{len(actions)} seller turns, {valid:.1%} valid: {dict(kinds)}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
