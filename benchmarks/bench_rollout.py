"""Local-model rollouts: 16 negotiations, SmolLM2 seller against SmolLM2 buyer, on this machine.

Plays the same 16 negotiations twice in one process (each negotiation samples from a seeded stream of its
own, so both modes play the same games): together ("lockstep": every turn waiting on the model joins its
running batch, continuous batching) and one negotiation at a time, and prints generated tokens per second
for both and their ratio (target: lockstep at least 4x), with the seconds spent reading prompts (prefill)
and sampling (decode). Also reports how many prompt tokens were
read per generated token, with the key-value cache kept across turns (the default) and, for
comparison, re-reading each negotiation in full at every call. Ends with one JSON line.

The defaults are the study's: 10 turns (``configs/paper.yaml``'s grid) and the library's default message
length. The ratio depends on them: reading prompts (prefill) is compute-bound on a CPU and gains nothing
from batching, while sampling one token for one sequence is bound by reading the weights and gains almost
the batch size; the more of a negotiation is sampled rather than read, the more lockstep gains.

    .venv/bin/python benchmarks/bench_rollout.py [--negotiations 16] [--turns 10] [--message-tokens 40]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from haggler.agents.registry import AgentContext, make_agent
from haggler.engine.backends.hf import HFModel
from haggler.scenarios.generate import generate_scenarios
from haggler.agents.format.prompts import PromptSettings
from haggler.core.protocol import Negotiation, ProtocolConfig
from haggler.engine.rollout import Game, play_lockstep


def games(model: HFModel, n: int, turns: int, settings: PromptSettings) -> list[Game]:
    # each negotiation samples from its own seeded stream: both modes play the same negotiations
    ctx = AgentContext(prompt=settings, temperature=1.0, sample_seed=0)
    ctx.models["default"] = model
    out = []
    for i, s in enumerate(generate_scenarios(n, 2026, max_turns=turns)):
        neg = Negotiation(s, ProtocolConfig(opener="seller" if i % 2 == 0 else "buyer", max_invalid=turns))
        out.append(Game(neg, {side: make_agent("hf:default", s, side, i, ctx) for side in ("seller", "buyer")}))
    return out


def _tokens(game: Game) -> dict[str, list[int] | None]:
    return {side: a.sequence.ids if a.sequence is not None else None for side, a in game.agents.items()}


def measure(model: HFModel, batches: list[list[Game]]) -> dict[str, float]:
    before = dict(model.stats)
    start = time.perf_counter()
    for batch in batches:
        play_lockstep(batch)
    wall = time.perf_counter() - start
    generated = model.stats["generated_tokens"] - before["generated_tokens"]
    prompt = model.stats["prompt_tokens"] - before["prompt_tokens"]
    return {"wall_s": round(wall, 1), "generated_tokens": generated, "tokens_per_s": round(generated / wall, 2),
            "prompt_tokens_per_generated": round(prompt / max(generated, 1), 2),
            "calls": model.stats["calls"] - before["calls"], "prefills": model.stats["prefills"] - before["prefills"],
            "decode_steps": model.stats["steps"] - before["steps"],
            "prefill_s": round(model.stats["prefill_s"] - before["prefill_s"], 1),
            "decode_s": round(model.stats["decode_s"] - before["decode_s"], 1)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--negotiations", type=int, default=16)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--message-tokens", type=int, default=PromptSettings().message_tokens)
    args = p.parse_args()
    torch.manual_seed(0)
    settings = PromptSettings(message_tokens=args.message_tokens)
    model = HFModel("default")
    together = games(model, args.negotiations, args.turns, settings)
    lockstep = measure(model, [together])
    print("lockstep", json.dumps(lockstep), flush=True)
    apart = games(model, args.negotiations, args.turns, settings)
    alone = measure(model, [[g] for g in apart])
    # float differences between a batched and a lone forward pass can still flip a rare sample
    same = sum(_tokens(a) == _tokens(b) for a, b in zip(together, apart))
    model.kv_reuse = False
    no_cache = measure(model, [games(model, max(2, args.negotiations // 4), args.turns, settings)])
    ratio = lockstep["tokens_per_s"] / alone["tokens_per_s"]
    figures = {"benchmark": "rollout", "negotiations": args.negotiations, "turns": args.turns,
               "message_tokens": args.message_tokens,
               "lockstep": lockstep, "one_at_a_time": alone, "identical_negotiations": same, "ratio": round(ratio, 2), "target_ratio": 4,
               "kv_cache_reused_across_turns": True, "without_kv_reuse": no_cache}
    print(f"lockstep: {lockstep['tokens_per_s']} generated tokens/s; one at a time: {alone['tokens_per_s']};"
          f" ratio {ratio:.2f}x (target >= 4x)")
    print(f"prompt tokens read per generated token: {lockstep['prompt_tokens_per_generated']} with the cache kept"
          f" across turns, {no_cache['prompt_tokens_per_generated']} re-reading everything")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
