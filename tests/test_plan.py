"""Memory estimates: the study's claim that the 4.5B seller trains on one 48 GB GPU, and under which settings."""

import pytest

from haggler.training.memory import alternatives, estimate, resolve_arch


def test_the_4_5b_seller_fits_one_48gb_gpu_with_lora_not_in_full():
    assert estimate("4.5B", lora=True, gpu_memory_gb=48, vllm_share=0.25).fits
    full = estimate("4.5B", lora=False, gpu_memory_gb=48)
    assert not full.fits
    assert any("LoRA" in p.settings for p in alternatives(dict(model="4.5B", gpu_memory_gb=48)))


def test_components_scale_as_they_should():
    a, b = estimate("2.3B", lora=False), estimate("31B", lora=False)
    assert b.weights_gib > 5 * a.weights_gib
    assert estimate("31B", lora=False, gpus=8).weights_gib == pytest.approx(b.weights_gib / 8, rel=0.05)
    assert estimate("4.5B", seq_len=8192).activations_gib == pytest.approx(
        2 * estimate("4.5B", seq_len=4096).activations_gib, rel=0.1)
    assert estimate("4.5B", beta=0.04).reference_gib > 0 and estimate("4.5B", beta=0.04, lora=True).reference_gib == 0


def test_models_resolve_by_size_id_or_folder():
    assert resolve_arch("google/gemma-4-E4B-it") == resolve_arch("4.5B")
    assert resolve_arch("some-org/model-31b-it") == resolve_arch("31B")
    with pytest.raises(ValueError, match="not a known size"):
        resolve_arch("mystery-model")


def test_the_embedded_model_is_read_from_its_config():
    pytest.importorskip("transformers")
    arch = resolve_arch("default")
    assert arch.note == "from config.json" and 1.2e8 < arch.params < 1.5e8  # SmolLM2-135M
