"""Small random checkpoints in the layouts of the model families people train and compare, built from
transformers' own config classes (``AutoConfig.for_model`` then ``from_config``), as transformers and vLLM
test every architecture: nothing is downloaded, and each layout exercises what its family's real checkpoints
do to the engine (sliding windows, KV-shared layers, per-layer inputs, two head sizes, MoE blocks, the hub's
multimodal class, soft caps). Used by the tests and by ``benchmarks/compat.py``.

The sliding window is small (``WINDOW`` positions) so that a short negotiation already passes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WINDOW = 16


@dataclass(frozen=True)
class Layout:
    """One row of the compatibility matrix: a family's layout, as a config built around a tokenizer."""

    name: str
    what: str  # what of the real family this layout exercises
    model_type: str
    settings: Callable[[Any], dict[str, Any]]  # tokenizer -> config keyword arguments
    gemma: bool = False  # built around the real Gemma tokenizer (its 262k vocabulary), not SmolLM2's


def _ids(tok: Any) -> dict[str, Any]:
    return {"vocab_size": len(tok), "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id,
            "bos_token_id": tok.bos_token_id}


def _gemma4_text(tok: Any, **extra: Any) -> dict[str, Any]:
    """Gemma 4's text stack at toy size: sliding and full layers (5:1 as on the hub, shortened), a full-layer
    head size of its own, per-layer input embeddings and the final-logit soft cap of E2B/E4B."""
    return {**_ids(tok), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "global_head_dim": 32,
            "sliding_window": WINDOW, "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": len(tok),
            "final_logit_softcapping": 30.0, "max_position_embeddings": 4096,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"] * 2, **extra}


def _gemma4_hub(tok: Any) -> dict[str, Any]:
    """The hub's form of E2B/E4B: a ``Gemma4Config`` (model_type ``gemma4``) whose text settings sit in
    ``text_config``, with (tiny) vision and audio towers; ``AutoModelForCausalLM`` builds
    ``Gemma4ForConditionalGeneration`` from it."""
    return {"text_config": _gemma4_text(tok, num_kv_shared_layers=2),
            "vision_config": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                              "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8},
            "audio_config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                             "output_proj_dims": 16, "subsampling_conv_channels": [4, 4]},
            "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id, "bos_token_id": tok.bos_token_id}


def _dense(tok: Any, **extra: Any) -> dict[str, Any]:
    return {**_ids(tok), "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 4096, **extra}


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in [
    Layout("gemma4-e2b", "Gemma 4 E2B/E4B text stack: KV-shared layers, per-layer inputs, soft cap, two head sizes",
           "gemma4_text", lambda t: _gemma4_text(t, num_kv_shared_layers=2), gemma=True),
    Layout("gemma4-hub", "Gemma 4 E2B as the hub ships it: Gemma4Config, the multimodal class, KV sharing",
           "gemma4", _gemma4_hub, gemma=True),
    Layout("gemma4-26b-a4b", "Gemma 4 26B-A4B: the MoE block beside the dense MLP, K = V on full layers",
           "gemma4_text", lambda t: _gemma4_text(t, hidden_size_per_layer_input=0, final_logit_softcapping=None,
                                                 enable_moe_block=True, num_experts=4, top_k_experts=2,
                                                 moe_intermediate_size=32, attention_k_eq_v=True,
                                                 num_global_key_value_heads=1), gemma=True),
    Layout("gemma4-31b", "Gemma 4 31B: dense, sliding and full layers, K = V on full layers",
           "gemma4_text", lambda t: _gemma4_text(t, hidden_size_per_layer_input=0, final_logit_softcapping=None,
                                                 attention_k_eq_v=True, num_global_key_value_heads=1), gemma=True),
    Layout("gemma2", "Gemma 2: alternating sliding and full layers, attention and final soft caps",
           "gemma2", lambda t: _dense(t, head_dim=16, sliding_window=WINDOW, final_logit_softcapping=30.0,
                                      attn_logit_softcapping=50.0), gemma=True),
    Layout("gemma3", "Gemma 3: 5 sliding layers to 1 full, two RoPE bases",
           "gemma3_text", lambda t: _dense(t, num_hidden_layers=6, head_dim=16, sliding_window=WINDOW), gemma=True),
    Layout("llama", "Llama (SmolLM2's layout): full attention only", "llama", _dense),
    Layout("qwen3", "Qwen3: full attention, q/k norms", "qwen3", lambda t: _dense(t, head_dim=16)),
    Layout("qwen3-moe", "Qwen3-MoE: sparse experts in every layer", "qwen3_moe",
           lambda t: _dense(t, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    Layout("mistral", "Mistral: one sliding window over every layer", "mistral",
           lambda t: _dense(t, head_dim=16, sliding_window=WINDOW)),
    Layout("phi3", "Phi-3: fused projections, sliding window", "phi3",
           lambda t: _dense(t, sliding_window=WINDOW, num_key_value_heads=4)),
]}


def small_checkpoint(name: str, tokenizer: Any, seed: int = 0, sharpen: float = 1.0) -> Any:
    """A random model in layout ``name`` (float32, eval mode), sized for ``tokenizer``'s vocabulary.
    ``sharpen`` scales the output embeddings so greedy choices are not near-ties."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    layout = LAYOUTS[name]
    torch.manual_seed(seed)
    config = AutoConfig.for_model(layout.model_type, **layout.settings(tokenizer))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if sharpen != 1.0:
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(sharpen)  # tied: the inputs too, which changes nothing here
    return model.eval()


NUMBERS = (" 1", " 2", " 3", "1", "2", "3")  # action and option numbers in haggler's cued slots


def number_speaker(tokenizer: Any, seed: int = 0, allowed: tuple[str, ...] = NUMBERS) -> Any:
    """A tiny random Llama that says mostly numbers (offers, accepts and walk-aways all happen, so rewards vary
    inside a group) through its weights alone, so that it survives ``save_pretrained`` and a reload in another
    process: every input embedding carries a constant in one dimension, which the final norm passes on, and the
    output rows of ``allowed`` (and end of turn) read it with a positive weight, every other row negative."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    ids = sorted({i for text in allowed for i in tokenizer.encode(text, add_special_tokens=False)})
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 4.0
        head = model.lm_head.weight
        head.mul_(5)
        head[:, 0] = -4.0
        head[ids, 0] = 4.0
        # a slot's answer ends at "\n" or end of turn: together as likely as a number (the final norm makes the
        # constant about 5.7, so 0.2 here is a logit gap of about 1.1), so "3" then a stop is the likeliest answer
        stops = [tokenizer.eos_token_id, *tokenizer.encode("\n", add_special_tokens=False)]
        head[stops, 0] = 4.2
    return model.eval()
