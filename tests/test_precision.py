"""``grpo.bf16: auto``: bf16 autocast on a GPU that computes bf16, float32 on every CPU, with or without bf16
instructions (with them, autocast made the demo slower and flipped its headline; without, 46x slower matmuls)."""

from pathlib import Path

import pytest

from haggler.training.config import load_config

pytest.importorskip("torch")

from haggler.training import common  # noqa: E402

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
INTEL_AMX = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AMD_AVX2 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\nprocessor\t: 1\nflags\t\t: fpu sse2 avx avx2 fma\n"
ARM_BF16 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"
ARM_OLD = "processor\t: 0\nFeatures\t: fp asimd evtstrm crc32\n"


def test_cpu_flags_are_read_from_either_spelling():
    assert {"avx512_bf16", "amx_bf16", "avx2"} <= common.cpu_flags(INTEL_AMX)
    assert "bf16" in common.cpu_flags(ARM_BF16)
    assert common.cpu_flags("") == set()


@pytest.mark.parametrize("cpuinfo, native", [(INTEL_AMX, True), (AMD_AVX2, False), (ARM_BF16, True),
                                             (ARM_OLD, False), ("", False)])
def test_native_bf16_on_the_cpu(cpuinfo, native):
    assert common.native_bf16(use_cpu=True, cpuinfo=cpuinfo) is native


@pytest.mark.parametrize("flags, expected", [({"avx2", "amx_bf16"}, False), ({"avx2", "avx512_bf16"}, False),
                                             ({"avx2"}, False)])
def test_auto_is_float32_on_every_cpu_and_reaches_both_trainers(monkeypatch, flags, expected):
    pytest.importorskip("trl")
    from haggler.training.grpo import grpo_args

    monkeypatch.setattr(common, "cpu_flags", lambda cpuinfo=None: set(flags))
    cfg = load_config(CONFIGS / "demo.yaml")
    assert cfg.grpo.bf16 == "auto" and cfg.grpo.use_cpu
    assert common.resolve_bf16(cfg) is expected
    assert grpo_args(cfg).bf16 is expected
    # an explicit setting is taken as given, whatever the machine
    for given in (True, False):
        pinned = cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"bf16": given})})
        assert common.resolve_bf16(pinned) is given and grpo_args(pinned).bf16 is given


def test_auto_is_bf16_on_a_gpu_that_computes_it(monkeypatch):
    import torch

    cfg = load_config(CONFIGS / "demo.yaml", {"grpo.use_cpu": False})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert common.resolve_bf16(cfg) is True
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert common.resolve_bf16(cfg) is False


def test_the_warm_start_trains_in_the_same_precision(monkeypatch, tmp_path):
    pytest.importorskip("trl")
    from haggler.engine.backends.embedded import resolve_model_path
    from haggler.training.sft import _sft_trainer

    monkeypatch.setattr(common, "cpu_flags", lambda cpuinfo=None: {"amx_bf16"})
    cfg = load_config(CONFIGS / "demo.yaml", {"output_dir": str(tmp_path)})
    model, tokenizer = common.load_policy(resolve_model_path(cfg.model), cfg.dtype)
    rows = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}]
    assert not _sft_trainer(cfg, model, tokenizer, rows).args.bf16  # auto: float32 on a CPU, AMX or not
    pinned = load_config(CONFIGS / "demo.yaml", {"output_dir": str(tmp_path), "grpo.bf16": True})
    assert _sft_trainer(pinned, model, tokenizer, rows).args.bf16
