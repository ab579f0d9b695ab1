"""``grpo.bf16: auto``: bf16 autocast only where the hardware computes bf16 natively; float32 where autocast would
emulate it (on an AVX2-only CPU, 46x slower matmuls: the demo recipe stalled there)."""

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


@pytest.mark.parametrize("flags, expected", [({"avx2", "amx_bf16"}, True), ({"avx2"}, False)])
def test_auto_reaches_both_trainers_as_the_machine_decides(monkeypatch, flags, expected):
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


def test_the_warm_start_trains_in_the_same_precision(monkeypatch, tmp_path):
    pytest.importorskip("trl")
    from haggler.engine.backends.embedded import resolve_model_path
    from haggler.training.sft import _sft_trainer

    monkeypatch.setattr(common, "cpu_flags", lambda cpuinfo=None: {"amx_bf16"})
    cfg = load_config(CONFIGS / "demo.yaml", {"output_dir": str(tmp_path)})
    model, tokenizer = common.load_policy(resolve_model_path(cfg.model), cfg.dtype)
    rows = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}]
    assert _sft_trainer(cfg, model, tokenizer, rows).args.bf16
    monkeypatch.setattr(common, "cpu_flags", lambda cpuinfo=None: {"avx2"})
    assert not _sft_trainer(cfg, model, tokenizer, rows).args.bf16
