"""How often does a local model, untrained, produce a valid action? (Issue target: >= 30% at T = 1.0.)

Plays N negotiations of the model as seller against a scripted Conceder buyer, with invalid actions
never ending a negotiation, and counts the seller's valid actions over all its turns
(``haggler.evaluation.valid_actions``). Ends with one JSON line.

    .venv/bin/python benchmarks/measure_valid_actions.py [--seller hf:default] [--negotiations 60] [--turns 4]
        [--temperature 1.0] [--no-cues] [--slots options|numbers|indexed|names|plain] [--actions options|numbers|words] [--message-tokens 0]
"""

from __future__ import annotations

import argparse
import json

from haggler.evaluation.valid_actions import valid_action_rate
from haggler.agents.format.prompts import PromptSettings


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seller", default="hf:default")
    p.add_argument("--negotiations", type=int, default=60)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--temperature", type=float, default=1.0)
    # prompt flags not given: the model's card decides (the embedded model's: no message slot)
    p.add_argument("--no-cues", dest="cues", action="store_const", const=False, default=None)
    p.add_argument("--slots", default=None)
    p.add_argument("--actions", default=None)
    p.add_argument("--message-tokens", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    given = {k: getattr(args, k) for k in ("cues", "slots", "actions", "message_tokens") if getattr(args, k) is not None}
    settings = PromptSettings(**given)
    figures = valid_action_rate(args.seller, args.negotiations, args.turns, settings, args.temperature, seed=args.seed)
    print(f"{figures['turns']} seller turns, {figures['valid_rate']:.1%} valid: {figures['by_kind']}")
    print(json.dumps({"measure": "valid_actions", **figures}))


if __name__ == "__main__":
    main()
