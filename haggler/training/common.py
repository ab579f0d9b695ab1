"""What the warm start and GRPO share: the prompt format they train in, the policy they load, and the
training scenarios (never one of an evaluation set's)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from haggler.agents.format.prompts import PromptSettings
from haggler.agents.registry import AgentContext, prompt_for_model
from haggler.core.config import ConfigError
from haggler.core.scenario import Scenario, fingerprint, load_scenarios
from haggler.engine.backends.openai_api import load_endpoints
from haggler.scenarios.generate import generate_scenarios
from haggler.training.config import TrainConfig


def training_format(cfg: TrainConfig) -> PromptSettings:
    """The format the model is warm-started and trained in (and its card records): the config's explicit
    ``prompt`` fields laid over the base model's card."""
    return prompt_for_model(cfg.model, cfg.prompt)


def excluded_fingerprints(paths: list[str]) -> set[str]:
    """The fingerprints of every scenario in these (evaluation) scenario files."""
    out: set[str] = set()
    for p in paths:
        out |= {fingerprint(s) for s in load_scenarios(p).values()}
    return out


def training_scenarios(cfg: TrainConfig) -> list[Scenario]:
    """The RL scenarios: generated or read from a file; refused if any is in ``exclude_scenarios``."""
    src = cfg.scenarios
    if src.file:
        scenarios = list(load_scenarios(src.file).values())
    else:
        scenarios = generate_scenarios(src.n, src.seed, max_turns=src.max_turns)
    banned = excluded_fingerprints(cfg.exclude_scenarios)
    clash = [s.id for s in scenarios if fingerprint(s) in banned]
    if clash:
        raise ConfigError(f"scenarios: {len(clash)} training scenario(s) also appear in exclude_scenarios "
                          f"(an evaluation set), e.g. {clash[:3]}; use another scenarios.seed or file")
    return scenarios


# CPU features (as Linux's /proc/cpuinfo names them) with native bf16 arithmetic: x86's AVX512-BF16 and AMX-BF16,
# Arm's BF16 extension.
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU's feature flags (x86 "flags", Arm "Features"); empty where /proc/cpuinfo is not there."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return set()
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            flags |= set(value.split())
    return flags


def native_bf16(use_cpu: bool, cpuinfo: str | None = None) -> bool:
    """Does this machine compute bf16 natively where training runs? On a CPU without it, autocast emulates bf16:
    on a 2-core AVX2 machine a 1024x576 by 576x1536 matmul took 1.7 s under bf16 autocast against 0.037 s in
    float32, and a demo GRPO step ran for minutes instead of half of one, while a CPU with AMX made the
    same update 1.5x faster than float32."""
    import torch  # lazy: config validation must not wait for torch

    if not use_cpu and torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    if not use_cpu:  # no GPU here: the update runs on the CPU, where "auto" means float32 (resolve_bf16)
        return False
    return bool(cpu_flags(cpuinfo) & BF16_CPU_FLAGS)


def resolve_bf16(cfg: TrainConfig) -> bool:
    """``grpo.bf16`` as the warm start and GRPO apply it. "auto": bf16 autocast on a GPU that computes bf16, float32
    on any CPU. Decided on a side-by-side measurement on a CPU that has bf16 instructions (2-core AMD EPYC with
    avx512_bf16, ``make demo`` from a fresh clone): autocast took 15m58s against 12m22s in float32, and the demo's
    headline changed sign (RL minus base +0.114 in float32, -0.128 with autocast). A CPU with AMX made one update
    1.5x faster, but a setting that changes conclusions is no default; ``bf16: true`` still asks for it."""
    g = cfg.grpo
    if g.bf16 == "auto":
        return not g.use_cpu and native_bf16(use_cpu=False)
    return bool(g.bf16)


def load_policy(path: str, dtype: str) -> tuple[Any, Any]:
    """The model to train and its tokenizer (given a pad token if it has none)."""
    # Lazy: torch and transformers (and the hf backend, which imports them) take seconds to import;
    # config validation and --help must not wait.
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from haggler.engine.backends.hf import torch_dtype

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype(dtype, device))
    return model, tokenizer


@contextmanager
def sampling_mode(trainer: Any) -> Iterator[None]:
    """The trainer's policy ready to sample (rollouts, validation): in eval mode, and, when it is a LoRA policy,
    with its adapters merged into the weights (peft's public ``merge_adapter``, what TRL does before it hands
    weights to vLLM), so that each sampled token costs a plain forward pass instead of one through every adapter.
    Training mode and the separate adapters come back afterwards, whatever happens. With vLLM the sampler is
    another engine that TRL feeds merged weights itself: nothing is merged here."""
    model = trainer.model
    was_training = bool(model.training)
    merged = False
    try:
        model.eval()
        if not trainer.args.use_vllm:
            merged = _merge(trainer.accelerator.unwrap_model(model))
        yield
    finally:
        if merged:
            trainer.accelerator.unwrap_model(model).unmerge_adapter()
        if was_training:
            model.train()


def _merge(model: Any) -> bool:
    try:
        from peft import PeftModel  # lazy and optional: only LoRA runs need peft
    except ImportError:
        return False
    if not isinstance(model, PeftModel):
        return False
    model.merge_adapter()
    return True


def buyer_context(cfg: TrainConfig, settings: PromptSettings, sample_seed: int | None) -> AgentContext:
    """The context every buyer of a training run is built in (rollouts, validation, the warm start's teacher games):
    the run's endpoints table, so that a pool buyer at a named endpoint (``openai:MODEL@pool``) is reachable
    wherever it plays, and buyers sampling from streams seeded by ``sample_seed``."""
    endpoints = load_endpoints(cfg.endpoints) if cfg.endpoints else {}
    return AgentContext(prompt=settings, temperature=cfg.buyer_temperature, endpoints=endpoints,
                        sample_seed=sample_seed)


def process_count() -> int:
    """How many processes train together: torch.distributed.run and accelerate launch set WORLD_SIZE for each."""
    return int(os.environ.get("WORLD_SIZE", "1"))
