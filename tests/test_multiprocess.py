"""``haggler train`` on two CPU processes (torch.distributed.run, gloo) is the same experiment as on one.

Before: the global batch doubled with the process count (the config's accumulation was taken per rank), each
rank numbered a group's copies from 0 (a group split across ranks played the same seller seeds twice), the
held-out set was played and logged by every rank, and both ranks printed "trained model".
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from haggler.training.config import load_config  # noqa: E402

RECIPE = """model: {model}
output_dir: {out}
dtype: float32
scenarios: {{n: 8, seed: 1001, max_turns: 4}}
buyers: [{{spec: "scripted:conceder"}}, {{spec: "scripted:linear"}}, {{spec: "scripted:boulware"}}]
prompt: {{message_tokens: 0, slot_tokens: 3, action_tokens: 3}}
validation: {{n: 2, seed: 3001, eval_steps: 1, bootstrap: 200}}
grpo: {{learning_rate: 5.0e-3, max_steps: 2, num_generations: 4, per_device_train_batch_size: 2,
       gradient_accumulation_steps: 2, save_steps: 1, report_to: none, use_cpu: true, bf16: false, seed: 3}}
"""


def _train(tmp_path, name, model, processes):
    out = tmp_path / name
    (tmp_path / f"{name}.yaml").write_text(RECIPE.format(model=model, out=out))
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes)] if processes > 1 else []
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    done = subprocess.run([sys.executable, *launcher, "-m", "haggler.cli", "train", "--config",
                           str(tmp_path / f"{name}.yaml")], capture_output=True, text=True, timeout=900,
                          env={**env, "TRL_EXPERIMENTAL_SILENCE": "1", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    return out, done.stdout + done.stderr, log


@pytest.mark.slow
def test_two_processes_train_as_one_with_the_same_global_batch(tmp_path, tokenizer):
    from haggler.testing.families import number_speaker

    model = tmp_path / "model"
    number_speaker(tokenizer).save_pretrained(model)
    tokenizer.save_pretrained(model)
    one, _, log1 = _train(tmp_path, "one", model, 1)
    two, text2, log2 = _train(tmp_path, "two", model, 2)

    def steps(log):
        return [(h["step"], h["reward"], h["reward_std"], h["loss"]) for h in log if "reward" in h]

    # one group of 4 per step, in per-rank batches of 2 on two processes: every group is split across the ranks
    assert [s[0] for s in steps(log1)] == [1, 2]
    assert any(s[2] > 0 for s in steps(log1))  # rewards varied: there was something to learn
    for a, b in zip(steps(log1), steps(log2), strict=True):
        assert a[:3] == b[:3] and b[3] == pytest.approx(a[3], abs=1e-6)
    # the share of groups split on deal and the rollouts' score count whole groups, whose copies the ranks share
    for key in ("negotiation/groups_split_on_deal", "negotiation/seller_score"):
        one_two = [[h[key] for h in log if "reward" in h] for log in (log1, log2)]
        assert one_two[1] == pytest.approx(one_two[0], abs=1e-6), key
    grads = [(h["grad_norm"], g["grad_norm"]) for h, g in zip(log1, log2) if "grad_norm" in h]
    assert grads and all(b == pytest.approx(a, rel=1e-5, abs=1e-7) for a, b in grads)
    # validation: played once per validated step (the ranks share the set), logged once, the same figures
    val1 = [json.loads(x) for x in (one / "validation.jsonl").read_text().splitlines()]
    val2 = [json.loads(x) for x in (two / "validation.jsonl").read_text().splitlines()]
    assert [v["step"] for v in val2] == [0, 1, 2]
    assert [v["rows"] for v in val2] == [v["rows"] for v in val1]
    assert text2.count("trained model:") == 1
    assert (two / "final" / "config.json").is_file() and (two / "checkpoint-2" / "trainer_state.json").is_file()


def test_the_global_batch_is_the_recipes_on_any_number_of_processes(tmp_path):
    cfg = load_config(data={"model": "default", "output_dir": str(tmp_path),
                            "grpo": {"num_generations": 4, "per_device_train_batch_size": 2,
                                     "gradient_accumulation_steps": 4}})
    assert [cfg.grpo.accumulation_for(n) for n in (1, 2, 4)] == [4, 2, 1]
    with pytest.raises(ValueError, match="global batch of 8 negotiations does not split into 3 processes"):
        cfg.grpo.accumulation_for(3)
    pinned = load_config(data={"model": "default", "output_dir": str(tmp_path),
                               "grpo": {"num_generations": 4, "per_device_train_batch_size": 4,
                                        "global_batch_size": 16}})
    assert pinned.grpo.global_batch == 16 and pinned.grpo.accumulation_for(2) == 2
    with pytest.raises(Exception, match="multiple of num_generations"):
        load_config(data={"model": "default", "output_dir": str(tmp_path),
                          "grpo": {"num_generations": 4, "per_device_train_batch_size": 2, "global_batch_size": 6}})


def test_each_rank_takes_the_copies_after_the_earlier_ranks(monkeypatch):
    import accelerate.utils

    from haggler.training.groups import earlier_copies

    ranks = [["a", "a", "b"], ["b", "b", "c"], ["a", "c"]]
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda _: ranks)
    assert earlier_copies(ranks[0], 0, 3) == {}
    assert earlier_copies(ranks[1], 1, 3) == {"a": 2, "b": 1}
    assert earlier_copies(ranks[2], 2, 3) == {"a": 2, "b": 3, "c": 1}
    assert earlier_copies(["a"], 0, 1) == {}
