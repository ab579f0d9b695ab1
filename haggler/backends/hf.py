"""A local transformers causal LM that samples continuations for many sequences in one batch.

Token-in/token-out: callers hand over token ids and get back exactly the ids that were sampled, with
the sampler's log-probability of each. Sampling uses exactly the given temperature with top-k and
top-p off (whatever the model's generation_config says), so the log-probabilities are the ones a
trainer recomputes from ``log_softmax(logits / temperature)``. A segment stops at a token that
contains a stop character (a newline, by default), at an end-of-sequence token, or at its budget.
Sampling is our own short loop over the model's forward pass rather than ``generate``: it lets every
sequence keep its own key-value cache between calls (see ``continue_batch``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
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
        from haggler.backends.embedded import embedded_model_dir

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
        self.lock = threading.Lock()  # one generate at a time per model, whichever thread asks
        self.stats = {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0, "compactions": 0, "row_steps": 0, "read_ahead": 0,
                      "prefill_s": 0.0, "decode_s": 0.0, "copy_s": 0.0}

    def _stop_table(self, stop_chars: str) -> Any:
        """A boolean per vocabulary id: does this token's text contain a stop character?"""
        import torch

        if stop_chars not in self._stop_tables:
            vocab = len(self.tokenizer)
            size = max(vocab, self.model.config.vocab_size)
            table = torch.zeros(size, dtype=torch.bool)
            if stop_chars:
                pieces = self.tokenizer.batch_decode([[i] for i in range(vocab)])
                for i, text in enumerate(pieces):
                    if any(c in text for c in stop_chars):
                        table[i] = True
            table[self.eos_ids] = True
            self._stop_tables[stop_chars] = table.to(self.device)
        return self._stop_tables[stop_chars]

    def continue_batch(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
                       stop_chars: str = "\n", generator: Any = None) -> list[Sample]:
        """Sample one continuation for every sequence in one batched decode, and append it to the sequence.

        Each sequence keeps the key-value cache of the tokens it has already been through, so only
        what was appended since (the other side's turn, a cue) is read again: a negotiation's history
        is encoded once, not once per turn.
        """
        import torch

        if not seqs:
            return []
        budgets = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(seqs)
        if min(budgets) < 1:
            raise ValueError(f"every sequence needs a budget of at least one token, got {budgets}")
        stop_table = self._stop_table(stop_chars)
        eos = set(self.eos_ids)
        if self.kv_reuse and len(seqs) > 1:
            self._read_ahead(seqs)
        totals = [len(s.ids) for s in seqs]
        cached = [min(s.cached, t - 1) if self.kv_reuse else 0 for s, t in zip(seqs, totals)]
        keep = cached  # each row reads only what it has not read yet
        new = [t - k for t, k in zip(totals, keep)]
        rows = len(seqs)
        input_ids, mask = self._layout([s.ids[k:] for s, k in zip(seqs, keep)], keep)
        n_in, width = max(new), max(keep)
        clock = time.perf_counter()
        capacity = width + n_in + max(budgets)
        cache = _buffered_cache(self.model.config, capacity, width, self._padded_past(seqs, keep, width, capacity))
        mask = mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        step_ids = input_ids.to(self.device)
        step_pos = positions[:, width:]
        out_ids: list[list[int]] = [[] for _ in range(rows)]
        out_lps: list[list[float]] = [[] for _ in range(rows)]
        stopped = ["length"] * rows
        greedy = temperature <= 0
        live = list(range(rows))  # original row of each row still in the batch
        done_rows: set[int] = set()

        def hand_back(j: int, i: int) -> None:
            """Give row i (at batch position j) its own cache: the real tokens it was fed."""
            if not self.kv_reuse:
                return
            past = slice(width - keep[i], width)
            fresh = slice(width + n_in - new[i], width + n_in + len(out_ids[i]) - 1)
            seqs[i].cache = [
                (torch.cat([layer.keys[j: j + 1, :, past], layer.keys[j: j + 1, :, fresh]], dim=2),
                 torch.cat([layer.values[j: j + 1, :, past], layer.values[j: j + 1, :, fresh]], dim=2))
                for layer in cache.layers
            ]
            seqs[i].cached = totals[i] + len(out_ids[i]) - 1

        self.stats["copy_s"] += time.perf_counter() - clock
        with self.lock, torch.inference_mode():
            for step in range(max(budgets)):
                clock = time.perf_counter()
                logits = self.model(input_ids=step_ids, attention_mask=mask, position_ids=step_pos,
                                    **{self._cache_kwarg: cache}, use_cache=True, logits_to_keep=1).logits[:, -1, :].float()
                logprobs = torch.log_softmax(logits if greedy else logits / temperature, dim=-1)
                if greedy:
                    token = logprobs.argmax(-1)
                elif any(seqs[i].generator is not None for i in live):
                    # rows already done draw nothing: their stream must not move for a token nobody reads
                    probs = logprobs.exp()
                    token = torch.cat([torch.multinomial(probs[j], 1, generator=seqs[i].generator or generator)
                                       if i not in done_rows else torch.tensor([self.pad_id], device=probs.device)
                                       for j, i in enumerate(live)])
                else:
                    token = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
                chosen = logprobs.gather(-1, token.unsqueeze(-1)).squeeze(-1)
                token_cpu, chosen_cpu = token.cpu().tolist(), chosen.cpu().tolist()
                self.stats["prefill_s" if step == 0 else "decode_s"] += time.perf_counter() - clock
                self.stats["row_steps"] += len(live)
                for j, i in enumerate(live):
                    if i in done_rows:
                        continue
                    out_ids[i].append(token_cpu[j])
                    out_lps[i].append(chosen_cpu[j])
                    if bool(stop_table[token_cpu[j]]):
                        stopped[i] = "eos" if token_cpu[j] in eos else "stop"
                        done_rows.add(i)
                    elif len(out_ids[i]) >= budgets[i]:
                        done_rows.add(i)
                still = [j for j, i in enumerate(live) if i not in done_rows]
                if not still:
                    break
                # Finished rows would keep costing a full row of compute at every step: once half the batch
                # is done, hand their caches back and carry on with the rest only.
                if len(still) <= len(live) // 2:
                    for j, i in enumerate(live):
                        if i in done_rows:
                            hand_back(j, i)
                    index = torch.tensor(still, device=self.device)
                    for layer in cache.layers:
                        layer.select(index)
                    live = [live[j] for j in still]
                    self.stats["compactions"] += 1
                    token, mask, step_pos = token[index], mask[index], step_pos[index]
                step_ids = token.unsqueeze(-1)
                step_pos = step_pos[:, -1:] + 1
                mask = torch.cat([mask, torch.ones((len(live), 1), dtype=mask.dtype, device=self.device)], dim=-1)
                # rows done but not yet compacted away are fed a pad token; nothing reads it back
                for j, i in enumerate(live):
                    if i in done_rows:
                        step_ids[j, 0] = self.pad_id
        clock = time.perf_counter()
        for j, i in enumerate(live):
            hand_back(j, i)
        self.stats["copy_s"] += time.perf_counter() - clock
        for i, s in enumerate(seqs):
            s.ids.extend(out_ids[i])
        self.stats["calls"] += 1
        self.stats["prompt_tokens"] += sum(new)
        self.stats["generated_tokens"] += sum(len(x) for x in out_ids)
        return [Sample(ids=out_ids[i], logprobs=out_lps[i], stopped=stopped[i]) for i in range(rows)]

    def _read_ahead(self, seqs: list[Sequence]) -> None:
        """Read the long unread stretches first, in batches of similar length, so that no row pads the rest.

        One row's new system prompt (hundreds of tokens) would otherwise pad every other row's short cue
        to its length in the batched forward pass, and prefill on a CPU costs per token, padding included.
        The rows that stay in the sampling batch fix the width ``m`` of its first pass; every longer row
        reads all but its last ``m`` unread tokens here, into its own cache.
        """
        import torch

        unread = sorted(((len(s.ids) - min(s.cached, len(s.ids) - 1), i) for i, s in enumerate(seqs)), reverse=True)
        cut = 0  # the rows unread[:cut] are read ahead
        while cut < len(unread) - 1 and not _snug([n for n, _ in unread[cut:]]):
            cut += 1
        if cut == 0:
            return
        m = unread[cut][0]
        long_rows = [(n - m, i) for n, i in unread[:cut] if n > m]
        with self.lock, torch.inference_mode():
            while long_rows:
                size = 1
                while size < len(long_rows) and _snug([n for n, _ in long_rows[: size + 1]]):
                    size += 1
                bucket, long_rows = long_rows[:size], long_rows[size:]
                self._extend_caches([seqs[i] for _, i in bucket], [n for n, _ in bucket])

    def _extend_caches(self, seqs: list[Sequence], counts: list[int]) -> None:
        """Read the next ``counts[i]`` unread tokens of each sequence into its cache, sampling nothing."""
        import torch

        clock = time.perf_counter()
        keep = [min(s.cached, len(s.ids) - 1) for s in seqs]
        input_ids, mask = self._layout([s.ids[k: k + c] for s, k, c in zip(seqs, keep, counts)], keep)
        n_in, width = max(counts), max(keep)
        cache = _buffered_cache(self.model.config, width + n_in, width, self._padded_past(seqs, keep, width, width + n_in))
        mask = mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        self.model(input_ids=input_ids.to(self.device), attention_mask=mask, position_ids=positions[:, width:],
                   **{self._cache_kwarg: cache}, use_cache=True, logits_to_keep=1)
        for j, s in enumerate(seqs):
            past, fresh = slice(width - keep[j], width), slice(width + n_in - counts[j], width + n_in)
            s.cache = [(torch.cat([layer.keys[j: j + 1, :, past], layer.keys[j: j + 1, :, fresh]], dim=2),
                        torch.cat([layer.values[j: j + 1, :, past], layer.values[j: j + 1, :, fresh]], dim=2))
                       for layer in cache.layers]
            s.cached = keep[j] + counts[j]
        self.stats["prompt_tokens"] += sum(counts)
        self.stats["prefill_s"] += time.perf_counter() - clock
        self.stats["read_ahead"] += len(seqs)

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
    """A DynamicCache whose layers write into buffers allocated once for the whole call.

    DynamicCache grows by concatenation, copying the whole cache at every decoded token; on a CPU that
    copy cost more than the model itself. These layers hand attention views of the filled part instead.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        def __init__(self, k: Any = None, v: Any = None) -> None:
            super().__init__()
            self._k, self._v, self._len = k, v, length if k is not None else 0
            if k is not None:
                self.is_initialized = True
                self.device = k.device
                self.keys, self.values = k[:, :, : self._len], v[:, :, : self._len]

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            if self._k is None:
                b, h, _, d = key_states.shape
                self._k = key_states.new_zeros((b, h, capacity, d))
                self._v = value_states.new_zeros((b, value_states.shape[1], capacity, value_states.shape[3]))
                self.is_initialized, self.device = True, key_states.device
            n = key_states.shape[-2]
            self._k[:, :, self._len: self._len + n] = key_states
            self._v[:, :, self._len: self._len + n] = value_states
            self._len += n
            self.keys, self.values = self._k[:, :, : self._len], self._v[:, :, : self._len]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._len

        def select(self, index: Any) -> None:
            self._k, self._v = self._k.index_select(0, index), self._v.index_select(0, index)
            self.keys, self.values = self._k[:, :, : self._len], self._v[:, :, : self._len]

    cache = DynamicCache(config=config)
    n_layers = len(cache.layers) if cache.layers else config.num_hidden_layers
    cache.layers = [BufferLayer(*past[i]) if past else BufferLayer() for i in range(n_layers)]
    return cache
