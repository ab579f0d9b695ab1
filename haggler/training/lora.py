"""Where LoRA adapters go: the linear modules of the language model's decoder layers, and nothing else."""

from __future__ import annotations

from typing import Any

from haggler.training.config import TrainConfig


def peft_config(cfg: TrainConfig, model: Any) -> Any:
    if cfg.lora is None:
        return None
    # Lazy: peft is optional and slow to import.
    from peft import LoraConfig

    lora = cfg.lora
    return LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, task_type="CAUSAL_LM",
                      target_modules=decoder_targets(model, lora.target_modules, lora.layers))


def decoder_targets(model: Any, targets: str | list[str], layers: int | None = None) -> str:
    """Which modules get adapters, as the regular expression peft matches whole module names against: the linear
    modules named ``targets`` ("all-linear": every one) inside the language model's decoder layers, the top
    ``layers`` of them where given. Only the decoder's: a multimodal checkpoint (Gemma 4 as the hub ships it) has
    vision and audio towers whose linear layers sit inside clippable wrappers that peft refuses, and a seller's
    reward says nothing about them."""
    import re

    import torch

    decoder = model.get_decoder()
    prefix = next(name for name, module in model.named_modules() if module is decoder)
    inside = re.compile(rf"^{re.escape(prefix)}\.layers\.(\d+)\.(?:.+\.)?([^.]+)$" if prefix
                        else r"^layers\.(\d+)\.(?:.+\.)?([^.]+)$")
    n = model.config.get_text_config(decoder=True).num_hidden_layers
    if layers is not None and layers > n:
        raise ValueError(f"lora.layers: {layers}, but the model has {n} decoder layers")
    found = {m.group(2) for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and (m := inside.match(name))}
    if targets == "all-linear":
        names = sorted(found)
    else:
        names = [targets] if isinstance(targets, str) else list(targets)
        if unknown := [t for t in names if t not in found]:
            raise ValueError(f"lora.target_modules: {unknown} are no linear modules of the decoder layers "
                             f"(they have {sorted(found)})")
    chosen = range(n - layers, n) if layers is not None else range(n)
    head = rf"{re.escape(prefix)}\." if prefix else ""
    return rf"^{head}layers\.({'|'.join(map(str, chosen))})\.(?:.+\.)?({'|'.join(map(re.escape, names))})$"
