"""Is the engine's model the model? Checks of the hf backend against a fresh forward pass of transformers.

``ragged_parity`` drives several sequences through ``continue_batch`` the way negotiations do: each call
samples a turn, then the sequences grow by turns of different lengths written by "the environment", so their
caches sit at different offsets in the batch's buffers, with padding between a row's past and its new chunk.
Run past the sliding window, this is where a mask counted in buffer columns instead of positions goes wrong.
Two of the sequences begin alike for longer than the engine's shared-prefix threshold (read once for both, as an
evaluation's cells of one scenario are), and each has its own token budget, so rows leave the batch at
different steps. Every sampled token's log-probability is compared with ``log_softmax`` of a fresh, unbatched forward pass
of the whole sequence; the same sequences, seeded alike, are also played one at a time, which must sample the
same tokens (lockstep equals one at a time).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from haggler.engine.interfaces import Sequence


@dataclass(frozen=True)
class Parity:
    max_logprob_gap: float  # engine against a fresh forward, over every sampled token
    tokens: int  # sampled tokens compared
    longest: int  # the longest sequence, in tokens
    same_as_alone: bool  # batched and one-at-a-time runs sampled the same tokens
    max_alone_gap: float  # and their log-probabilities differ by at most this


def _play(model: Any, prompts: list[list[int]], rounds: int, turn_tokens: int, seed: int,
          temperature: float, alone: bool) -> tuple[list[Sequence], list[list[tuple[int, int, float]]]]:
    import torch

    rng = random.Random(seed)
    vocab = [i for i in range(len(model.tokenizer)) if i not in set(model.eos_ids)][:4000]
    seqs = [Sequence(ids=list(p), generator=torch.Generator(device=model.device).manual_seed(seed + k))
            for k, p in enumerate(prompts)]
    sampled: list[list[tuple[int, int, float]]] = [[] for _ in seqs]  # (position, token, logprob)
    for _ in range(rounds):
        starts = [len(s.ids) for s in seqs]
        groups = [[k] for k in range(len(seqs))] if alone else [list(range(len(seqs)))]
        for group in groups:
            budgets = [max(1, turn_tokens - k % 3) for k in group]  # rows leave the batch at different steps
            out = model.continue_batch([seqs[k] for k in group], budgets, temperature, stop_chars="")
            for k, sample in zip(group, out):
                sampled[k] += [(starts[k] + j, t, lp) for j, (t, lp) in enumerate(zip(sample.ids, sample.logprobs))]
        for s in seqs:  # the environment's turn: a different length for every sequence
            s.extend([rng.choice(vocab) for _ in range(rng.randint(2, 13))])
    return seqs, sampled


def ragged_parity(model: Any, n: int = 4, rounds: int = 6, turn_tokens: int = 5, prompt: int = 9, seed: int = 0,
                  temperature: float = 1.0) -> Parity:
    """``model``: an ``HFModel``. ``n`` (at least 2) sequences with prompts of ``prompt`` to ``prompt + 3n`` tokens,
    the first two after a common start of ``SHARED_PREFIX + 6`` tokens."""
    import torch

    from haggler.engine.backends.hf.batch import SHARED_PREFIX

    rng = random.Random(seed)
    vocab = [i for i in range(len(model.tokenizer)) if i not in set(model.eos_ids)][:4000]
    common = [rng.choice(vocab) for _ in range(SHARED_PREFIX + 6)]
    prompts = [(common if k < 2 else []) + [rng.choice(vocab) for _ in range(prompt + 3 * k)] for k in range(n)]
    seqs, sampled = _play(model, prompts, rounds, turn_tokens, seed, temperature, alone=False)
    gap, count = 0.0, 0
    for s, rows in zip(seqs, sampled):
        ids = torch.tensor([s.ids], device=model.device)
        with torch.no_grad():
            logits = model.model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits / temperature, -1)
        for pos, tok, lp in rows:
            gap = max(gap, abs(float(logp[pos - 1, tok]) - lp))
            count += 1
    _, alone = _play(model, prompts, rounds, turn_tokens, seed, temperature, alone=True)
    same = all([t for _, t, _ in a] == [t for _, t, _ in b] for a, b in zip(sampled, alone))
    alone_gap = max((abs(x[2] - y[2]) for a, b in zip(sampled, alone) for x, y in zip(a, b)), default=0.0)
    return Parity(gap, count, max(len(s.ids) for s in seqs), same, alone_gap)
