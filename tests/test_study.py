"""The study end to end with a tiny model: train, evaluate, report; killed mid-way and resumed."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

from haggler.evaluation.results import read_records  # noqa: E402
from haggler.study.config import plan_arms
from haggler.study.run import run_study  # noqa: E402
from haggler.study.config import load_study  # noqa: E402
from haggler.engine.card import is_complete, read_card  # noqa: E402
from haggler.core.config import ConfigError  # noqa: E402
from tests.conftest import biased_tiny_model  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def write_study(tmp_path, tokenizer, steps=2, extra=""):  # noqa: F811
    model_dir = tmp_path / "tiny"
    if not model_dir.exists():
        biased_tiny_model(tokenizer).save_pretrained(model_dir)
        tokenizer.save_pretrained(model_dir)
    (tmp_path / "train.yaml").write_text(f"""
model: {model_dir}
output_dir: unused
dtype: float32
scenarios: {{n: 2, seed: 1001, max_turns: 4}}
buyers: [{{spec: "scripted:conceder"}}]
prompt: {{message_tokens: 0, slots: indexed, slot_tokens: 3, action_tokens: 3}}
warm_start: {{scenarios: 1, seed: 5, max_turns: 4, batch_size: 2, max_steps: 1, buyers: ["scripted:conceder"]}}
grpo: {{learning_rate: 1.0e-3, max_steps: {steps}, num_generations: 2, per_device_train_batch_size: 2,
        save_steps: 1, report_to: none, use_cpu: true, bf16: false}}
""")
    (tmp_path / "study.yaml").write_text(f"""
name: tiny-study
output_dir: {tmp_path / "study"}
training: train.yaml
bases:
  - {{name: tiny, model: {model_dir}, size: 0.001, warm_start: true, rl: [{{learning_rate: 1.0e-3}}]}}
references: [{{name: linear, spec: "scripted:linear"}}]
buyers: [{{spec: "scripted:tft", family: scripted}}, {{spec: "scripted:boulware", family: scripted}}]
grid: {{n: 2, seed: 7, max_turns: 4, openers: [seller]}}
evaluation: {{temperature: 1.0, prompt: {{message_tokens: 0}}, batch_size: 8}}
margin: 0.05
bootstrap: 200
{extra}""")
    return tmp_path / "study.yaml"


def check_complete(study_path, steps=2):
    cfg = load_study(study_path)
    arms, trainings = plan_arms(cfg)
    out = Path(cfg.output_dir)
    records = read_records(out / "results.jsonl")
    keys = [(r.seller, r.cell_id) for r in records]
    assert len(keys) == len(set(keys)) == 4 * 4  # 4 arms x 2 scenarios x 2 buyers, each once
    assert all(r.ended_by != "error" for r in records)
    for tc in trainings.values():
        marker = read_card(tc.final_model_dir())
        assert marker["steps"] == steps
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert set(summary["arms"]) == {"tiny", "tiny-rl-lr1e-3", "linear", "no-deal"}
    assert {c["family"] for c in summary["comparisons"]} == {"rl_vs_base", "vs_reference"}
    assert (out / "report" / "report.html").is_file()
    return summary


def test_study_runs_and_a_rerun_does_nothing_again(tmp_path, tokenizer, monkeypatch):  # noqa: F811
    path = write_study(tmp_path, tokenizer)
    import haggler.study.run as study_run

    played_after_selection = []
    evaluate = study_run.run

    def run_after_selection(*args, **kwargs):  # the selection is on disk before any evaluation cell is played
        played_after_selection.append((Path(load_study(path).output_dir) / "selection.json").is_file())
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(study_run, "run", run_after_selection)
    run_study(load_study(path), log=lambda _: None, progress=False)
    assert played_after_selection and all(played_after_selection)
    summary = check_complete(path)
    # this study's training has no validation: its RL arm cannot be put forward, and the report says so
    (tried,) = summary["selection"]["bases"]["tiny"]["tried"]
    assert summary["selection"]["bases"]["tiny"]["chosen"] is None and "no validation" in tried["why"]
    report = (Path(load_study(path).output_dir) / "report" / "report.md").read_text()
    assert "tiny: no RL arm put forward" in report and "reported as trained, not as the study's RL arm" in report
    results = Path(load_study(path).output_dir) / "results.jsonl"
    before = results.read_text()
    lines = []
    run_study(load_study(path), log=lines.append, progress=False)
    assert results.read_text() == before  # nothing replayed
    assert any(": done" in line for line in lines)
    assert summary["buyer_families"] == {"scripted:tft": "scripted", "scripted:boulware": "scripted"}


@pytest.mark.slow
def test_a_study_trains_its_arm_on_two_processes(tmp_path, tokenizer):  # noqa: F811
    """``training_processes: 2``: the arm (warm start and GRPO) trains under torch.distributed.run on two CPU
    processes with the recipe's global batch; the rest of the study is unchanged."""
    extra = ("training_processes: 2\ntraining_overrides: {grpo.per_device_train_batch_size: 1, "
             "grpo.gradient_accumulation_steps: 2, warm_start.micro_batch_size: 1}\n")
    path = write_study(tmp_path, tokenizer, extra=extra)
    lines = []
    run_study(load_study(path), log=lines.append, progress=False)
    check_complete(path)
    assert any("on 2 processes" in line and "torch.distributed.run" in line for line in lines)
    _, trainings = plan_arms(load_study(path))
    (tc,) = trainings.values()
    assert read_card(tc.final_model_dir())["config"]["grpo"]["per_device_train_batch_size"] == 1


def test_a_study_killed_during_training_resumes(tmp_path, tokenizer):  # noqa: F811
    # Enough steps that the run cannot finish between checkpoint-1 appearing and the kill (with 2 steps, a
    # fast machine once did); killed at once, possibly mid-save, which resume must survive too.
    steps = 8
    path = write_study(tmp_path, tokenizer, steps=steps)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "haggler.cli", "study", "run", str(path), "--no-progress"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    train_dir = tmp_path / "study" / "train" / "tiny-lr1e-3-s0"
    deadline = time.time() + 300
    while time.time() < deadline and not (train_dir / "checkpoint-1").is_dir():
        time.sleep(0.05)
    assert (train_dir / "checkpoint-1").is_dir(), "training never wrote its first checkpoint"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not is_complete(train_dir / "final")
    lines = []
    run_study(load_study(path), log=lines.append, progress=False)
    check_complete(path, steps=steps)
    log = json.loads((train_dir / "train_log.jsonl").read_text().splitlines()[-1])
    assert log.get("step", steps) == steps


def test_a_bad_study_config_names_the_key(tmp_path):
    (tmp_path / "s.yaml").write_text("name: x\noutput_dir: y\ntraining: t.yaml\nbases: []\nbuyers: []\nmargn: 1\n")
    with pytest.raises(ConfigError) as err:
        load_study(tmp_path / "s.yaml")
    text = str(err.value)
    assert "margn: unknown key" in text and "bases" in text and "buyers" in text


def test_evaluation_buyers_must_be_new_to_the_sellers(tmp_path, tokenizer):  # noqa: F811
    path = write_study(tmp_path, tokenizer)
    text = path.read_text().replace('"scripted:boulware"', '"scripted:conceder"')  # the training pool's buyer
    path.write_text(text)
    with pytest.raises(ValueError, match="never met in training"):
        plan_arms(load_study(path))


def test_evaluation_buyers_must_not_be_validation_buyers(tmp_path, tokenizer):  # noqa: F811
    path = write_study(tmp_path, tokenizer)
    train = tmp_path / "train.yaml"
    train.write_text(train.read_text() + 'validation: {n: 2, seed: 3001, buyers: ["scripted:tft"]}\n')
    with pytest.raises(ValueError, match="never met in training or validation"):
        plan_arms(load_study(path))


def test_an_rl_arm_with_overrides_trains_with_them_in_a_folder_of_its_own(tmp_path, tokenizer):  # noqa: F811
    path = write_study(tmp_path, tokenizer)
    text = path.read_text().replace("rl: [{learning_rate: 1.0e-3}]",
                                    'rl: [{learning_rate: 1.0e-3}, {learning_rate: 1.0e-3, label: bf16, '
                                    'overrides: {"grpo.bf16": true}}]')
    path.write_text(text)
    arms, trainings = plan_arms(load_study(path))
    by_name = {a.name: a for a in arms if a.kind == "rl"}
    assert set(by_name) == {"tiny-rl-lr1e-3", "bf16"}
    plain, autocast = trainings[by_name["tiny-rl-lr1e-3"].train_dir], trainings[by_name["bf16"].train_dir]
    assert plain.grpo.bf16 is False and autocast.grpo.bf16 is True
    assert Path(autocast.output_dir).name == "tiny-bf16-s0" != Path(plain.output_dir).name
    assert plain.warm_start.output_dir == autocast.warm_start.output_dir  # one warm start for the base
