"""A local transformers causal LM that samples continuations for many sequences in one batch.

Token-in/token-out: callers hand over token ids and get back exactly the ids that were sampled, with
the sampler's log-probability of each. Sampling uses exactly the given temperature with top-k and
top-p off (whatever the model's generation_config says), so the log-probabilities are the ones a
trainer recomputes from ``log_softmax(logits / temperature)``. A segment stops at a token that
contains a stop character (a newline, by default), at an end-of-sequence token, or at its budget.
Sampling is our own short loop over the model's forward pass rather than ``generate``: it lets every
sequence keep its own key-value cache between calls (see ``continue_batch``), and lets sequences join
and leave a running batch at any step (continuous batching, see ``submit`` and ``batch.Batch``).
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from haggler.engine.backends.embedded import DEFAULT, resolve_model_path
from haggler.engine.backends.hf.batch import Batch, Job
from haggler.engine.backends.hf.layout import ModelLayout
from haggler.engine.chat import end_of_turn_ids
from haggler.engine.interfaces import Sample, Sequence

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def torch_dtype(name: str, device: str) -> torch.dtype:
    """``auto``, ``float32`` or ``bfloat16`` as a torch dtype; ``auto`` is bfloat16 on a GPU, float32 elsewhere."""
    if name == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return _DTYPES[name]


class HFModel:
    def __init__(self, name: str = DEFAULT, device: str | None = None, dtype: str = "auto",
                 model: Any = None, tokenizer: Any = None, kv_reuse: bool = True) -> None:
        self.name = name
        self.kv_reuse = kv_reuse  # off re-reads every sequence in full each call (for caches that cannot be split)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if model is None:
            path = resolve_model_path(name)
            weights = torch_dtype(dtype, self.device)
            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=weights)
        self.model = model.to(self.device).eval()
        self.layout = ModelLayout.of(self.model)
        self.tokenizer = tokenizer
        self.eos_ids = end_of_turn_ids(self.model.generation_config, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self._stop_tables: dict[tuple[str, frozenset[int]], list[bool]] = {}
        # transformers renamed past_key_values to cache (5.2x); use whichever this version's forward takes
        params = inspect.signature(self.model.forward).parameters
        self.cache_kwarg = "cache" if "cache" in params else "past_key_values"
        # MoE checkpoints saved by a trainer say output_router_logits: true (TRL turns it on for the auxiliary
        # load-balancing loss); sampling needs no router logits, and that loss reads the engine's 4D masks as a
        # 2D padding mask and fails (a warm-started Qwen3-MoE errored on every turn)
        self.forward_kwargs = {"output_router_logits": False} if "output_router_logits" in params else {}
        self.lock = threading.Lock()  # one forward pass at a time per model, whichever thread asks
        self._queue: list[Job] = []  # submitted, not yet in the running batch
        self._queue_lock = threading.Lock()
        self._server: threading.Thread | None = None
        self.stats = {"calls": 0, "prefills": 0, "steps": 0, "prompt_tokens": 0, "generated_tokens": 0, "compactions": 0, "trims": 0, "shared_prefix_tokens": 0,
                      "row_steps": 0, "prefill_s": 0.0, "decode_s": 0.0}

    def next_token_logits(self, input_ids: Any, attention_mask: Any, position_ids: Any, cache: Any) -> Any:
        """One forward pass over ``input_ids`` that extends ``cache``; the logits of each row's last position.
        ``attention_mask`` marks the real tokens among the cache's columns and the new ones; the attention masks
        themselves are the layout's, counted in positions (see ``layout.py``)."""
        masks = self.layout.masks(attention_mask, position_ids, self.model.dtype)
        return self.model(input_ids=input_ids, attention_mask=masks, position_ids=position_ids,
                          **{self.cache_kwarg: cache}, **self.forward_kwargs, use_cache=True,
                          logits_to_keep=1).logits[:, -1, :]

    def _stop_table(self, stop_chars: str, stop_ids: frozenset[int] = frozenset()) -> list[bool]:
        """Per vocabulary id: does this token's text contain a stop character (or is it a stop id, or an end of
        turn)? A plain list, looked up once per sampled token on the host (a device tensor would cost a
        synchronisation per lookup); built once per (stop characters, stop ids)."""
        key = (stop_chars, stop_ids)
        if key not in self._stop_tables:
            if stop_ids:  # the characters' table with the ids added (a thought's closing token)
                table = list(self._stop_table(stop_chars))
                for i in stop_ids:
                    table[i] = True
            else:
                vocab = len(self.tokenizer)
                table = [False] * max(vocab, self.layout.config.vocab_size)
                if stop_chars:
                    for i, text in enumerate(self.tokenizer.batch_decode([[i] for i in range(vocab)])):
                        table[i] = any(c in text for c in stop_chars)
                for i in self.eos_ids:
                    table[i] = True
            self._stop_tables[key] = table
        return self._stop_tables[key]

    def _jobs(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float, stop_chars: str,
              generator: Any, done: list[Callable[[Sample], None]], fail: list[Callable[[BaseException], None]],
              stop_ids: frozenset[int] = frozenset()) -> list[Job]:
        budgets = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(seqs)
        if min(budgets) < 1:
            raise ValueError(f"every sequence needs a budget of at least one token, got {budgets}")
        stop, eos = self._stop_table(stop_chars, stop_ids), frozenset(self.eos_ids)
        return [Job(s, b, temperature, stop, eos, generator, d, f) for s, b, d, f in zip(seqs, budgets, done, fail)]

    def continue_batch(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
                       stop_chars: str = "\n", generator: Any = None,
                       stop_ids: frozenset[int] = frozenset()) -> list[Sample]:
        """Sample one continuation for every sequence, batched, append it to the sequence, and return them.

        Each sequence keeps the key-value cache of the tokens it has already been through, so only
        what was appended since (the other side's turn, a cue) is read again: a negotiation's history
        is encoded once, not once per turn. A sequence that finishes leaves the batch at once.
        """
        if not seqs:
            return []
        out: list[Sample | None] = [None] * len(seqs)

        def keep(i: int) -> Callable[[Sample], None]:
            return lambda sample: out.__setitem__(i, sample)

        def fail(err: BaseException) -> None:
            raise err

        jobs = self._jobs(seqs, max_new_tokens, temperature, stop_chars, generator,
                          [keep(i) for i in range(len(seqs))], [fail] * len(seqs), stop_ids)
        self.stats["calls"] += 1
        batch = Batch(self)
        with self.lock, torch.inference_mode():
            batch.admit(jobs)
            while batch.active():
                batch.step()
        return out  # type: ignore[return-value]

    def submit(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
               stop_chars: str = "\n", stop_ids: frozenset[int] = frozenset()) -> list[Future]:
        """``continue_batch`` without waiting: one future per sequence, resolved as soon as it finishes.

        Continuous batching: a worker thread keeps one batch decoding; sequences submitted while it runs
        join it at its next step (their unread tokens read first, in one pass per group of similar
        length), and a sequence that finishes leaves at once, so nobody waits for the longest row.
        """
        futures = [Future() for _ in seqs]
        jobs = self._jobs(seqs, max_new_tokens, temperature, stop_chars, None,
                          [f.set_result for f in futures], [f.set_exception for f in futures], stop_ids)
        with self._queue_lock:
            self.stats["calls"] += 1
            self._queue.extend(jobs)
            if self._server is None:
                self._server = threading.Thread(target=self._serve, name=f"hf-batch-{self.name}", daemon=True)
                self._server.start()
        return futures

    def _serve(self) -> None:
        batch = Batch(self)
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
                batch = Batch(self)

    def describe(self) -> dict[str, Any]:
        return {"backend": "hf", "model": self.name, "device": self.device,
                "dtype": str(next(self.model.parameters()).dtype).removeprefix("torch.")}
