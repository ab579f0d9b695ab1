"""The imitation warm start: the loss sits on the teacher seller's tokens only, and its output is a model folder."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

from haggler.engine.card import read_card  # noqa: E402
from haggler.training.sft import is_done, run_warm_start, warm_start_rows  # noqa: E402
from haggler.core.config import ConfigError  # noqa: E402
from haggler.training.config import load_config  # noqa: E402
from haggler.agents.teacher import render_examples  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.training.common import training_format  # noqa: E402
from tests.conftest import mask_runs  # noqa: E402
from tests.conftest import biased_tiny_model  # noqa: E402


def cfg_for(tmp_path, model_dir):
    return load_config(data={
        "model": str(model_dir), "output_dir": str(tmp_path / "out"), "dtype": "float32",
        "prompt": {"message_tokens": 0},
        "warm_start": {"scenarios": 2, "seed": 11, "max_turns": 4, "batch_size": 2, "max_steps": 2,
                       "learning_rate": 1e-3, "buyers": ["scripted:conceder"]},
        "grpo": {"use_cpu": True, "bf16": False, "report_to": "none", "num_generations": 2,
                 "per_device_train_batch_size": 2}})


def test_labels_are_the_teachers_seller_tokens_only(tmp_path, tokenizer):
    cfg = cfg_for(tmp_path, "default")
    rows = warm_start_rows(cfg, tokenizer)
    examples = render_examples(tokenizer, generate_scenarios(2, 11, max_turns=4), "scripted:linear",
                               ["scripted:conceder"], training_format(cfg), 11)
    assert len(rows) == len(examples) == 4
    for row, (game, tr) in zip(rows, examples):
        assert len(row["input_ids"]) == len(row["labels"]) == len(tr.prompt_ids) + len(tr.completion_ids)
        trained = [1 if x != -100 else 0 for x in row["labels"]]
        spans = [tokenizer.decode(row["input_ids"][a:b]) for a, b in mask_runs(trained)]
        assert spans == [t for t in game.agents["seller"].generated_texts if t]
        assert all(row["labels"][i] == row["input_ids"][i] for i, m in enumerate(trained) if m)


def test_warm_start_writes_a_model_folder_that_records_its_format(tmp_path, tokenizer):
    folder = tmp_path / "tiny"
    model = biased_tiny_model(tokenizer)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    cfg = cfg_for(tmp_path, folder)
    assert not is_done(cfg)
    out = run_warm_start(cfg, log=lambda _: None)
    assert is_done(cfg)
    info = read_card(out)
    assert info["kind"] == "warm-start" and info["steps"] == 2 and info["prompt"]["message_tokens"] == 0
    assert info["prompt"] == training_format(cfg).model_dump()  # the whole format, as resolved
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    changed = any(not torch.equal(a, b) for (_, a), (_, b) in zip(
        sorted(reloaded.state_dict().items()),
        sorted(transformers.AutoModelForCausalLM.from_pretrained(folder).state_dict().items())))
    assert changed
    # a second call finds it done and does nothing
    assert run_warm_start(cfg, log=lambda _: None) == out


def test_a_warm_start_made_for_another_format_is_redone(tmp_path, tokenizer):
    folder = tmp_path / "tiny"
    biased_tiny_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    cfg = cfg_for(tmp_path, folder)
    run_warm_start(cfg, log=lambda _: None)
    assert is_done(cfg)
    other = cfg.model_copy(update={"prompt": cfg.prompt.model_copy(update={"slots": "indexed"})})
    assert not is_done(other)


def test_a_warm_start_from_before_a_prompt_option_existed_is_not_redone(tmp_path, tokenizer):
    """A card written before a prompt option was added lacks its key: the warm start was made in that option's
    default, so it is kept (a study copying or resuming it does not retrain it); a card naming an option haggler
    does not know, or another value, is redone."""
    from haggler.engine.card import write_card

    folder = tmp_path / "tiny"
    biased_tiny_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    cfg = cfg_for(tmp_path, folder)
    out = run_warm_start(cfg, log=lambda _: None)
    card = read_card(out)
    older = {k: v for k, v in card["prompt"].items() if k != "offer_verdict"}
    write_card(out, {**card, "prompt": older})
    assert is_done(cfg)
    assert not is_done(cfg.model_copy(update={"prompt": cfg.prompt.model_copy(update={"offer_verdict": True})}))
    write_card(out, {**card, "prompt": {**older, "a_later_option": 1}})
    assert not is_done(cfg)


def test_gradient_checkpointing_makes_the_same_warm_start(tmp_path, tokenizer):
    """It trades memory for a recomputed forward pass: the same weights, and a finished warm start is not redone
    when only this setting changes."""
    folder = tmp_path / "tiny"
    biased_tiny_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    plain = cfg_for(tmp_path / "a", folder)
    ckpt = cfg_for(tmp_path / "b", folder)
    ckpt = ckpt.model_copy(update={"warm_start": ckpt.warm_start.model_copy(update={"gradient_checkpointing": True})})
    weights = []
    for cfg in (plain, ckpt):
        out = run_warm_start(cfg, log=lambda _: None)
        weights.append(transformers.AutoModelForCausalLM.from_pretrained(out).state_dict())
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert is_done(plain.model_copy(update={"warm_start": ckpt.warm_start}))
    from haggler.training.sft import _sft_trainer

    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    trainer = _sft_trainer(ckpt, model, tokenizer, warm_start_rows(ckpt, tokenizer))
    assert trainer.args.gradient_checkpointing  # it reached the trainer (its effect: bench figures in demo.yaml)


def test_micro_batches_make_the_same_warm_start_as_one_pass(tmp_path, tokenizer):
    """A batch split into micro-batches (gradient accumulation) optimizes the same objective: the loss is
    normalized by the whole batch's label tokens, not averaged per micro-batch. The weights agree with one pass
    to float rounding, while a different batch (micro-batches as optimizer steps) lands far from both."""
    folder = tmp_path / "tiny"
    biased_tiny_model(tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)

    def trained(name, **ws):
        cfg = cfg_for(tmp_path / name, folder)
        cfg = cfg.model_copy(update={"warm_start": cfg.warm_start.model_copy(update=ws)})
        out = run_warm_start(cfg, log=lambda _: None)
        return transformers.AutoModelForCausalLM.from_pretrained(out).state_dict()

    cfg = cfg_for(tmp_path / "args", folder)
    cfg = cfg.model_copy(update={"warm_start": cfg.warm_start.model_copy(update={"micro_batch_size": 1})})
    from haggler.training.sft import _sft_trainer

    args = _sft_trainer(cfg, transformers.AutoModelForCausalLM.from_pretrained(folder), tokenizer,
                        warm_start_rows(cfg, tokenizer)).args
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (1, 2)  # it reached TRL
    whole = trained("whole")  # batch_size 2 in one pass
    micro = trained("micro", micro_batch_size=1)
    single = trained("single", batch_size=1)  # an optimizer step per example: another trajectory
    start = biased_tiny_model(tokenizer).state_dict()

    def gap(a, b):
        return max((a[k].float() - b[k].float()).abs().max().item() for k in a)

    moved = gap(whole, start)
    assert moved > 1e-3  # the warm start trained
    assert gap(micro, whole) < 1e-3 * moved  # the same update up to rounding
    assert gap(single, whole) > 0.1 * moved  # the comparison can tell trajectories apart
    assert read_card(tmp_path / "micro" / "out" / "warm-start")["steps"] == 2  # two optimizer steps, as whole's


def test_micro_batch_size_must_divide_the_batch():
    with pytest.raises(ConfigError, match="micro_batch_size"):
        load_config(data={"model": "default", "output_dir": "x",
                          "warm_start": {"batch_size": 4, "micro_batch_size": 3}})
