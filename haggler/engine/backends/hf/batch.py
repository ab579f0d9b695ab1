"""A running batch: sequences that decode together, one token each per step, joining and leaving at any step.

Every row's cache is a contiguous run of columns ending at the current column ``c``; the buffers'
columns are one timeline, with each row's earlier columns masked out. A sequence joins at a step
boundary: its unread tokens are read in a prefill pass (grouped with others of similar length so
padding stays small), its first token is sampled from that pass, and its cache is copied into a free
row. A sequence that finishes takes its cache out and frees the row. Rows a finished sequence left
are dropped once half the batch is free, and columns no row needs any more are cut off.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from haggler.engine.backends.hf.cache import buffered_cache, buffers, padded_past
from haggler.engine.backends.hf.layout import ModelLayout
from haggler.engine.interfaces import Sample, Sequence


class Decoder(Protocol):
    """What a batch needs of its model (``HFModel`` is one)."""

    model: Any  # the torch module
    layout: ModelLayout  # its layers, as the caches and masks must know them
    device: str
    pad_id: int
    kv_reuse: bool  # off: every sequence is read in full each call, and leaves without a cache
    stats: dict[str, Any]

    def next_token_logits(self, input_ids: Any, attention_mask: Any, position_ids: Any, cache: Any) -> Any: ...


@dataclass(eq=False)
class Job:
    """One sequence to continue: its budget and sampling rules, what it has sampled, where its answer goes."""

    seq: Sequence
    budget: int
    temperature: float
    stop: list[bool]
    eos: frozenset[int]
    generator: Any  # the caller's shared stream, for sequences without one of their own
    done: Callable[[Sample], None]
    fail: Callable[[BaseException], None]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stopped: str = ""
    start: int = 0  # first column of its keys and values in the running batch's buffers
    position: int = 0  # position id of the token it feeds next
    answered: bool = False

    def take(self, token: int, logprob: float) -> bool:
        """Record a sampled token; True when the continuation is complete."""
        self.ids.append(token)
        self.logprobs.append(logprob)
        if self.stop[token]:
            self.stopped = "eos" if token in self.eos else "stop"
        elif len(self.ids) >= self.budget:
            self.stopped = "length"
        return bool(self.stopped)

    def finish(self, cache: list[tuple[Any, Any]] | None) -> None:
        """Hand the sequence its tokens and the cache of everything fed (all but the last sampled token)."""
        self.seq.ids.extend(self.ids)
        self.seq.cache = cache
        self.seq.cached = len(self.seq.ids) - 1 if cache is not None else 0
        self.answered = True
        self.done(Sample(ids=self.ids, logprobs=self.logprobs, stopped=self.stopped))

    def give_up(self, err: BaseException) -> None:
        if not self.answered:
            self.answered = True
            self.fail(err)


# A prefill pass reads at most this many tokens (rows x the longest unread stretch): on a 2-core CPU, SmolLM2-135M
# read 500 tokens/s in passes of 4 x 500 tokens, 410 in 8 x 500, 375 in 96 x 300, and a large pass's activations
# were the rollout's memory peak.
PREFILL_TOKENS = 2048
# Fewest tokens that several new sequences must share at their start to be read once for all of them.
SHARED_PREFIX = 64


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _prefix_groups(common: list[int], limit: list[int], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """Runs ``lo:hi`` of sorted sequences to read a shared prefix for: (lo, hi, shared length). ``common[i]`` is
    the common prefix of sequences i and i + 1, ``limit[i]`` the most sequence i may share (all but its last
    token, which a prefill must read to sample). A run shares its least common prefix; it is split where that
    is smallest when its parts together save more tokens."""
    if hi - lo < 2:
        return []
    n = min(min(common[lo: hi - 1]), min(limit[lo:hi]))
    whole = [(lo, hi, n)] if n >= SHARED_PREFIX else []
    cuts = [i + 1 for i in range(lo, hi - 1) if common[i] == min(common[lo: hi - 1])]
    if not cuts or min(common[lo: hi - 1]) > n:  # the limit, not a split point, bounds the share
        return whole
    parts = []
    for a, b in zip([lo] + cuts, cuts + [hi]):
        parts += _prefix_groups(common, limit, a, b)

    def saved(groups: list[tuple[int, int, int]]) -> int:
        return sum((b - a - 1) * k for a, b, k in groups)

    return parts if saved(parts) > saved(whole) else whole


def _snug(lengths: list[int]) -> bool:
    """Do these rows waste little when padded to the longest (a quarter of the real tokens, plus a little)?"""
    return max(lengths) * len(lengths) <= 1.25 * sum(lengths) + 8 * len(lengths)


def layout(chunks: list[list[int]], keep: list[int], pad_id: int) -> tuple[Any, Any]:
    """Input ids and attention mask of a prefill: each row is [padding | cached past] [padding | chunk].
    Padding is masked out and positions count only real tokens, so the holes change nothing but shapes."""
    n_in, width = max(len(c) for c in chunks), max(keep)
    input_ids = torch.full((len(chunks), n_in), pad_id, dtype=torch.long)
    mask = torch.zeros((len(chunks), width + n_in), dtype=torch.long)
    for i, chunk in enumerate(chunks):
        input_ids[i, n_in - len(chunk):] = torch.tensor(chunk, dtype=torch.long)
        mask[i, width - keep[i]: width] = 1
        mask[i, width + n_in - len(chunk):] = 1
    return input_ids, mask


def sample(logits: Any, jobs: list[Job]) -> tuple[list[int], list[float]]:
    """One token per row at exactly its temperature (0: greedy), top-k and top-p off; its log-probability."""
    logits = logits.float()
    scale = torch.tensor([j.temperature if j.temperature > 0 else 1.0 for j in jobs], device=logits.device)
    logprobs = torch.log_softmax(logits / scale[:, None], dim=-1)
    token = logprobs.argmax(-1)
    drawn = [r for r, j in enumerate(jobs) if j.temperature > 0]
    if drawn:
        probs = logprobs[drawn].exp()
        own = [k for k, r in enumerate(drawn) if jobs[r].seq.generator is not None]
        shared = [k for k, r in enumerate(drawn) if jobs[r].seq.generator is None]
        picks = torch.empty(len(drawn), dtype=torch.long, device=logits.device)
        for k in own:  # a sequence with a stream of its own draws from it alone
            picks[k] = torch.multinomial(probs[k], 1, generator=jobs[drawn[k]].seq.generator)[0]
        if shared:
            idx = torch.tensor(shared, device=logits.device)
            picks[idx] = torch.multinomial(probs[idx], 1, generator=jobs[drawn[shared[0]]].generator).squeeze(-1)
        token[torch.tensor(drawn, device=logits.device)] = picks
    chosen = logprobs.gather(-1, token.unsqueeze(-1)).squeeze(-1)
    return token.cpu().tolist(), chosen.cpu().tolist()


class Batch:
    """The sequences decoding together in shared key-value buffers (see the module's docstring)."""

    def __init__(self, model: Decoder) -> None:
        self.m = model
        self.rows: list[Job | None] = []
        self.cache: Any = None
        self.mask: Any = None  # (rows, capacity) 1 where a row attends
        self.c = 0

    def active(self) -> bool:
        return any(j is not None for j in self.rows)

    def jobs(self) -> list[Job]:
        return [j for j in self.rows if j is not None]

    # ---- joining ----

    def admit(self, jobs: list[Job]) -> None:
        """Read the newcomers' unread tokens: shared beginnings once, then passes of similar length."""
        if self.m.kv_reuse:
            self._share_prefixes(jobs)
        copies: dict[tuple[int, ...], list[Job]] = {}  # copies of one sequence are read as one row
        for j in jobs:
            copies.setdefault(tuple(j.seq.ids), []).append(j)
        groups = list(copies.values())
        unread = sorted(((len(g[0].seq.ids) - self._kept(g[0].seq), k) for k, g in enumerate(groups)), reverse=True)
        while unread:
            size, longest = 1, unread[0][0]
            while (size < len(unread) and (size + 1) * longest <= PREFILL_TOKENS
                   and _snug([n for n, _ in unread[: size + 1]])):
                size += 1
            self._prefill([j for _, k in unread[:size] for j in groups[k]])
            unread = unread[size:]

    def _share_prefixes(self, jobs: list[Job]) -> None:
        """Sequences read from the start that begin alike (an evaluation's cells of one scenario share the
        seller's system prompt, often its first observation too) read the shared stretch once, in a pass of its
        own, and all start from that cache: only what differs is read per sequence."""
        fresh: dict[tuple[int, ...], list[Sequence]] = {}
        for j in jobs:
            if self._kept(j.seq) == 0 and len(j.seq.ids) > SHARED_PREFIX:
                fresh.setdefault(tuple(j.seq.ids), []).append(j.seq)
        keys = sorted(fresh)  # sorted, a run of neighbours shares the least of its neighbours' common prefixes
        common = [_common_prefix(a, b) for a, b in zip(keys, keys[1:])]
        for lo, hi, n in _prefix_groups(common, [len(k) - 1 for k in keys], 0, len(keys)):
            kv = self._read(list(keys[lo][:n]))
            for key in keys[lo:hi]:
                for seq in fresh[key]:
                    seq.cache, seq.cached = kv, n  # read-only: a prefill copies what it keeps

    def _read(self, ids: list[int]) -> list[tuple[Any, Any]]:
        """One sequence's keys and values, read in a pass of its own."""
        m, clock = self.m, time.perf_counter()
        cache = buffered_cache(m.layout, len(ids), 0, None)
        mask = torch.ones((1, len(ids)), dtype=torch.long, device=m.device)
        positions = torch.arange(len(ids), device=m.device)[None]
        m.next_token_logits(torch.tensor([ids], device=m.device), mask, positions, cache)
        m.stats["prefills"] += 1
        m.stats["shared_prefix_tokens"] += len(ids)
        m.stats["prompt_tokens"] += len(ids)
        m.stats["prefill_s"] += time.perf_counter() - clock
        return [(layer.keys, layer.values) for layer in buffers(cache)]

    def _kept(self, seq: Sequence) -> int:
        return min(seq.cached, len(seq.ids) - 1) if self.m.kv_reuse and seq.cache is not None else 0

    def _prefill(self, jobs: list[Job]) -> None:
        m, clock = self.m, time.perf_counter()
        # Sequences with the same tokens so far (a GRPO group's copies of one prompt, an evaluation's cells that
        # agree up to here) are read once: a row per distinct sequence, each job samples from its row's logits
        # with its own stream. A group's shared prompt is most of a CPU rollout's prefill.
        first: dict[tuple[int, ...], int] = {}
        row_of = [first.setdefault(tuple(j.seq.ids), len(first)) for j in jobs]
        reps = list({r: j for r, j in zip(row_of, jobs)}.values())  # one job per row, in row order
        seqs = [j.seq for j in reps]
        keep = [self._kept(s) for s in seqs]
        chunks = [s.ids[k:] for s, k in zip(seqs, keep)]
        input_ids, mask = layout(chunks, keep, m.pad_id)
        n_in, width = max(len(c) for c in chunks), max(keep)
        cache = buffered_cache(m.layout, width + n_in, width, padded_past(seqs, keep, width, width + n_in))
        mask = mask.to(m.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = m.next_token_logits(input_ids.to(m.device), mask, positions[:, width:], cache)
        if len(reps) < len(jobs):
            logits = logits[torch.tensor(row_of, device=logits.device)]
        tokens, logprobs = sample(logits, jobs)
        going = {i for i, job in enumerate(jobs) if not job.take(tokens[i], logprobs[i])}  # jobs, not rows
        self._make_room(len(going), max((keep[row_of[i]] + len(chunks[row_of[i]]) for i in going), default=0))
        for i, job in enumerate(jobs):
            r = row_of[i]  # the prefill row it read (shared by its copies)
            past, fresh = slice(width - keep[r], width), slice(width + n_in - len(chunks[r]), width + n_in)
            kv = [(torch.cat([layer.keys[r: r + 1, :, past], layer.keys[r: r + 1, :, fresh]], dim=2),
                   torch.cat([layer.values[r: r + 1, :, past], layer.values[r: r + 1, :, fresh]], dim=2))
                  for layer in buffers(cache)]
            if i in going:
                self._place(job, kv, keep[r] + len(chunks[r]))
            else:
                job.finish(kv if m.kv_reuse else None)
        m.stats["prefills"] += 1
        m.stats["prompt_tokens"] += sum(len(c) for c in chunks)
        m.stats["generated_tokens"] += len(jobs)
        m.stats["prefill_s"] += time.perf_counter() - clock

    def _make_room(self, rows: int, length: int) -> None:
        """Enough free rows for ``rows`` newcomers, and at least ``length`` columns before the current one."""
        if rows == 0:
            return
        extra = max(0, rows - sum(j is None for j in self.rows))
        if self.cache is None:  # no buffers yet: the first row placed shapes them
            self.rows += [None] * extra
            self.c = max(self.c, length)
            return
        shift = max(0, length - self.c)
        if extra or shift:
            self._resize(len(self.rows) + extra, self.mask.shape[1] + shift, shift)
            self.rows += [None] * extra

    def _resize(self, rows: int, capacity: int, shift: int = 0) -> None:
        """New buffers of ``rows`` x ``capacity``, the filled columns copied ``shift`` columns to the right."""
        for layer in buffers(self.cache):
            layer.grow(rows, capacity, self.c, shift)
        mask = torch.zeros((rows, capacity), dtype=self.mask.dtype, device=self.mask.device)
        mask[: self.mask.shape[0], shift: shift + self.c] = self.mask[:, : self.c]
        self.mask, self.c = mask, self.c + shift
        for job in self.jobs():
            job.start += shift

    def _place(self, job: Job, kv: list[tuple[Any, Any]], length: int) -> None:
        if self.cache is None:  # the first row: buffers shaped after its cache
            n, cap = len(self.rows), self.c + 64
            self.cache = buffered_cache(self.m.layout, cap, self.c,
                                        [(k.new_zeros((n, k.shape[1], cap, k.shape[3])),
                                          v.new_zeros((n, v.shape[1], cap, v.shape[3]))) for k, v in kv])
            self.mask = torch.zeros((n, cap), dtype=torch.long, device=kv[0][0].device)
        row = self.rows.index(None)
        lo = self.c - length
        for layer, (k, v) in zip(buffers(self.cache), kv):
            layer.write_row(row, lo, self.c, k[0], v[0])
        self.mask[row].zero_()
        self.mask[row, lo: self.c] = 1
        job.start, job.position = lo, length
        self.rows[row] = job
        # its cache lives in the batch now (finishing hands a copy back): one copy per running sequence, not two
        job.seq.cache, job.seq.cached = None, 0

    # ---- decoding ----

    def step(self) -> None:
        """Feed every row its last sampled token and sample the next."""
        m, clock = self.m, time.perf_counter()
        self._reserve(self.c + 1)
        ids = torch.tensor([[j.ids[-1] if j else m.pad_id] for j in self.rows], device=m.device)
        positions = torch.tensor([[j.position if j else 0] for j in self.rows], device=m.device)
        self.mask[:, self.c] = 1  # free rows attend to their own pad token: nothing reads them, nothing is NaN
        logits = m.next_token_logits(ids, self.mask[:, : self.c + 1], positions, self.cache)
        self.c += 1
        live = [r for r, j in enumerate(self.rows) if j is not None]
        jobs = [self.rows[r] for r in live]
        tokens, logprobs = sample(logits[live] if len(live) < len(self.rows) else logits, jobs)
        m.stats["row_steps"] += len(self.rows)
        m.stats["steps"] += 1
        m.stats["generated_tokens"] += len(jobs)
        for r, job, token, lp in zip(live, jobs, tokens, logprobs):
            job.position += 1
            if job.take(token, lp):
                kv = [layer.copy_row(r, job.start, self.c) for layer in buffers(self.cache)] if m.kv_reuse else None
                self.rows[r] = None
                job.finish(kv)
        self._tidy()
        m.stats["decode_s"] += time.perf_counter() - clock

    def _reserve(self, columns: int) -> None:
        if columns > self.mask.shape[1]:
            self._resize(len(self.rows), max(columns, 2 * self.mask.shape[1]))

    def _tidy(self) -> None:
        """Drop the rows of finished sequences once half the batch is free; cut columns nobody reads."""
        live = [r for r, j in enumerate(self.rows) if j is not None]
        if not live:
            self.rows, self.cache, self.mask, self.c = [], None, None, 0
            return
        if len(live) <= len(self.rows) // 2:
            index = torch.tensor(live, device=self.mask.device)
            for layer in buffers(self.cache):
                layer.select_rows(index, self.c)
            self.mask = self.mask.index_select(0, index)
            self.rows = [self.rows[r] for r in live]
            self.m.stats["compactions"] += 1
        lo = min(j.start for j in self.jobs())
        if lo >= 64 and 2 * lo >= self.c:  # views, no copy: the next growth copies only what is left
            for layer in buffers(self.cache):
                layer.drop_columns(lo, self.c - lo)
            self.mask = self.mask[:, lo:]
            self.c -= lo
            self.m.stats["trims"] += 1
            for job in self.jobs():
                job.start -= lo
