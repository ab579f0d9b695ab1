"""Will a training run fit? A GPU memory estimate for GRPO training of a seller.

Counts, per GPU: the weights (bf16), the gradients and AdamW states of what is trained (everything, or
the LoRA adapters), a reference model when the KL coefficient needs one, activations at the configured
sequence length (with or without gradient checkpointing), the logits of the vocabulary (large for Gemma's
262k tokens), and the share a colocated vLLM reserves. ZeRO-3 / FSDP divide weights, gradients and
optimizer states across GPUs. Estimates, not measurements: they aim to be right to within about 20%,
which is enough to choose between full fine-tuning, LoRA and more GPUs.

Architectures come from the model folder's ``config.json`` when it is available (a folder, or the local
Hugging Face cache); otherwise from a table of the study's Gemma 4 sizes (approximate, editable below).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from haggler.engine.backends.embedded import resolve_model_path

GIB = 1024**3


@dataclass(frozen=True)
class Arch:
    params: float  # every weight held in GPU memory (embeddings included)
    hidden: int
    layers: int
    ffn: int
    vocab: int
    note: str = ""


# The seed study's sizes. "Effective" sizes (2.3B, 4.5B) are Gemma 4's E2B and E4B, whose per-layer
# embeddings make the weights on the GPU larger than the effective count; counted in full here.
KNOWN_SIZES: dict[str, Arch] = {
    "2.3B": Arch(5.1e9, 1536, 35, 6144, 262_144, "Gemma 4 E2B (2.3B effective, ~5.1B with embeddings; approximate)"),
    "4.5B": Arch(8.0e9, 2560, 42, 10_240, 262_144, "Gemma 4 E4B (4.5B effective, ~8B with embeddings; approximate)"),
    "12B": Arch(12.2e9, 3840, 48, 15_360, 262_144, "a 12B Gemma-class model (approximate)"),
    "31B": Arch(31e9, 5376, 62, 21_504, 262_144, "a 31B Gemma-class model (approximate)"),
}
_ID_HINTS = ((re.compile(r"e2b", re.I), "2.3B"), (re.compile(r"e4b", re.I), "4.5B"))


def _from_config(config: dict[str, Any]) -> Arch:
    c = config.get("text_config", config)
    h, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
    ffn = int(c.get("intermediate_size") or 4 * h)
    vocab = int(c.get("vocab_size", 32_000))
    heads = int(c.get("num_attention_heads", max(1, h // 64)))
    kv = int(c.get("num_key_value_heads", heads))
    head_dim = int(c.get("head_dim") or h // heads)
    per_layer = h * head_dim * (2 * heads + 2 * kv) + 3 * h * ffn
    params = layers * per_layer + vocab * h * (1 if c.get("tie_word_embeddings", True) else 2)
    return Arch(float(params), h, layers, ffn, vocab, "from config.json")


def resolve_arch(model: str) -> Arch:
    """A size ('4.5B'), a model folder, or a Hugging Face id (its cached config, or a size in its name)."""
    key = model.strip().upper().removesuffix("PARAMS")
    if key in KNOWN_SIZES:
        return KNOWN_SIZES[key]
    model = resolve_model_path(model)
    folder = Path(model).expanduser()
    if (folder / "config.json").is_file():
        return _from_config(json.loads((folder / "config.json").read_text()))
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
        if isinstance(cached, str):
            return _from_config(json.loads(Path(cached).read_text()))
    except Exception:  # noqa: BLE001 - no cache, or not an id: fall back to the name
        pass
    for pattern, size in _ID_HINTS:
        if pattern.search(model):
            return KNOWN_SIZES[size]
    m = re.search(r"(\d+(?:\.\d+)?)\s*[bB]\b", model)
    if m:
        n = float(m.group(1))
        nearest = min(KNOWN_SIZES, key=lambda k: abs(float(k[:-1]) - n))
        return KNOWN_SIZES[nearest]
    raise ValueError(f"--model {model!r}: not a known size ({', '.join(KNOWN_SIZES)}), a model folder, "
                     "or a Hugging Face id whose config is cached or whose name gives its size")


@dataclass(frozen=True)
class Plan:
    model: str
    arch: str
    lora: bool
    gpus: int
    gpu_memory_gib: float
    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    reference_gib: float
    activations_gib: float
    logits_gib: float
    vllm_gib: float
    total_gib: float
    fits: bool
    settings: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def estimate(model: str, lora: bool = False, gpu_memory_gb: float = 80.0, seq_len: int = 4096, micro_batch: int = 1,
             gpus: int = 1, vllm_share: float = 0.0, optimizer_bits: int = 32, offload: bool = False,
             gradient_checkpointing: bool = True, beta: float = 0.0, lora_r: int = 16) -> Plan:
    a = resolve_arch(model)
    shard = max(1, gpus)  # ZeRO-3 / FSDP: weights, gradients and optimizer states split across GPUs
    weights = 2 * a.params / shard  # bf16
    trainable = lora_r * a.layers * (8 * a.hidden + 3 * (a.hidden + a.ffn)) if lora else a.params
    grads = 2 * trainable / (1 if lora else shard)
    adam_bytes = 8 if optimizer_bits == 32 else 2  # two moments, fp32 or 8-bit
    optimizer = 0.0 if offload else adam_bytes * trainable / (1 if lora else shard)
    reference = 0.0 if (beta == 0 or lora) else weights  # LoRA's reference is the base with adapters off
    tokens = seq_len * micro_batch
    # Per layer, bf16, flash attention (no s^2 term): ~34 h bytes per token without recomputation
    # (Korthikanti et al. 2022); with checkpointing, the layer inputs (2 h bytes) plus one layer in full.
    per_token = (2 * a.hidden * a.layers + 34 * a.hidden) if gradient_checkpointing else 34 * a.hidden * a.layers
    activations = per_token * tokens
    logits = tokens * a.vocab * (2 + 4 + 4)  # bf16 logits, their fp32 log-softmax and its gradient
    vllm = vllm_share * gpu_memory_gb * GIB
    overhead = 1.5 * GIB  # CUDA context, allocator fragmentation, buffers
    total = weights + grads + optimizer + reference + activations + logits + vllm + overhead
    fits = total <= gpu_memory_gb * GIB
    settings = (f"{'LoRA r=' + str(lora_r) if lora else 'full fine-tuning'}, bf16, {gpus} GPU(s)"
                f"{' ZeRO-3/FSDP' if gpus > 1 else ''}, AdamW {optimizer_bits}-bit{' offloaded' if offload else ''}, "
                f"{seq_len} tokens x {micro_batch} per pass, gradient checkpointing "
                f"{'on' if gradient_checkpointing else 'off'}, beta {beta}, vLLM share {vllm_share:.0%}")
    g = lambda x: round(x / GIB, 1)  # noqa: E731
    return Plan(model, a.note or "from config.json", lora, gpus, gpu_memory_gb, g(weights), g(grads), g(optimizer),
                g(reference), g(activations), g(logits), g(vllm), g(total), fits, settings)


def render(plan: Plan) -> str:
    rows = [("weights (bf16)", plan.weights_gib), ("gradients", plan.gradients_gib),
            ("optimizer states", plan.optimizer_gib), ("reference model", plan.reference_gib),
            ("activations", plan.activations_gib), ("logits", plan.logits_gib), ("colocated vLLM", plan.vllm_gib)]
    lines = [f"{plan.model}: {plan.arch}", f"settings: {plan.settings}"]
    lines += [f"  {name:<18} {gib:8.1f} GiB" for name, gib in rows]
    lines.append(f"  {'total (+1.5 overhead)':<18} {plan.total_gib:8.1f} GiB of {plan.gpu_memory_gib:g} GiB per GPU: "
                 f"{'fits' if plan.fits else 'does NOT fit'}")
    return "\n".join(lines)


def alternatives(plan_args: dict[str, Any]) -> list[Plan]:
    """Settings that would fit when the asked-for one does not: LoRA, 8-bit AdamW, offload, more GPUs."""
    tries = [{"lora": True}, {"optimizer_bits": 8}, {"offload": True}, {"lora": True, "vllm_share": 0.0}]
    tries += [{"gpus": n} for n in (2, 4, 8)]
    out = []
    for change in tries:
        p = estimate(**{**plan_args, **change})
        if p.fits and all(q.settings != p.settings for q in out):
            out.append(p)
    return out
