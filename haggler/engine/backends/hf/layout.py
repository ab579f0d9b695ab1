"""What the engine knows of a model's layers: the one place that reads a model's layout.

Read once from the model's text config (``get_text_config()``: a multimodal checkpoint's text settings sit in
``text_config``) through transformers' own cache construction (``DynamicCache(config=...)``):

- which layers keep keys and values of their own. KV-shared layers (Gemma 4 E2B/E4B) read an earlier layer's
  keys and values within each forward pass and never touch the cache: transformers gives them a ``DummyLayer``,
  and so does every cache the engine builds; everything that splits, merges or trims caches skips them;
- which mask each layer attends through: full causal, or a sliding window of ``w`` positions.

The engine builds the attention masks itself, in positions. Its batches keep every row's past and new tokens
in shared buffers with padding between them (see ``batch.py``), and transformers' masks count buffer columns:
the padding would eat into a sliding window. Here a key is visible to a query when it is a real token, at a
position no later than the query's, and (sliding layers) fewer than ``w`` positions before it, the rule of
transformers' ``sliding_window_overlay`` with positions for columns. Masks are additive floats in the model's
dtype (eager attention adds them; SDPA takes them as they are). A model whose layers all use one mask gets a
4D tensor, which every transformers model passes through as given; one with several gets a dict keyed by layer
type, which those models (Gemma 2/3/4, Qwen2/3 with sliding layers) take in place of their own masks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

_SUPPORTED = {"full_attention", "sliding_attention"}


class UnsupportedLayout(ValueError):
    """A model whose layers the engine cannot cache or mask correctly (chunked attention, recurrent state)."""


@dataclass(frozen=True)
class ModelLayout:
    config: Any  # the text config: what the caches are built from
    owns_kv: tuple[bool, ...]  # per layer: keys and values of its own (False: a KV-shared or attention-free layer)
    windows: dict[str, int | None]  # per mask kind: its sliding window in positions, None for full attention
    keyed: bool  # masks go in as a dict keyed by layer type (several kinds), else one 4D tensor

    @classmethod
    def of(cls, model: Any) -> ModelLayout:
        config = model.config.get_text_config(decoder=True)
        cache = DynamicCache(config=config)
        if not cache.layers:
            raise UnsupportedLayout(f"{type(model).__name__}: transformers builds no per-layer cache from its config")
        if any(cache.is_linear):
            raise UnsupportedLayout(f"{type(model).__name__} has recurrent (linear-attention) layers; "
                                    "haggler's engine caches attention layers only")
        types = getattr(config, "layer_types", None)
        if types is not None:
            kinds = set(types)
            if kinds - _SUPPORTED:
                raise UnsupportedLayout(f"{type(model).__name__} has {sorted(kinds - _SUPPORTED)} layers; haggler's "
                                        f"engine masks {sorted(_SUPPORTED)} only")
            window = getattr(config, "sliding_window", None)
            windows = {k: (window if k == "sliding_attention" else None) for k in kinds}
        else:  # one kind for all layers, as transformers' own cache reads it (Mistral, Phi-3: a window everywhere)
            sliding = {getattr(layer, "sliding_window", None) for layer, s in zip(cache.layers, cache.is_sliding) if s}
            if len(sliding) > 1:
                raise UnsupportedLayout(f"{type(model).__name__}: several sliding windows {sorted(sliding)} "
                                        "without layer_types to say which layer uses which")
            windows = {"attention": next(iter(sliding)) if sliding else None}
        return cls(config, tuple(not d for d in cache.is_dummy), windows, len(windows) > 1)

    def masks(self, columns: Any, positions: Any, dtype: Any) -> Any:
        """Attention masks for queries at ``positions`` (rows, q) over keys in ``columns`` (rows, kv: 1 where a
        real token sits; the queries are the last q columns). Every query also sees itself, so that padding
        rows have a key and no row is all masked (which would give NaN)."""
        real = columns.bool()
        kv_pos = columns.cumsum(-1) - 1
        q, kv = positions.shape[-1], columns.shape[-1]
        own = torch.zeros((q, kv), dtype=torch.bool, device=columns.device)
        own[:, kv - q:] = torch.eye(q, dtype=torch.bool, device=columns.device)
        causal = real[:, None, :] & (kv_pos[:, None, :] <= positions[:, :, None])
        low = torch.finfo(dtype).min
        out = {}
        for kind, window in self.windows.items():
            seen = causal if window is None else causal & (kv_pos[:, None, :] > positions[:, :, None] - window)
            allowed = (seen | own)[:, None]
            out[kind] = torch.zeros(allowed.shape, dtype=dtype, device=columns.device).masked_fill_(~allowed, low)
        return out if self.keyed else next(iter(out.values()))
