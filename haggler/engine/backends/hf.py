"""A local transformers causal LM that samples continuations for many sequences in one batch.

Token-in/token-out: callers hand over token ids and get back exactly the ids that were sampled, with
the sampler's log-probability of each. Sampling uses exactly the given temperature with top-k and
top-p off (whatever the model's generation_config says), so the log-probabilities are the ones a
trainer recomputes from ``log_softmax(logits / temperature)``. A segment stops at a token that
contains a stop character (a newline, by default), at an end-of-sequence token, or at its budget.
Sampling is our own short loop over the model's forward pass rather than ``generate``: it lets every
sequence keep its own key-value cache between calls (see ``continue_batch``), and lets sequences join
and leave a running batch at any step (continuous batching, see ``submit`` and ``_Batch``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

DEFAULT = "default"


@dataclass
class Sequence:
    """A growing token sequence (a negotiator's view of its negotiation) and the cache of its read prefix."""

    ids: list[int]
    cache: list[tuple[Any, Any]] | None = None  # per layer (keys, values) for ids[:cached]
    cached: int = 0
    # A random stream of its own (a torch.Generator): what this sequence samples then does not depend on
    # which other sequences share its batch, so the same negotiations play alike batched or alone.
    generator: Any = None

    def extend(self, ids: list[int]) -> None:
        self.ids.extend(ids)


@dataclass(frozen=True)
class Sample:
    ids: list[int]
    logprobs: list[float]
    stopped: str  # "stop" (a stop character), "eos", or "length"


def resolve_model_path(name: str) -> str:
    """``default`` is the embedded SmolLM2; anything else is a local folder or a hub id as given."""
    if name == DEFAULT:
        from haggler.engine.backends.embedded import embedded_model_dir

        return str(embedded_model_dir())
    return name


class HFModel:
    def __init__(self, name: str = DEFAULT, device: str | None = None, dtype: str = "auto",
                 model: Any = None, tokenizer: Any = None, kv_reuse: bool = True) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = name
        self.kv_reuse = kv_reuse  # off re-reads every sequence in full each call (for caches that cannot be split)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if model is None:
            path = resolve_model_path(name)
            torch_dtype = {"auto": torch.bfloat16 if self.device.startswith("cuda") else torch.float32,
                           "float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        eos = self.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = sorted(eos_ids)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self._stop_tables: dict[str, Any] = {}
        import inspect

        # transformers renamed past_key_values to cache (5.2x); use whichever this version's forward takes
        params = inspect.signature(self.model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.lock = threading.Lock()  # one forward pass at a time per model, whichever thread asks
        self._queue: list[_Job] = []  # submitted, not yet in the running batch
        self._queue_lock = threading.Lock()
        self._server: threading.Thread | None = None
        self.stats = {"calls": 0, "prefills": 0, "steps": 0, "prompt_tokens": 0, "generated_tokens": 0, "compactions": 0, "trims": 0,
                      "row_steps": 0, "prefill_s": 0.0, "decode_s": 0.0}

    def _stop_table(self, stop_chars: str) -> list[bool]:
        """Per vocabulary id: does this token's text contain a stop character? A plain list, looked up
        once per sampled token on the host (a device tensor would cost a synchronisation per lookup)."""
        if stop_chars not in self._stop_tables:
            vocab = len(self.tokenizer)
            table = [False] * max(vocab, self.model.config.vocab_size)
            if stop_chars:
                for i, text in enumerate(self.tokenizer.batch_decode([[i] for i in range(vocab)])):
                    table[i] = any(c in text for c in stop_chars)
            for i in self.eos_ids:
                table[i] = True
            self._stop_tables[stop_chars] = table
        return self._stop_tables[stop_chars]

    def _jobs(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float, stop_chars: str,
              generator: Any, done: list[Callable[[Sample], None]], fail: list[Callable[[BaseException], None]]) -> list[_Job]:
        budgets = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(seqs)
        if min(budgets) < 1:
            raise ValueError(f"every sequence needs a budget of at least one token, got {budgets}")
        stop, eos = self._stop_table(stop_chars), frozenset(self.eos_ids)
        return [_Job(s, b, temperature, stop, eos, generator, d, f) for s, b, d, f in zip(seqs, budgets, done, fail)]

    def continue_batch(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
                       stop_chars: str = "\n", generator: Any = None) -> list[Sample]:
        """Sample one continuation for every sequence, batched, append it to the sequence, and return them.

        Each sequence keeps the key-value cache of the tokens it has already been through, so only
        what was appended since (the other side's turn, a cue) is read again: a negotiation's history
        is encoded once, not once per turn. A sequence that finishes leaves the batch at once.
        """
        import torch

        if not seqs:
            return []
        out: list[Sample | None] = [None] * len(seqs)

        def keep(i: int) -> Callable[[Sample], None]:
            return lambda sample: out.__setitem__(i, sample)

        def fail(err: BaseException) -> None:
            raise err

        jobs = self._jobs(seqs, max_new_tokens, temperature, stop_chars, generator,
                          [keep(i) for i in range(len(seqs))], [fail] * len(seqs))
        self.stats["calls"] += 1
        batch = _Batch(self)
        with self.lock, torch.inference_mode():
            batch.admit(jobs)
            while batch.active():
                batch.step()
        return out  # type: ignore[return-value]

    def submit(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
               stop_chars: str = "\n") -> list[Future]:
        """``continue_batch`` without waiting: one future per sequence, resolved as soon as it finishes.

        Continuous batching: a worker thread keeps one batch decoding; sequences submitted while it runs
        join it at its next step (their unread tokens read first, in one pass per group of similar
        length), and a sequence that finishes leaves at once, so nobody waits for the longest row.
        """
        futures = [Future() for _ in seqs]
        jobs = self._jobs(seqs, max_new_tokens, temperature, stop_chars, None,
                          [f.set_result for f in futures], [f.set_exception for f in futures])
        with self._queue_lock:
            self.stats["calls"] += 1
            self._queue.extend(jobs)
            if self._server is None:
                self._server = threading.Thread(target=self._serve, name=f"hf-batch-{self.name}", daemon=True)
                self._server.start()
        return futures

    def _serve(self) -> None:
        import torch

        batch = _Batch(self)
        while True:
            with self._queue_lock:
                jobs, self._queue = self._queue, []
                if not jobs and not batch.active():
                    self._server = None
                    return
            try:
                with self.lock, torch.inference_mode():
                    if jobs:
                        batch.admit(jobs)
                    if batch.active():
                        batch.step()
            except BaseException as err:  # noqa: BLE001 - every waiting sequence hears of it; none is lost
                for job in jobs + batch.jobs():
                    job.give_up(err)
                batch = _Batch(self)

    def _layout(self, chunks: list[list[int]], keep: list[int]) -> tuple[Any, Any]:
        """Input ids and attention mask of a batch: each row is [padding | cached past] [padding | chunk].
        Padding is masked out and positions count only real tokens, so the holes change nothing but shapes."""
        import torch

        n_in, width = max(len(c) for c in chunks), max(keep)
        input_ids = torch.full((len(chunks), n_in), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunks), width + n_in), dtype=torch.long)
        for i, chunk in enumerate(chunks):
            input_ids[i, n_in - len(chunk):] = torch.tensor(chunk, dtype=torch.long)
            mask[i, width - keep[i]: width] = 1
            mask[i, width + n_in - len(chunk):] = 1
        return input_ids, mask

    def _padded_past(self, seqs: list[Sequence], keep: list[int], width: int, capacity: int) -> list[tuple[Any, Any]] | None:
        """Every row's cached past, right-aligned at ``width`` in buffers of ``capacity`` positions."""
        if width == 0:
            return None
        first = next(s.cache for s in seqs if s.cache is not None)
        past = []
        for layer in range(len(first)):
            k0, v0 = first[layer]
            k = k0.new_zeros((len(seqs), k0.shape[1], capacity, k0.shape[3]))
            v = v0.new_zeros((len(seqs), v0.shape[1], capacity, v0.shape[3]))
            for i, s in enumerate(seqs):
                if keep[i]:
                    k[i, :, width - keep[i]: width] = s.cache[layer][0][0, :, : keep[i]]
                    v[i, :, width - keep[i]: width] = s.cache[layer][1][0, :, : keep[i]]
            past.append((k, v))
        return past

    def describe(self) -> dict[str, Any]:
        return {"backend": "hf", "model": self.name, "device": self.device,
                "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch.")}


def _snug(lengths: list[int]) -> bool:
    """Do these rows waste little when padded to the longest (a quarter of the real tokens, plus a little)?"""
    return max(lengths) * len(lengths) <= 1.25 * sum(lengths) + 8 * len(lengths)


def _buffered_cache(config: Any, capacity: int, length: int, past: list[tuple[Any, Any]] | None) -> Any:
    """A DynamicCache whose layers write into buffers allocated once (see ``_buffer_layer``)."""
    from transformers import DynamicCache

    layer = _buffer_layer()
    cache = DynamicCache(config=config)
    n_layers = len(cache.layers) if cache.layers else config.num_hidden_layers
    cache.layers = [layer(*past[i], length=length) if past else layer(capacity=capacity) for i in range(n_layers)]
    return cache


_LAYER_CLASS: Any = None


def _buffer_layer() -> Any:
    """A cache layer over a preallocated (rows, heads, capacity, dim) buffer: ``_len`` columns are filled.

    DynamicCache grows by concatenation, copying the whole cache at every decoded token; on a CPU that
    copy cost more than the model itself. This layer writes in place and hands attention views.
    """
    global _LAYER_CLASS
    if _LAYER_CLASS is not None:
        return _LAYER_CLASS
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        def __init__(self, k: Any = None, v: Any = None, length: int = 0, capacity: int = 0) -> None:
            super().__init__()
            self._k, self._v, self._len, self._capacity = k, v, length if k is not None else 0, capacity
            if k is not None:
                self.is_initialized, self.device = True, k.device
                self._views()

        def _views(self) -> None:
            self.keys, self.values = self._k[:, :, : self._len], self._v[:, :, : self._len]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if self._k is None:
                b, h, _, d = key_states.shape
                self._k = key_states.new_zeros((b, h, self._capacity, d))
                self._v = value_states.new_zeros((b, value_states.shape[1], self._capacity, value_states.shape[3]))
                self.is_initialized, self.device = True, key_states.device
            n = key_states.shape[-2]
            self._k[:, :, self._len: self._len + n] = key_states
            self._v[:, :, self._len: self._len + n] = value_states
            self._len += n
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._len

        def reshape(self, k: Any, v: Any, length: int) -> None:
            """Swap in other buffers (grown, shifted, trimmed or with rows selected) holding ``length`` columns."""
            self._k, self._v, self._len = k, v, length
            self._views()

    _LAYER_CLASS = BufferLayer
    return BufferLayer


@dataclass(eq=False)
class _Job:
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


class _Batch:
    """The sequences decoding together, one token each per step, in shared key-value buffers.

    Every row's cache is a contiguous run of columns ending at the current column ``c``; the buffers'
    columns are one timeline, with each row's earlier columns masked out. A sequence joins at a step
    boundary: its unread tokens are read in a prefill pass (grouped with others of similar length so
    padding stays small), its first token is sampled from that pass, and its cache is copied into a free
    row. A sequence that finishes takes its cache out and frees the row. Rows a finished sequence left
    are dropped once half the batch is free, and columns no row needs any more are cut off.
    """

    def __init__(self, model: HFModel) -> None:
        self.m = model
        self.rows: list[_Job | None] = []
        self.cache: Any = None
        self.mask: Any = None  # (rows, capacity) 1 where a row attends
        self.c = 0

    def active(self) -> bool:
        return any(j is not None for j in self.rows)

    def jobs(self) -> list[_Job]:
        return [j for j in self.rows if j is not None]

    # ---- joining ----

    def admit(self, jobs: list[_Job]) -> None:
        unread = sorted(((len(j.seq.ids) - self._kept(j.seq), i) for i, j in enumerate(jobs)), reverse=True)
        while unread:
            size = 1
            while size < len(unread) and _snug([n for n, _ in unread[: size + 1]]):
                size += 1
            self._prefill([jobs[i] for _, i in unread[:size]])
            unread = unread[size:]

    def _kept(self, seq: Sequence) -> int:
        return min(seq.cached, len(seq.ids) - 1) if self.m.kv_reuse and seq.cache is not None else 0

    def _prefill(self, jobs: list[_Job]) -> None:
        import torch

        m, clock = self.m, time.perf_counter()
        seqs = [j.seq for j in jobs]
        keep = [self._kept(s) for s in seqs]
        chunks = [s.ids[k:] for s, k in zip(seqs, keep)]
        input_ids, mask = m._layout(chunks, keep)
        n_in, width = max(len(c) for c in chunks), max(keep)
        cache = _buffered_cache(m.model.config, width + n_in, width, m._padded_past(seqs, keep, width, width + n_in))
        mask = mask.to(m.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = m.model(input_ids=input_ids.to(m.device), attention_mask=mask, position_ids=positions[:, width:],
                         **{m._cache_kwarg: cache}, use_cache=True, logits_to_keep=1).logits[:, -1, :]
        tokens, logprobs = self._sample(logits, jobs)
        going = [r for r, job in enumerate(jobs) if not job.take(tokens[r], logprobs[r])]
        self._make_room(len(going), max((keep[r] + len(chunks[r]) for r in going), default=0))
        for r, job in enumerate(jobs):
            past, fresh = slice(width - keep[r], width), slice(width + n_in - len(chunks[r]), width + n_in)
            kv = [(torch.cat([layer.keys[r: r + 1, :, past], layer.keys[r: r + 1, :, fresh]], dim=2),
                   torch.cat([layer.values[r: r + 1, :, past], layer.values[r: r + 1, :, fresh]], dim=2))
                  for layer in cache.layers]
            if r in going:
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
        import torch

        for layer in self.cache.layers:
            k, v = layer._k, layer._v
            k2 = k.new_zeros((rows, k.shape[1], capacity, k.shape[3]))
            v2 = v.new_zeros((rows, v.shape[1], capacity, v.shape[3]))
            k2[: k.shape[0], :, shift: shift + self.c] = k[:, :, : self.c]
            v2[: v.shape[0], :, shift: shift + self.c] = v[:, :, : self.c]
            layer.reshape(k2, v2, self.c + shift)
        mask = torch.zeros((rows, capacity), dtype=self.mask.dtype, device=self.mask.device)
        mask[: self.mask.shape[0], shift: shift + self.c] = self.mask[:, : self.c]
        self.mask, self.c = mask, self.c + shift
        for job in self.jobs():
            job.start += shift

    def _place(self, job: _Job, kv: list[tuple[Any, Any]], length: int) -> None:
        import torch

        if self.cache is None:  # the first row: buffers shaped after its cache
            n, cap = len(self.rows), self.c + 64
            self.cache = _buffered_cache(self.m.model.config, cap, self.c,
                                         [(k.new_zeros((n, k.shape[1], cap, k.shape[3])),
                                           v.new_zeros((n, v.shape[1], cap, v.shape[3]))) for k, v in kv])
            self.mask = torch.zeros((n, cap), dtype=torch.long, device=kv[0][0].device)
        row = self.rows.index(None)
        lo = self.c - length
        for layer, (k, v) in zip(self.cache.layers, kv):
            layer._k[row, :, lo: self.c] = k[0]
            layer._v[row, :, lo: self.c] = v[0]
        self.mask[row].zero_()
        self.mask[row, lo: self.c] = 1
        job.start, job.position = lo, length
        self.rows[row] = job

    # ---- decoding ----

    def step(self) -> None:
        """Feed every row its last sampled token and sample the next."""
        import torch

        m, clock = self.m, time.perf_counter()
        self._reserve(self.c + 1)
        ids = torch.tensor([[j.ids[-1] if j else m.pad_id] for j in self.rows], device=m.device)
        positions = torch.tensor([[j.position if j else 0] for j in self.rows], device=m.device)
        self.mask[:, self.c] = 1  # free rows attend to their own pad token: nothing reads them, nothing is NaN
        logits = m.model(input_ids=ids, attention_mask=self.mask[:, : self.c + 1], position_ids=positions,
                         **{m._cache_kwarg: self.cache}, use_cache=True, logits_to_keep=1).logits[:, -1, :]
        self.c += 1
        live = [r for r, j in enumerate(self.rows) if j is not None]
        jobs = [self.rows[r] for r in live]
        tokens, logprobs = self._sample(logits[live] if len(live) < len(self.rows) else logits, jobs)
        m.stats["row_steps"] += len(self.rows)
        m.stats["steps"] += 1
        m.stats["generated_tokens"] += len(jobs)
        for r, job, token, lp in zip(live, jobs, tokens, logprobs):
            job.position += 1
            if job.take(token, lp):
                kv = ([(layer._k[r: r + 1, :, job.start: self.c].clone(), layer._v[r: r + 1, :, job.start: self.c].clone())
                       for layer in self.cache.layers] if m.kv_reuse else None)
                self.rows[r] = None
                job.finish(kv)
        self._tidy()
        m.stats["decode_s"] += time.perf_counter() - clock

    def _reserve(self, columns: int) -> None:
        if columns > self.mask.shape[1]:
            self._resize(len(self.rows), max(columns, 2 * self.mask.shape[1]))

    def _tidy(self) -> None:
        """Drop the rows of finished sequences once half the batch is free; cut columns nobody reads."""
        import torch

        live = [r for r, j in enumerate(self.rows) if j is not None]
        if not live:
            self.rows, self.cache, self.mask, self.c = [], None, None, 0
            return
        if len(live) <= len(self.rows) // 2:
            index = torch.tensor(live, device=self.mask.device)
            for layer in self.cache.layers:
                layer.reshape(layer._k.index_select(0, index), layer._v.index_select(0, index), self.c)
            self.mask = self.mask.index_select(0, index)
            self.rows = [self.rows[r] for r in live]
            self.m.stats["compactions"] += 1
        lo = min(j.start for j in self.jobs())
        if lo >= 64 and 2 * lo >= self.c:  # views, no copy: the next growth copies only what is left
            for layer in self.cache.layers:
                layer.reshape(layer._k[:, :, lo:], layer._v[:, :, lo:], self.c - lo)
            self.mask = self.mask[:, lo:]
            self.c -= lo
            self.m.stats["trims"] += 1
            for job in self.jobs():
                job.start -= lo

    def _sample(self, logits: Any, jobs: list[_Job]) -> tuple[list[int], list[float]]:
        """One token per row at exactly its temperature (0: greedy), top-k and top-p off; its log-probability."""
        import torch

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
