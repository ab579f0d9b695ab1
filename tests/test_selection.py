"""The study's selection rule: the RL arm put forward is decided on validation negotiations only."""

import json

import pytest

from haggler.study.config import Arm, RLArm
from haggler.study.selection import read_run, select_arms, selection_lines


def write_run(d, changes, kept=None, scenarios=4, cases_per_scenario=5, base=0.4, temperature=None):
    """A training run's validation.jsonl: step 0 then one entry per step of ``changes`` (each negotiation's
    score = step 0's + the change + a case-dependent wobble), and a final card naming ``kept`` if given."""
    d.mkdir(parents=True)
    cases = [(c, f"s{c % scenarios}") for c in range(scenarios * cases_per_scenario)]

    def rows(delta):
        return [{"case": c, "scenario": s, "score": base + delta + (0.01 * (c % 3) if delta else 0.0),
                 "errored": False, "deal": False, "invalid": 0.0} for c, s in cases]

    entries = [{"step": 0, "validation/score": base, "rows": rows(0.0)}]
    for i, delta in enumerate(changes, start=1):
        entries.append({"step": 3 * i, "validation/score": base + delta, "validation/score_change": delta,
                        "validation/score_change_low": delta - 0.01, "validation/score_change_high": delta + 0.01,
                        "rows": rows(delta)})
    if temperature is not None:
        entries = [{**e, "validation/temperature": temperature} for e in entries]
    (d / "validation.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    if kept is not None:
        (d / "final").mkdir()
        (d / "final" / "haggler-model.json").write_text(json.dumps({"selected": {"step": kept}}))


def rl_arm(name, lr, seed, d):
    return Arm(name, f"hf:{d}/final", "rl", base="base", learning_rate=lr, seed=seed, train_dir=str(d))


def test_the_arm_that_beat_step_zero_most_is_put_forward(tmp_path):
    write_run(tmp_path / "a", [0.02, 0.05])
    write_run(tmp_path / "b", [0.08, 0.01])  # the last step is kept: +0.01 (plus the wobble)
    write_run(tmp_path / "c", [0.10, -0.2], kept=3)  # the card's selected step is the one judged
    arms = [Arm("base", "hf:x", "base"), rl_arm("lo", 1e-4, 0, tmp_path / "a"), rl_arm("mid", 3e-4, 0, tmp_path / "b"),
            rl_arm("hi", 1e-3, 0, tmp_path / "c")]
    sel = select_arms(arms, n_boot=200)
    tried = {t["arm"]: t for t in sel["bases"]["base"]["tried"]}
    assert tried["hi"]["runs"][0]["kept_step"] == 3 and tried["hi"]["runs"][0]["selected_by"] == "best"
    assert tried["lo"]["runs"][0]["kept_step"] == 6 and tried["lo"]["runs"][0]["selected_by"] == "last"
    assert all(t["eligible"] for t in tried.values())
    assert tried["hi"]["change"] == pytest.approx(0.10 + 0.01 * sum(c % 3 for c in range(20)) / 20)
    assert sel["bases"]["base"]["chosen"] == "hi"


def test_no_arm_is_put_forward_when_none_beat_step_zero(tmp_path):
    write_run(tmp_path / "a", [0.0, 0.0])  # unchanged: an interval of exactly zero is not above it
    write_run(tmp_path / "b", [-0.05, -0.03])
    arms = [rl_arm("lo", 1e-4, 0, tmp_path / "a"), rl_arm("hi", 1e-3, 0, tmp_path / "b")]
    sel = select_arms(arms, n_boot=200)
    assert sel["bases"]["base"]["chosen"] is None
    assert [t["why"] for t in sel["bases"]["base"]["tried"]] == ["did not beat step 0"] * 2
    assert any("no RL arm put forward" in line for line in selection_lines(sel))
    assert not any("temperature" in line for line in selection_lines(sel))  # logs from before it was recorded


def test_the_selection_says_at_which_temperature_validation_played(tmp_path):
    write_run(tmp_path / "a", [0.03, 0.04], temperature=0.3)
    lines = selection_lines(select_arms([rl_arm("lo", 1e-4, 0, tmp_path / "a")], n_boot=200))
    assert any("lo (lr 0.0001; seed 0 step 6): validation at temperature 0.3 change +0.04" in line for line in lines)


def test_a_tie_goes_to_the_lower_learning_rate(tmp_path):
    write_run(tmp_path / "a", [0.04])
    write_run(tmp_path / "b", [0.04])
    arms = [rl_arm("hi", 1e-3, 0, tmp_path / "b"), rl_arm("lo", 1e-4, 0, tmp_path / "a")]
    assert select_arms(arms, n_boot=200)["bases"]["base"]["chosen"] == "lo"


def test_an_arm_is_judged_on_all_its_seeds(tmp_path):
    """One seed's gain does not carry an arm whose other seeds lost: the change is pooled over seeds."""
    write_run(tmp_path / "s0", [0.06])
    write_run(tmp_path / "s1", [-0.05])
    write_run(tmp_path / "s2", [-0.04])
    write_run(tmp_path / "t0", [0.03])
    arms = [rl_arm("seeded", 3e-4, s, tmp_path / f"s{s}") for s in range(3)] + [rl_arm("one", 1e-4, 0, tmp_path / "t0")]
    sel = select_arms(arms, n_boot=300)
    tried = {t["arm"]: t for t in sel["bases"]["base"]["tried"]}
    assert tried["seeded"]["seeds"] == [0, 1, 2] and not tried["seeded"]["eligible"]
    assert tried["seeded"]["change"] < 0.0
    assert sel["bases"]["base"]["chosen"] == "one"


def test_a_run_without_validation_is_never_put_forward(tmp_path):
    (tmp_path / "a").mkdir()
    assert read_run(tmp_path / "a") is None
    sel = select_arms([rl_arm("lo", 1e-4, 0, tmp_path / "a")], n_boot=200)
    (t,) = sel["bases"]["base"]["tried"]
    assert not t["eligible"] and "no validation" in t["why"] and sel["bases"]["base"]["chosen"] is None


def test_an_arm_with_overrides_needs_a_label():
    with pytest.raises(ValueError, match="needs a label"):
        RLArm(learning_rate=1e-4, overrides={"grpo.bf16": True})


def test_a_mean_gain_whose_interval_includes_zero_is_not_eligible(tmp_path):
    """Up on two held-out scenarios, down on two: a positive mean, but the scenario-clustered interval spans 0."""
    write_run(tmp_path / "a", [0.0])
    log = tmp_path / "a" / "validation.jsonl"
    first, last = [json.loads(x) for x in log.read_text().splitlines()]
    for r in last["rows"]:
        r["score"] = r["score"] + (0.10 if r["scenario"] in ("s0", "s1") else -0.08)
    log.write_text(json.dumps(first) + "\n" + json.dumps(last) + "\n")
    sel = select_arms([rl_arm("lo", 1e-4, 0, tmp_path / "a")], n_boot=500)
    (t,) = sel["bases"]["base"]["tried"]
    assert t["change"] == pytest.approx(0.01) and t["low"] < 0 < t["high"]
    assert not t["eligible"] and sel["bases"]["base"]["chosen"] is None


def test_a_resumed_runs_repeated_evaluation_counts_once_its_latest(tmp_path):
    write_run(tmp_path / "a", [-0.05])
    log = tmp_path / "a" / "validation.jsonl"
    first, last = [json.loads(x) for x in log.read_text().splitlines()]
    again = json.loads(json.dumps(last))  # the resumed run played step 3 again, and did better
    for r in again["rows"]:
        r["score"] += 0.10
    log.write_text("".join(json.dumps(e) + "\n" for e in (first, last, again)))
    run = read_run(tmp_path / "a")
    assert [s["step"] for s in run.steps] == [0, 3]
    assert sum(d for d, _ in run.pairs) / len(run.pairs) > 0.04


def test_a_damaged_validation_log_is_named_with_its_line(tmp_path):
    write_run(tmp_path / "a", [0.05])
    log = tmp_path / "a" / "validation.jsonl"
    log.write_text(log.read_text() + '{"step": 6, "validation/sc\n')  # a run killed mid-write
    with pytest.raises(ValueError, match=r"validation\.jsonl: line 3 is not JSON"):
        read_run(tmp_path / "a")
