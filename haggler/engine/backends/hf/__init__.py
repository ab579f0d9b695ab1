"""Local transformers models (``hf:``): ``HFModel`` (model.py) samples continuations of many token
sequences, batched continuously (batch.py) over key-value buffers allocated once (cache.py).

Importing this package imports torch and transformers; what callers without them need lives elsewhere:
``Sequence`` and ``Sample`` in ``haggler.engine.interfaces``, ``resolve_model_path`` in ``embedded``.
"""

from haggler.engine.backends.embedded import DEFAULT, resolve_model_path
from haggler.engine.backends.hf.model import HFModel, torch_dtype
from haggler.engine.interfaces import Sample, Sequence  # kept importable from here for existing callers

__all__ = ["DEFAULT", "HFModel", "Sample", "Sequence", "resolve_model_path", "torch_dtype"]
