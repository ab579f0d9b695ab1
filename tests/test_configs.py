"""The shipped configs load, and what they say reaches TRL and accelerate under the names those libraries use."""

from pathlib import Path

import pytest

from haggler.training.config import load_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.mark.parametrize("name", ["demo.yaml", "gemma4.yaml"])
def test_training_configs_load_and_build_trl_arguments(name):
    pytest.importorskip("trl")
    from haggler.training.grpo import grpo_args, peft_config

    cfg = load_config(CONFIGS / name)
    # GPU-only settings switched off here only so that the arguments can be built on this CPU machine
    cpu = cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"bf16": False, "use_cpu": True,
                                                                     "use_vllm": False})})
    args = grpo_args(cpu)
    assert args.learning_rate == cfg.grpo.learning_rate and args.num_generations == cfg.grpo.num_generations
    assert args.temperature == cfg.grpo.temperature and args.top_k == 0 and args.top_p == 1.0
    assert args.beta == cfg.grpo.beta and args.loss_type == cfg.grpo.loss_type
    model = None
    if cfg.lora is not None and cfg.lora.layers is not None:  # the top layers are counted on the model itself
        from haggler.engine.backends.embedded import resolve_model_path
        from haggler.training.common import load_policy

        model, _ = load_policy(resolve_model_path(cfg.model), cfg.dtype)
    lora = peft_config(cfg, model)
    assert (lora is None) == (cfg.lora is None)
    if model is not None:
        n = model.config.num_hidden_layers
        assert list(lora.layers_to_transform) == list(range(n - cfg.lora.layers, n))


def test_gemma4_recipe_is_the_studys():
    cfg = load_config(CONFIGS / "gemma4.yaml")
    assert cfg.grpo.bf16 and cfg.grpo.use_vllm and cfg.lora is not None and cfg.warm_start is None
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
