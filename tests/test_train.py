"""GRPO training on TRL with a tiny model built here (real SmolLM2 tokenizer and template), on CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

from haggler.agents.registry import AgentContext  # noqa: E402
from haggler.engine.card import read_card  # noqa: E402
from haggler.evaluation.runner import run  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.evaluation.grid import make_grid, write_grid  # noqa: E402
from haggler.core.scenario import write_scenarios  # noqa: E402
from haggler.core.score import score  # noqa: E402
from haggler.engine.card import read_card  # noqa: E402
from haggler.training.grpo import (  # noqa: E402
    NegotiationRollout, build_trainer, latest_checkpoint, save_final, training_tasks, write_log,
)
from haggler.core.config import ConfigError  # noqa: E402
from haggler.training.config import load_config  # noqa: E402
from tests.conftest import biased_tiny_model, mask_runs  # noqa: E402


def config(tmp_path, **over):
    data = {"model": "default", "output_dir": str(tmp_path / "out"), "dtype": "float32",
            "scenarios": {"n": 6, "seed": 1001, "max_turns": 4},
            "buyers": [{"spec": "scripted:conceder"}, {"spec": "scripted:linear"}],
            "prompt": {"message_tokens": 0, "slot_tokens": 3, "action_tokens": 3},
            "grpo": {"learning_rate": 5e-3, "max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8,
                     "save_steps": 1, "report_to": "none", "use_cpu": True, "bf16": False, "seed": 3}}
    for k, v in over.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) else v
    return load_config(data=data)


class Recorder(NegotiationRollout):
    """The real rollout function, keeping what it returned and the engine's own scores of each game."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = []

    def _collect(self, prompts, games, processes=1):
        out = super()._collect(prompts, games, processes)
        engine = [score(g.negotiation, self.cfg.no_deal).seller_score for g in games]
        texts = [g.agents["seller"].generated_texts for g in games]
        self.calls.append({"prompts": list(prompts), "out": out, "engine": engine, "texts": texts,
                           "games": games})
        return out


def trainer_for(cfg, tokenizer, model, callbacks=None):
    tasks = training_tasks(cfg)
    rollout = Recorder(cfg, tasks)
    trainer = build_trainer(cfg, model, tokenizer, tasks, rollout=rollout, callbacks=callbacks)
    seen = {"rewards": [], "loss_inputs": []}
    reward_func = trainer.reward_funcs[0]

    def recording_reward(*args, **kwargs):
        r = reward_func(*args, **kwargs)
        seen["rewards"].append(list(r))
        return r

    recording_reward.__name__ = reward_func.__name__
    trainer.reward_funcs[0] = recording_reward
    original = trainer.compute_loss

    def recording_loss(model, inputs, *a, **kw):
        seen["loss_inputs"].append({k: v.detach().clone() for k, v in inputs.items() if torch.is_tensor(v)})
        return original(model, inputs, *a, **kw)

    trainer.compute_loss = recording_loss
    return trainer, rollout, seen


def test_two_grpo_steps_train_on_exactly_the_sellers_tokens_and_resume_at_step_two(tmp_path, tokenizer):
    cfg = config(tmp_path)
    model = biased_tiny_model(tokenizer)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer, rollout, seen = trainer_for(cfg, tokenizer, model)
    trainer.train()
    assert trainer.state.global_step == 2 and len(rollout.calls) == 2

    for call, rewards in zip(rollout.calls, seen["rewards"]):
        # groups: G consecutive copies of one task, i.e. one scenario, buyer, buyer seed and opener
        prompts = call["prompts"]
        assert all(len(set(prompts[i:i + 4])) == 1 for i in range(0, len(prompts), 4))
        for i in range(0, len(prompts), 4):
            games = call["games"][i:i + 4]
            assert len({(g.negotiation.scenario.id, g.negotiation.config.opener) for g in games}) == 1
            if games[0].negotiation.config.opener == "buyer":  # the same buyer seed: the same opening offer
                assert len({g.negotiation.turns[0].action for g in games}) == 1
        # the rewards TRL received are the engine's scores
        assert rewards == pytest.approx(call["engine"])
    # rewards varied inside some group, so there was something to learn...
    assert any(len(set(c["engine"][i:i + 4])) > 1 for c in rollout.calls for i in range(0, 8, 4))
    # ...and the weights moved
    after = dict(model.named_parameters())
    assert any(not torch.equal(before[k], after[k].detach()) for k in before)

    # the rollouts' figures reached TRL's log through its public log_metric, one rollout per step here
    logged = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logged) == 2
    for call, h in zip(rollout.calls, logged):
        out = call["out"]
        assert h["negotiation/deal_rate"] == pytest.approx(sum(out["deal"]) / 8)
        assert h["negotiation/seller_turns"] == pytest.approx(sum(out["seller_turns"]) / 8)
        assert h["negotiation/invalid_action_rate"] == pytest.approx(sum(out["invalid_share"]) / 8)
        assert h["negotiation/error_rate"] == 0 and h["rollout/seconds"] > 0 and h["rollout/sampled_tokens_per_s"] > 0
        split = [len(set(out["deal"][i:i + 4])) > 1 for i in range(0, 8, 4)]  # groups: 4 consecutive copies
        assert h["negotiation/groups_split_on_deal"] == pytest.approx(sum(split) / 2)
        assert h["negotiation/seller_score"] == pytest.approx(sum(out["seller_score"]) / 8)
    assert any(h["negotiation/groups_split_on_deal"] > 0 for h in logged)  # the figure was tested off zero
    # the run's summary holds the rollouts' score beside the reward (they differ under reward: outcome)
    summary = write_log(trainer, cfg)
    assert summary["seller_score_first_fifth"] == pytest.approx(logged[0]["negotiation/seller_score"])
    assert summary["seller_score_last_fifth"] == pytest.approx(logged[1]["negotiation/seller_score"])
    assert "tokens_per_s" not in logged[0] and logged[1]["tokens_per_s"] > 0  # measured from the second step on

    # the loss mask is exactly the seller's sampled tokens (TRL shuffles rows: match them by their tokens)
    for call, inputs in zip(rollout.calls, seen["loss_inputs"]):
        by_tokens = {tuple(c): (m, t) for c, m, t in zip(call["out"]["completion_ids"], call["out"]["env_mask"],
                                                         call["texts"])}
        lengths = inputs["completion_mask"].sum(1).tolist()
        loss_mask = (inputs["completion_mask"] * inputs["tool_mask"]).tolist()
        assert len(lengths) == 8
        for n, m, ids in zip(lengths, loss_mask, inputs["completion_ids"].tolist()):
            env_mask, texts = by_tokens[tuple(ids[:n])]
            assert m[:n] == env_mask and not any(m[n:])
            assert "".join(tokenizer.decode(ids[a:b]) for a, b in mask_runs(m)) == "".join(texts)

    out = Path(cfg.output_dir)
    assert (out / "checkpoint-2").is_dir() and latest_checkpoint(cfg.output_dir).endswith("checkpoint-2")

    # resume: a new process would rebuild everything; it continues at step 2, not 0
    cfg3 = config(tmp_path, grpo={"max_steps": 3})
    trainer3, rollout3, _ = trainer_for(cfg3, tokenizer, biased_tiny_model(tokenizer, seed=9))
    trainer3.train(resume_from_checkpoint=latest_checkpoint(cfg3.output_dir))
    assert trainer3.state.global_step == 3 and len(rollout3.calls) == 1
    # the resumed weights are the checkpoint's, not the fresh model's
    final = save_final(trainer3, cfg3, "tiny")
    marker = read_card(final)
    assert marker["steps"] == 3 and marker["prompt"]["message_tokens"] == 0
    assert (final / "config.json").is_file() and list(final.glob("*.safetensors"))


def test_equal_rewards_give_zero_advantage_and_no_update(tmp_path, tokenizer):
    cfg = config(tmp_path, grpo={"max_steps": 1})
    model = biased_tiny_model(tokenizer, allowed=("x", "y"))  # never a number: every action invalid
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer, rollout, _ = trainer_for(cfg, tokenizer, model)
    trainer.train()
    for i in range(0, 8, 4):
        assert len(set(rollout.calls[0]["engine"][i:i + 4])) == 1
    assert all(torch.equal(before[k], v.detach()) for k, v in model.named_parameters())


def test_the_trained_model_plays_in_haggler_run(tmp_path, tokenizer):
    cfg = config(tmp_path, grpo={"max_steps": 1})
    trainer, _, _ = trainer_for(cfg, tokenizer, biased_tiny_model(tokenizer))
    trainer.train()
    final = save_final(trainer, cfg, "tiny")
    scenarios = generate_scenarios(2, 77, max_turns=4)
    write_scenarios(scenarios, tmp_path / "eval.jsonl")
    write_grid(make_grid([s.id for s in scenarios], ["scripted:conceder"], ["seller"]), tmp_path / "grid.jsonl")
    report = run(tmp_path / "grid.jsonl", tmp_path / "eval.jsonl", f"hf:{final}", tmp_path / "results.jsonl")
    assert report.played == 2 and report.errors == 0
    record = json.loads((tmp_path / "results.jsonl").read_text().splitlines()[0])
    # it plays in the format it was trained on (no message slot), recorded with the results
    assert record["agents"]["seller"]["max_tokens"]["message"] == 0
    assert record["agents"]["seller"]["prompt"] == read_card(final)["prompt"]  # the whole format, as played


def test_a_group_is_split_on_deal_when_some_copies_dealt_and_some_did_not():
    from haggler.training.groups import split_on_deal

    # rows of two ranks, a group's copies spread over both: "a" split, "b" all dealt, "c" none, "d" split
    rows = [("a", True), ("b", True), ("c", False), ("d", False), ("a", False), ("b", True), ("c", False),
            ("d", True)]
    assert split_on_deal(rows) == pytest.approx(0.5)
    assert split_on_deal([("a", True), ("a", True)]) == 0.0
    assert split_on_deal([]) == 0.0


def test_errored_rollouts_are_masked_out_and_take_their_groups_mean(tmp_path, tokenizer):
    from haggler.engine.backends.hf import HFModel
    from haggler.training.groups import fill_errored_with_group_mean

    scores = [0.2, None, 0.6, None]
    fill_errored_with_group_mean(["a", "a", "b", "b"], scores)
    assert scores == [0.2, 0.2, 0.6, 0.6]
    # a group spanning ranks: the mean is over every rank's copies, and a rank whose copies all errored gets it too
    scores = [None, None]
    fill_errored_with_group_mean(["a", "a"], scores, [("a", None), ("a", None), ("a", 0.3), ("a", 0.5)])
    assert scores == [pytest.approx(0.4), pytest.approx(0.4)]
    cfg = config(tmp_path)
    rollout = NegotiationRollout(cfg, training_tasks(cfg), AgentContext())
    # a buyer that cannot be reached (no such endpoint): every negotiation of the group errors
    rollout.tasks = {k: t.__class__(t.key, t.scenario, "openai:nobody@nowhere", t.buyer_seed, t.opener)
                     for k, t in rollout.tasks.items()}
    model = HFModel("tiny", model=biased_tiny_model(tokenizer), tokenizer=tokenizer)
    key = next(iter(rollout.tasks))
    out = rollout.play(model, [key] * 4, 1.0)
    assert out["errored"] == [True] * 4
    assert all(sum(m) == 0 for m in out["env_mask"]) and out["seller_score"] == [0.0] * 4
    assert out["outcome"] == [0.0] * 4  # errored: the group mean, or 0 where the whole group errored
    assert all(len(c) == len(m) == len(lp) for c, m, lp in zip(out["completion_ids"], out["env_mask"], out["logprobs"]))


def test_training_refuses_evaluation_scenarios(tmp_path):
    scenarios = generate_scenarios(6, 1001, max_turns=4)
    write_scenarios(scenarios[2:3], tmp_path / "eval.jsonl")
    cfg = config(tmp_path, exclude_scenarios=[str(tmp_path / "eval.jsonl")])
    with pytest.raises(ConfigError, match="exclude_scenarios"):
        training_tasks(cfg)


@pytest.mark.parametrize("body, key", [
    ("model: default\noutput_dir: x\ngrpo: {learning_rate: -1.0}\n", "grpo.learning_rate"),
    ("model: default\noutput_dir: x\ngrpo: {learnig_rate: 1.0e-5}\n", "grpo.learnig_rate: unknown key"),
    ("output_dir: x\n", "model: required key is missing"),
    ("model: /no/such/model/folder\noutput_dir: x\n", "model: no model folder at /no/such/model/folder"),
    ("model: default\noutput_dir: x\nbuyers: [{spec: 'scripted:nobody'}]\n", "buyers"),
    ("model: default\noutput_dir: x\ngrpo: {num_generations: 3, per_device_train_batch_size: 8}\n", "num_generations"),
])
def test_a_bad_config_fails_before_any_model_loads_naming_the_key(tmp_path, body, key):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    code = ("import sys; from haggler.cli import main; rc = main(['train', '--config', sys.argv[1]]);"
            "print('rc', rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert "rc 2 False False" in done.stdout, done.stdout + done.stderr
    assert key in done.stderr and str(path) in done.stderr


def test_overrides_reach_the_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: default\noutput_dir: x\n")
    cfg = load_config(path, {"grpo.learning_rate": 3e-6, "grpo.max_steps": 7, "output_dir": "y", "lora.r": 8})
    assert (cfg.grpo.learning_rate, cfg.grpo.max_steps, cfg.output_dir, cfg.lora.r) == (3e-6, 7, "y", 8)
    with pytest.raises(ConfigError, match="grpo.beta"):
        load_config(path, {"grpo.beta": -1})


def test_lora_training_saves_a_merged_plain_model(tmp_path, tokenizer):
    pytest.importorskip("peft")
    cfg = config(tmp_path, grpo={"max_steps": 1}, lora={"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    base = biased_tiny_model(tokenizer)
    trainer, _, _ = trainer_for(cfg, tokenizer, base)
    trainer.train()
    final = save_final(trainer, cfg, "tiny")
    assert not (final / "adapter_config.json").exists()  # merged: an ordinary model folder
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(final)
    assert not any("lora" in name for name in reloaded.state_dict())
    assert read_card(final)["config"]["lora"]["r"] == 4


def test_a_seller_that_never_spoke_gives_its_first_prompt_and_one_masked_end_of_turn(tokenizer):
    from haggler.agents.format.prompts import PromptSettings, observe, system_prompt_for
    from haggler.agents.llm import HFAgent
    from haggler.core.protocol import Negotiation, ProtocolConfig
    from haggler.engine.backends.hf import HFModel

    s = generate_scenarios(1, 5, max_turns=4)[0]
    settings = PromptSettings(message_tokens=0, action_tokens=3, slot_tokens=3)
    model = HFModel("tiny", model=biased_tiny_model(tokenizer), tokenizer=tokenizer)
    ended = Negotiation(s, ProtocolConfig(opener="buyer"))
    ended.fail("the buyer could not be built")
    idle = HFAgent(model, s, "seller", settings, 1.0, "hf:tiny")
    tr = idle.final_trajectory(ended)
    prompt = tokenizer.apply_chat_template(
        [{"role": "system", "content": system_prompt_for(s, "seller", settings)},
         {"role": "user", "content": observe(ended, "seller")}], add_generation_prompt=True, tokenize=True)
    assert tr.prompt_ids == list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    assert (tr.completion_ids, tr.env_mask, tr.logprobs) == ([tokenizer.eos_token_id], [0], [0.0])
    assert idle.trajectory is None and idle.sequence is None  # asking changed nothing
    # an agent that spoke gives its own trajectory
    played = Negotiation(s, ProtocolConfig(opener="seller"))
    speaker = HFAgent(model, s, "seller", settings, 1.0, "hf:tiny")
    speaker.respond(played)
    assert speaker.final_trajectory(played) is speaker.trajectory and speaker.trajectory.env_mask


def test_two_runs_with_one_seed_train_identical_weights_and_sellers_sample_from_their_own_streams(tmp_path, tokenizer):
    """Training is reproducible: two runs with one seed end with identical weights. The sellers' samples come
    from streams seeded by the run's seed, the rollout and the copy's place in its group, not from the
    process's shared stream: moved, it changes no rollout (TRL's own shuffles do use it, so only the first
    rollout, before any update, is compared there); another seed changes them."""
    def train(name, seed=3, steps=2, global_seed=None):
        cfg = config(tmp_path / name, grpo={"seed": seed, "save_steps": 10, "max_steps": steps})
        model = biased_tiny_model(tokenizer)
        trainer, rollout, _ = trainer_for(cfg, tokenizer, model)
        if global_seed is not None:
            torch.manual_seed(global_seed)
        trainer.train()
        weights = {k: v.detach().clone() for k, v in model.named_parameters()}
        return weights, rollout.calls[0]["out"]["completion_ids"]

    first, first_rollout = train("a")
    second, _ = train("b")
    assert all(torch.equal(first[k], second[k]) for k in first)
    _, moved = train("c", steps=1, global_seed=12345)
    assert moved == first_rollout
    _, other = train("d", seed=4, steps=1)
    assert other != first_rollout


def test_validation_plays_the_held_out_set_at_step_zero_and_every_eval_steps(tmp_path, tokenizer):
    """The same held-out negotiations at steps 0, 1 and 2: logged next to TRL's metrics with the paired,
    scenario-clustered change from step 0 (zero at step 0, by construction), kept per negotiation."""
    from haggler.training.recipe import restore_best
    from haggler.training.validation import ValidationLog, validation_cases

    cfg = config(tmp_path, validation={"n": 2, "seed": 3001, "eval_steps": 1, "select": "best", "bootstrap": 200})
    cases = validation_cases(cfg)
    assert len(cases) == 2 * 2 * 2  # scenarios x the pool's two buyers x both openers
    trainer = build_trainer(cfg, biased_tiny_model(tokenizer), tokenizer)
    trainer.train()
    entries = ValidationLog(cfg.output_dir).entries()
    assert [e["step"] for e in entries] == [0, 1, 2]
    assert all(len(e["rows"]) == len(cases) for e in entries)
    assert entries[0]["validation/score_change"] == 0.0
    logged = [h for h in trainer.state.log_history if "validation/score" in h]
    assert [h["step"] for h in logged] == [0, 1, 2] and "reward" not in logged[0]
    # TRL's own step log is intact at every step, validated ones included (validation's log used to clear the
    # step's should_log: the loss and reward of every validated step were lost)
    assert [h["step"] for h in trainer.state.log_history if "loss" in h and "reward" in h] == [1, 2]
    for e in entries[1:]:  # the change is the mean of per-negotiation differences from step 0
        diffs = [r["score"] - b["score"] for r, b in zip(e["rows"], entries[0]["rows"])]
        assert e["validation/score_change"] == pytest.approx(sum(diffs) / len(diffs))
        assert e["validation/score_change_low"] <= e["validation/score_change"] <= e["validation/score_change_high"]
    best = max(entries, key=lambda e: e["validation/score"])
    assert restore_best(trainer)["step"] == best["step"]
    for e in entries:  # the behaviour figures are the means of the negotiations' own
        offers = [r["behaviour"]["seller_offers"] for r in e["rows"]]
        losses = [float(r["behaviour"]["loss_accepted"]) for r in e["rows"]]
        assert "validation/seller_offers" not in e  # a count, not one of the summary's behaviour figures
        assert e["validation/loss_accepted"] == pytest.approx(sum(losses) / len(losses)) and offers


def test_select_best_keeps_only_the_trained_weights_and_puts_the_best_steps_back(tmp_path, tokenizer):
    """A LoRA run with ``select: best`` keeps copies of its adapters only, not of the frozen base (671 MB held
    under the demo's peak), and puts back the best step's adapters exactly. Step 1 is made the best by hand, so
    the weights put back are not the last step's."""
    pytest.importorskip("peft")
    from haggler.training.callbacks import ValidationCallback
    from haggler.training.recipe import restore_best

    cfg = config(tmp_path, grpo={"max_steps": 2}, lora={"r": 4, "alpha": 8},
                 validation={"n": 1, "seed": 3001, "eval_steps": 1, "select": "best", "bootstrap": 200})
    trainer = build_trainer(cfg, biased_tiny_model(tokenizer), tokenizer)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, ValidationCallback))
    model = trainer.accelerator.unwrap_model(trainer.model)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    seen, play, evaluate = {}, callback.validator.play, callback.evaluate

    def play_step_one_best(m, temperature, *a):
        rows = play(m, temperature, *a)
        return [{**r, "score": r["score"] + (10.0 if len(seen) == 1 else 0.0)} for r in rows]

    def evaluate_and_keep(step):
        summary = evaluate(step)
        seen[step] = {n: p.detach().clone() for n, p in model.named_parameters() if n in trained}
        assert set(callback.best[2]) == trained  # the adapters, nothing of the base
        return summary

    callback.validator.play, callback.evaluate = play_step_one_best, evaluate_and_keep
    trainer.train()
    assert sorted(seen) == [0, 1, 2] and trained and all("lora_" in n for n in trained)
    assert any(not torch.equal(seen[1][n], seen[2][n]) for n in trained)  # step 2 moved the adapters
    assert restore_best(trainer)["step"] == 1
    now = dict(model.named_parameters())
    assert all(torch.equal(now[n], seen[1][n]) for n in trained)


def test_validation_plays_at_its_own_temperature_else_the_rollouts(tmp_path, tokenizer):
    """validation.temperature (here 0: greedy) is what every validation plays at, not the rollouts' 1.0; unset,
    validation samples as the rollouts do."""
    from haggler.training.callbacks import ValidationCallback
    from haggler.training.validation import ValidationLog

    cfg = config(tmp_path, grpo={"max_steps": 1, "temperature": 1.0},
                 validation={"n": 1, "seed": 3001, "eval_steps": 1, "temperature": 0.0, "bootstrap": 200})
    trainer = build_trainer(cfg, biased_tiny_model(tokenizer), tokenizer)
    callback = next(c for c in trainer.callback_handler.callbacks if isinstance(c, ValidationCallback))
    played, play = [], callback.validator.play
    callback.validator.play = lambda model, temperature, *a: played.append(temperature) or play(model, temperature, *a)
    trainer.train()
    assert played == [0.0, 0.0]  # steps 0 and 1
    assert trainer.args.temperature == 1.0
    # and the log says so beside the figures
    assert [e["validation/temperature"] for e in ValidationLog(cfg.output_dir).entries()] == [0.0, 0.0]
    unset = cfg.model_copy(update={"validation": cfg.validation.model_copy(update={"temperature": None})})
    callback.validator.cfg = unset
    assert callback.temperature(trainer) == 1.0


def test_validation_summary_states_the_sellers_behaviour():
    """Known rows: the means of each behaviour figure over the negotiations that have it (booleans as rates)."""
    from haggler.training.validation import summarize

    def row(case, score, opening, accepted, loss, walked):
        return {"case": case, "scenario": f"s{case // 2}", "score": score, "deal": accepted is not None,
                "errored": False, "invalid": 0.0,
                "behaviour": {"opening_offer_utility": opening, "concession": 0.1, "accepted_offer_utility": accepted,
                              "loss_accepted": loss, "seller_walked_away": walked, "buyer_walked_away": False,
                              "turns_to_agreement": 3 if accepted is not None else None,
                              "buyer_utility": 0.5 if accepted is not None else None}}

    rows = [row(0, 0.4, 0.9, 0.3, True, False), row(1, 0.6, 0.7, None, False, True),
            row(2, 0.5, None, 0.7, False, False), row(3, 0.5, 0.8, None, False, False)]
    out = summarize(rows, rows, 200)
    assert out["validation/opening_offer_utility"] == pytest.approx(0.8)  # the seller that never offered is out
    assert out["validation/accepted_offer_utility"] == pytest.approx(0.5)
    assert out["validation/loss_accepted"] == pytest.approx(0.25)
    assert out["validation/seller_walked_away"] == pytest.approx(0.25)
    assert out["validation/turns_to_agreement"] == pytest.approx(3.0)
    assert out["validation/score_change"] == 0.0


def test_validation_refuses_held_out_scenarios_that_are_training_ones(tmp_path):
    from haggler.training.validation import validation_cases

    cfg = config(tmp_path, validation={"n": 3, "seed": 1001})  # the training scenarios' own seed
    with pytest.raises(ConfigError, match="validation"):
        validation_cases(cfg)


def test_a_lora_policy_samples_with_its_adapters_merged_and_trains_with_them_apart(tokenizer):
    """Rollouts and validation sample from the LoRA policy with the adapters merged (a plain forward per token):
    the same next-token distribution as the adapters computed apart, and afterwards the adapters are apart
    again, the base weights as they were, and training mode back."""
    import types

    import torch
    from peft import LoraConfig, get_peft_model

    from conftest import tiny_model
    from haggler.training.common import sampling_mode

    base = tiny_model(tokenizer).model
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # B starts at zero: give the adapters something to say
    base_before = {k: v.clone() for k, v in base.state_dict().items() if "lora" not in k}
    ids = torch.tensor([tokenizer.encode("The buyer offers $20")])
    model.eval()
    with torch.no_grad():
        apart = model(input_ids=ids).logits
        no_adapters = model.get_base_model()
        with model.disable_adapter():
            plain = model(input_ids=ids).logits
    assert not torch.allclose(apart, plain, atol=1e-3)  # the adapters matter
    model.train()
    trainer = types.SimpleNamespace(model=model, args=types.SimpleNamespace(use_vllm=False),
                                    accelerator=types.SimpleNamespace(unwrap_model=lambda m: m))
    with sampling_mode(trainer):
        assert not model.training
        layer = next(m for m in model.modules() if hasattr(m, "merged") and hasattr(m, "lora_A"))
        assert layer.merged  # sampling reads merged weights
        with torch.no_grad():
            merged = no_adapters(input_ids=ids).logits
    assert torch.allclose(merged, apart, atol=1e-4)
    assert model.training and not layer.merged
    after = {k: v for k, v in base.state_dict().items() if "lora" not in k}
    for k, v in base_before.items():
        assert torch.allclose(after[k], v, atol=1e-6), k


def test_lora_on_the_top_layers_adapts_and_trains_only_those(tmp_path, tokenizer):
    """``lora.layers: 1`` on a two-layer model: adapters on every linear module of the top layer only (the
    backward pass can stop there), and a GRPO step moves them and nothing else."""
    model = biased_tiny_model(tokenizer)
    cfg = config(tmp_path, lora={"r": 4, "alpha": 8, "layers": 1}, grpo={"max_steps": 1})
    trainer, _, _ = trainer_for(cfg, tokenizer, model)
    peft_model = trainer.accelerator.unwrap_model(trainer.model)
    adapted = {n.split(".lora_A")[0] for n, _ in peft_model.named_parameters() if ".lora_A" in n}
    assert adapted and all(".layers.1." in n for n in adapted)
    assert {n.rsplit(".", 1)[-1] for n in adapted} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                        "up_proj", "down_proj"}
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n and ".layers.1." in n for n in trainable)
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    trainer.train()
    moved = {n for n, p in peft_model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert moved and moved <= trainable
    with pytest.raises(ValueError, match="lora.layers"):
        from haggler.training.lora import peft_config

        peft_config(config(tmp_path, lora={"layers": 3}), model)


def test_resume_skips_a_checkpoint_left_half_written(tmp_path):
    """A run killed while saving leaves checkpoint-N without trainer_state.json (the Trainer writes it last):
    resuming takes the newest complete one, and none where none is complete."""
    for step, complete in ((2, True), (10, True), (12, False), (3, False)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        (d / "model.safetensors").write_text("")
        if complete:
            (d / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-10")  # 10 > 2 by number, not by text
    empty = tmp_path / "only-partial"
    (empty / "checkpoint-1").mkdir(parents=True)
    assert latest_checkpoint(str(empty)) is None
    assert latest_checkpoint(str(tmp_path / "absent")) is None


def test_a_step_whose_every_negotiation_errors_stops_the_run_and_saves_no_model(tmp_path):
    """The buyer's server is down: before, the run trained on reward 0 for every step, exited 0 and saved final/."""
    (tmp_path / "endpoints.yaml").write_text(
        "endpoints:\n  pool: {base_url: 'http://127.0.0.1:9/v1', api_key_env: HAGGLER_TEST_KEY, max_retries: 1,"
        " backoff_s: 0.01, timeout_s: 2}\n")
    (tmp_path / "train.yaml").write_text(
        f"model: default\noutput_dir: {tmp_path / 'out'}\ndtype: float32\nendpoints: {tmp_path / 'endpoints.yaml'}\n"
        "scenarios: {n: 2, max_turns: 4}\nbuyers: [{spec: 'openai:some-model@pool'}]\n"
        "prompt: {message_tokens: 0}\n"
        "grpo: {max_steps: 3, num_generations: 2, per_device_train_batch_size: 4, save_steps: 1, report_to: none,"
        " use_cpu: true, bf16: false}\n")
    done = subprocess.run([sys.executable, "-m", "haggler.cli", "train", "--config", str(tmp_path / "train.yaml")],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "HAGGLER_TEST_KEY": "k"})
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "training step 1: 4 of 4 negotiations errored" in done.stderr and "endpoint 'pool' failed" in done.stderr
    assert not (tmp_path / "out" / "final").exists() and latest_checkpoint(str(tmp_path / "out")) is None
    assert "trained model" not in done.stdout


def test_a_share_of_errors_can_stop_the_run_sooner(tmp_path, tokenizer):
    from haggler.engine.backends.hf import HFModel
    from haggler.training.errors import RolloutErrors

    cfg = config(tmp_path, max_rollout_errors=0.5)
    rollout = NegotiationRollout(cfg, training_tasks(cfg), AgentContext())
    keys = list(rollout.tasks)
    rollout.tasks[keys[0]] = rollout.tasks[keys[0]].__class__(keys[0], rollout.tasks[keys[0]].scenario,
                                                              "openai:nobody@nowhere", 1, "seller")
    model = HFModel("tiny", model=biased_tiny_model(tokenizer), tokenizer=tokenizer)
    out = rollout.play(model, [keys[0]] * 2 + [keys[1]] * 2, 1.0)
    assert out["errored"] == [True, True, False, False]
    with pytest.raises(RolloutErrors, match="2 of 4 negotiations errored .*the first: could not build the buyer"):
        rollout.refuse_to_train_on_nothing(out["errored"], 0)
    rollout.cfg = config(tmp_path)  # the default: only a step with no negotiation that played stops
    rollout.refuse_to_train_on_nothing(out["errored"], 0)


def test_a_pool_buyer_at_a_named_endpoint_plays_in_rollouts_validation_and_the_warm_start(tmp_path, tokenizer,
                                                                                        monkeypatch):
    """Before, validation built its buyers without the run's endpoints ("no endpoint named 'pool' (known: none)")
    and the warm start's teacher games without any context."""
    from haggler.engine.backends.hf import HFModel
    from haggler.testing.openai_server import FakeChatServer
    from haggler.training.sft import warm_start_rows
    from haggler.training.validation import Validator

    monkeypatch.setenv("HAGGLER_TEST_KEY", "k")
    with FakeChatServer(content=lambda m: "Message: Fine.\nAction: walk away") as server:
        (tmp_path / "endpoints.yaml").write_text(
            f"endpoints:\n  pool: {{base_url: '{server.base_url}', api_key_env: HAGGLER_TEST_KEY, max_retries: 1,"
            " backoff_s: 0.01}\n")
        pool = [{"spec": "openai:fake-model@pool"}]
        cfg = config(tmp_path, endpoints=str(tmp_path / "endpoints.yaml"), buyers=pool,
                     validation={"n": 1, "seed": 3001}, warm_start={"scenarios": 1, "buyers": ["openai:fake-model@pool"]})
        model = HFModel("tiny", model=biased_tiny_model(tokenizer), tokenizer=tokenizer)
        rollout = NegotiationRollout(cfg, training_tasks(cfg))
        key = next(iter(rollout.tasks))
        answered = [server.answered]
        out = rollout.play(model, [key] * 2, 1.0)
        assert out["errored"] == [False, False], rollout.last_errors
        answered.append(server.answered)
        rows = Validator(cfg).play(model, 1.0)
        assert rows and not any(r["errored"] for r in rows), [r["error"] for r in rows]
        answered.append(server.answered)
        assert warm_start_rows(cfg, tokenizer)
        answered.append(server.answered)
        assert answered[0] < answered[1] < answered[2] < answered[3]  # the server answered in each of the three


def test_reward_outcome_pays_the_deals_sign_against_no_deal_and_logs_the_score_beside_it(tmp_path, tokenizer):
    from haggler.training.groups import sign_against_no_deal

    cfg = config(tmp_path, reward="outcome", grpo={"max_steps": 1})
    trainer, rollout, seen = trainer_for(cfg, tokenizer, biased_tiny_model(tokenizer))
    trainer.train()
    (call,), (rewards,) = rollout.calls, seen["rewards"]
    figures = [score(g.negotiation, cfg.no_deal) for g in call["games"]]
    # TRL received +1 for a deal worth more than no deal, -1 for one worth less, 0 for none: not the score
    assert rewards == [(f.seller_surplus > 0) - (f.seller_surplus < 0) if f.deal else 0 for f in figures]
    assert rewards != [f.seller_score for f in figures]
    (h,) = [h for h in trainer.state.log_history if "reward" in h]
    assert "rewards/outcome/mean" in h and "rewards/seller_score/mean" not in h
    # the score is still logged, from the same rollout
    assert h["negotiation/seller_score"] == pytest.approx(sum(f.seller_score for f in figures) / len(figures))
    assert [sign_against_no_deal(x) for x in (0.2, -1e-9, 0.0)] == [1.0, -1.0, 0.0]
