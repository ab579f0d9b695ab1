"""The shipped configs load, and what they say reaches TRL and accelerate under the names those libraries use."""

import json
from pathlib import Path

import pytest

from haggler.training.config import load_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.parametrize("name", ["demo.yaml", "gemma4.yaml"])
def test_training_configs_load_and_build_trl_arguments(name, tokenizer):
    pytest.importorskip("trl")
    from haggler.training.grpo import grpo_args
    from haggler.training.lora import peft_config

    cfg = load_config(CONFIGS / name)
    # GPU-only settings switched off here only so that the arguments can be built on this CPU machine
    cpu = cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"bf16": False, "use_cpu": True,
                                                                     "use_vllm": False})})
    args = grpo_args(cpu)
    assert args.learning_rate == cfg.grpo.learning_rate and args.num_generations == cfg.grpo.num_generations
    assert args.temperature == cfg.grpo.temperature and args.top_k == 0 and args.top_p == 1.0
    assert args.beta == cfg.grpo.beta and args.loss_type == cfg.grpo.loss_type
    assert args.scale_rewards == cfg.grpo.scale_rewards
    model = None
    if cfg.lora is not None and cfg.lora.layers is not None:  # the top layers are counted on the model itself
        from haggler.engine.backends.embedded import resolve_model_path
        from haggler.training.common import load_policy

        model, _ = load_policy(resolve_model_path(cfg.model), cfg.dtype)
    elif cfg.lora is not None:  # the hub's checkpoint is out of reach here: a small one in its layout
        from haggler.testing.families import small_checkpoint

        model = small_checkpoint("gemma4-hub", tokenizer)
    lora = peft_config(cfg, model)
    assert (lora is None) == (cfg.lora is None)
    if model is not None:
        n = model.config.get_text_config(decoder=True).num_hidden_layers
        top = range(n - cfg.lora.layers, n) if cfg.lora.layers is not None else range(n)
        assert f"layers\\.({'|'.join(map(str, top))})\\." in lora.target_modules


def test_a_studys_advantage_scale_reaches_trl():
    """batch-study's one change to matched-study is the advantages' scale: TRL must receive it, or the study ran
    matched-study's recipe under another name."""
    pytest.importorskip("trl")
    from haggler.study.config import load_study, plan_arms
    from haggler.training.grpo import grpo_args

    scales = {}
    for name in ("matched-study.yaml", "batch-study.yaml"):
        _, trainings = plan_arms(load_study(CONFIGS / name))
        scales[name] = grpo_args(next(iter(trainings.values()))).scale_rewards
    assert scales == {"matched-study.yaml": "group", "batch-study.yaml": "batch"}


def test_gemma4_recipe_is_the_studys():
    cfg = load_config(CONFIGS / "gemma4.yaml")
    assert cfg.grpo.bf16 and cfg.grpo.use_vllm and cfg.lora is not None and cfg.warm_start is None
    assert cfg.validation is not None and cfg.validation.select == "best" and cfg.grpo.global_batch == 32
    text = (CONFIGS / "gemma4.yaml").read_text()
    for rate in ("1e-6", "3e-6", "1e-5"):
        assert rate in text


@pytest.mark.parametrize("name", ["fsdp2.yaml", "zero3.yaml"])
def test_accelerate_configs_parse(name):
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig

    c = ClusterConfig.from_yaml_file(str(CONFIGS / "accelerate" / name))
    assert c.mixed_precision == "bf16" and c.num_processes > 1
    assert str(c.distributed_type).endswith("FSDP" if name.startswith("fsdp") else "DEEPSPEED")


def test_the_gpu_check_trains_from_the_gemma4_recipe(tmp_path):
    """benchmarks/gpu_check.py derives its training run from configs/gemma4.yaml: it must keep loading,
    keep the recipe's GPU settings (bf16, LoRA, gradient checkpointing) and need nothing off the machine."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", CONFIGS.parent / "benchmarks" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    recipe = load_config(CONFIGS / "gemma4.yaml")
    cfg = load_config(gpu_check.train_config(tmp_path))
    assert cfg.model == "default" and cfg.endpoints is None and not cfg.grpo.use_vllm
    assert all(b.spec.startswith("scripted:") for b in cfg.buyers) and cfg.buyers
    assert (cfg.grpo.bf16, cfg.grpo.use_cpu, cfg.grpo.gradient_checkpointing) == (True, False, True)
    assert cfg.lora == recipe.lora and cfg.grpo.learning_rate == recipe.grpo.learning_rate


def test_training_plays_in_the_base_models_card_format_under_the_configs_explicit_fields():
    pytest.importorskip("transformers")  # the embedded model's folder (and its card) is made with it
    from haggler.training.common import training_format

    plain = training_format(load_config(data={"model": "default", "output_dir": "x"}))
    assert plain.message_tokens == 0  # the embedded model's card
    given = training_format(load_config(data={"model": "default", "output_dir": "x",
                                              "prompt": {"slots": "names", "action_tokens": 4}}))
    assert (given.slots, given.action_tokens, given.message_tokens) == ("names", 4, 0)


@pytest.mark.slow
def test_the_shipped_gemma4_recipe_trains_on_cpu_with_its_pool_buyer_at_the_named_endpoint(tmp_path, tokenizer,
                                                                                           monkeypatch):
    """configs/gemma4.yaml as shipped, with only the model (a small random Gemma 4 in E2B's KV-shared layout),
    sizes, steps and devices overridden; its endpoints file as shipped, the pool buyer's server a loopback one on
    the port that file names. Before: "no endpoint named 'pool' (known: none)" once validation was added."""
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    from haggler.testing.families import small_checkpoint
    from haggler.testing.openai_server import FakeChatServer
    from haggler.training.recipe import run_training

    small_checkpoint("gemma4-e2b", tokenizer, sharpen=4.0).save_pretrained(tmp_path / "gemma4")
    tokenizer.save_pretrained(tmp_path / "gemma4")
    monkeypatch.setenv("POOL_API_KEY", "local")
    overrides = {"model": str(tmp_path / "gemma4"), "output_dir": str(tmp_path / "run"), "dtype": "float32",
                 "scenarios.n": 4, "scenarios.max_turns": 4, "validation.n": 1, "validation.eval_steps": 1,
                 "prompt.reply_tokens": 16, "lora.r": 4, "lora.alpha": 8, "grpo.max_steps": 2,
                 "grpo.num_generations": 2, "grpo.per_device_train_batch_size": 4, "grpo.global_batch_size": 4,
                 "grpo.save_steps": 2, "grpo.report_to": "none", "grpo.bf16": False, "grpo.use_cpu": True,
                 "grpo.use_vllm": False, "grpo.gradient_checkpointing": False}
    cfg = load_config(CONFIGS / "gemma4.yaml", overrides)
    try:
        server = FakeChatServer(content=lambda m: "Message: No.\nAction: walk away").bind(8001)
    except OSError:
        pytest.skip("port 8001 (the shipped endpoints file's pool) is taken here")
    with server:
        final = run_training(cfg, log=lambda _: None)
    assert (final / "config.json").is_file()
    validation = [json.loads(x) for x in (tmp_path / "run" / "validation.jsonl").read_text().splitlines()]
    assert [v["step"] for v in validation] == [0, 1, 2]
    rows = [r for v in validation for r in v["rows"]]
    assert any(r["buyer"] == "openai:Qwen/Qwen3-8B@pool" for r in rows) and not any(r["errored"] for r in rows)
    assert server.answered > 0
