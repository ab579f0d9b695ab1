"""Key-value caches over buffers allocated once, for batches whose rows join and leave at any step.

transformers' ``DynamicCache`` grows by concatenation, copying the whole cache at every decoded token; on
a CPU that copy cost more than the model itself. ``BufferLayer`` keeps the ``DynamicLayer`` interface the
model's attention calls (``update``, ``keys``, ``values``) but writes in place into a (rows, heads,
capacity, dim) buffer of which the first ``length`` columns are filled, and hands attention views.
The batch reshapes the buffers through its methods (grow, write a row, select rows, drop columns).

Only layers that own keys and values get buffers (``ModelLayout.owns_kv``); a KV-shared layer keeps the
``DummyLayer`` transformers gives it. A sequence's cache (``Sequence.cache``) is the list of its owned layers'
(keys, values), in layer order.
"""

from __future__ import annotations

from typing import Any

from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from haggler.engine.backends.hf.layout import ModelLayout
from haggler.engine.interfaces import Sequence


class BufferLayer(DynamicLayer):
    """One layer's keys and values in preallocated (rows, heads, capacity, dim) buffers."""

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

    def grow(self, rows: int, capacity: int, filled: int, shift: int = 0) -> None:
        """New buffers of ``rows`` x ``capacity``, the ``filled`` columns copied ``shift`` columns to the right."""
        k, v = self._k, self._v
        k2 = k.new_zeros((rows, k.shape[1], capacity, k.shape[3]))
        v2 = v.new_zeros((rows, v.shape[1], capacity, v.shape[3]))
        k2[: k.shape[0], :, shift: shift + filled] = k[:, :, :filled]
        v2[: v.shape[0], :, shift: shift + filled] = v[:, :, :filled]
        self.reshape(k2, v2, filled + shift)

    def write_row(self, row: int, lo: int, hi: int, k: Any, v: Any) -> None:
        """Put one sequence's (heads, hi - lo, dim) keys and values into columns ``lo:hi`` of ``row``."""
        self._k[row, :, lo:hi] = k
        self._v[row, :, lo:hi] = v

    def copy_row(self, row: int, lo: int, hi: int) -> tuple[Any, Any]:
        """Columns ``lo:hi`` of ``row`` as a one-row (keys, values) pair of its own (not a view)."""
        return self._k[row: row + 1, :, lo:hi].clone(), self._v[row: row + 1, :, lo:hi].clone()

    def select_rows(self, index: Any, length: int) -> None:
        self.reshape(self._k.index_select(0, index), self._v.index_select(0, index), length)

    def drop_columns(self, lo: int, length: int) -> None:
        """Forget the first ``lo`` columns; views, no copy: the next growth copies only what is left."""
        self.reshape(self._k[:, :, lo:], self._v[:, :, lo:], length)


def buffered_cache(layout: ModelLayout, capacity: int, length: int, past: list[tuple[Any, Any]] | None) -> DynamicCache:
    """A DynamicCache whose owned layers are ``BufferLayer``s: over ``past`` (per owned layer (keys, values)
    buffers of which ``length`` columns are filled), or, without it, allocated at the first update with
    ``capacity``. Layers that own no keys and values keep transformers' own ``DummyLayer``."""
    cache = DynamicCache(config=layout.config)
    owned = iter(past) if past else None
    cache.layers = [(BufferLayer(*next(owned), length=length) if owned else BufferLayer(capacity=capacity))
                    if own else layer for layer, own in zip(cache.layers, layout.owns_kv)]
    return cache


def buffers(cache: DynamicCache) -> list[BufferLayer]:
    """The layers of a ``buffered_cache`` that hold keys and values, in layer order."""
    return [layer for layer in cache.layers if isinstance(layer, BufferLayer)]


def padded_past(seqs: list[Sequence], keep: list[int], width: int, capacity: int) -> list[tuple[Any, Any]] | None:
    """Every row's first ``keep`` cached positions, right-aligned at ``width`` in buffers of ``capacity``."""
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
