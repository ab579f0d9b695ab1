"""Study files: one study extends another and says only what it changes; what a study sets in its arms' training."""

from pathlib import Path

import pytest

from haggler.core.config import ConfigError
from haggler.study.config import load_study, plan_arms, read_study_data

ROOT = Path(__file__).resolve().parent.parent

PARENT = """
name: parent
output_dir: runs/parent
training: train.yaml
training_overrides: {grpo.max_steps: 12, validation.n: 5, prompt.accept_verdict: true}
bases:
  - {name: small, model: default, warm_start: true, rl: [{learning_rate: 3.0e-4}, {learning_rate: 1.0e-3}]}
references: [{name: linear, spec: "scripted:linear"}]
buyers: [{spec: "scripted:tft", family: scripted}, {spec: "negmas:AspirationNegotiator", family: negmas}]
grid: {n: 16, seed: 7, max_turns: 8, openers: [seller, buyer]}
margin: 0.05
"""


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def test_a_study_that_extends_another_changes_only_what_it_says(tmp_path):
    _write(tmp_path, "train.yaml", "model: default\n")
    _write(tmp_path, "parent.yaml", PARENT)
    child = _write(tmp_path, "child.yaml", """
extends: parent.yaml
name: child
output_dir: runs/child
training_overrides: {validation.n: 10}
grid: {n: 40, seed: 13}
bases:
  - {name: small, model: default, warm_start: true, rl: [{learning_rate: 3.0e-4}]}
""")
    parent, cfg = load_study(tmp_path / "parent.yaml"), load_study(child)
    assert (cfg.name, cfg.output_dir) == ("child", "runs/child")
    # mappings merge key by key: the grid's deadline and openers, the other overrides are the parent's
    assert (cfg.grid.n, cfg.grid.seed, cfg.grid.max_turns, cfg.grid.openers) == (40, 13, 8, ["seller", "buyer"])
    assert cfg.training_overrides == {"grpo.max_steps": 12, "validation.n": 10, "prompt.accept_verdict": True}
    # lists are the extending file's: one RL arm, not the parent's two
    assert [rl.learning_rate for rl in cfg.bases[0].rl] == [3.0e-4]
    assert cfg.buyers == parent.buyers and cfg.references == parent.references and cfg.margin == 0.05
    assert cfg.training == parent.training == str(tmp_path / "train.yaml")


def test_an_extended_file_elsewhere_keeps_its_paths_relative_to_its_own_folder(tmp_path):
    _write(tmp_path / "base", "train.yaml", "model: default\n")
    _write(tmp_path / "base", "parent.yaml", PARENT)
    child = _write(tmp_path / "series", "child.yaml", "extends: ../base/parent.yaml\nname: c\noutput_dir: runs/c\n")
    assert Path(load_study(child).training).resolve() == (tmp_path / "base" / "train.yaml").resolve()
    # a path the extending file gives itself is read from its own folder
    _write(tmp_path / "series", "train2.yaml", "model: default\n")
    child.write_text(child.read_text() + "training: train2.yaml\n")
    assert Path(load_study(child).training).resolve() == (tmp_path / "series" / "train2.yaml").resolve()


def test_an_extending_study_must_name_its_own_folder(tmp_path):
    _write(tmp_path, "parent.yaml", PARENT)
    child = _write(tmp_path, "child.yaml", "extends: parent.yaml\nname: child\n")
    with pytest.raises(ConfigError, match="child.yaml: a study that extends parent.yaml must give its own output_dir"):
        load_study(child)


def test_extends_names_a_missing_file_and_a_cycle(tmp_path):
    missing = _write(tmp_path, "a.yaml", "extends: nowhere.yaml\nname: a\noutput_dir: runs/a\n")
    with pytest.raises(ConfigError, match=r"a.yaml: extends: .*nowhere.yaml: no such file"):
        load_study(missing)
    _write(tmp_path, "b.yaml", "extends: c.yaml\nname: b\noutput_dir: runs/b\n")
    _write(tmp_path, "c.yaml", "extends: b.yaml\nname: c\noutput_dir: runs/c\n")
    with pytest.raises(ConfigError, match="a cycle"):
        load_study(tmp_path / "b.yaml")


def test_an_extended_file_elsewhere_without_a_grid_section_gets_none(tmp_path):
    _write(tmp_path / "base", "train.yaml", "model: default\n")
    _write(tmp_path / "base", "parent.yaml", PARENT.replace("grid: {n: 16, seed: 7, max_turns: 8, openers: [seller, buyer]}\n", ""))
    child = _write(tmp_path / "series", "child.yaml", "extends: ../base/parent.yaml\nname: c\noutput_dir: runs/c\n")
    assert load_study(child).grid.n == 24  # the default grid, not a grid section made up on the way


def test_an_extending_study_cannot_take_the_other_studys_folder(tmp_path):
    _write(tmp_path, "parent.yaml", PARENT)
    child = _write(tmp_path, "child.yaml", "extends: parent.yaml\nname: child\noutput_dir: runs/parent\n")
    with pytest.raises(ConfigError, match="child.yaml: output_dir: 'runs/parent' is also .*parent.yaml's"):
        load_study(child)


def test_a_bad_key_in_an_extended_file_names_the_files_it_may_come_from(tmp_path):
    _write(tmp_path, "train.yaml", "model: default\n")
    _write(tmp_path, "parent.yaml", PARENT + "margn: 1\n")
    child = _write(tmp_path, "child.yaml", "extends: parent.yaml\nname: child\noutput_dir: runs/child\n")
    with pytest.raises(ConfigError, match=r"child.yaml \(extends .*parent.yaml\).*margn: unknown key"):
        load_study(child)


def test_the_extending_files_training_overrides_are_applied_last(tmp_path):
    _write(tmp_path, "train.yaml", "model: default\noutput_dir: x\nwarm_start: {}\n")
    _write(tmp_path, "parent.yaml", PARENT.replace("training_overrides: {", "training_overrides: {validation: {n: 5, seed: 9}, "))
    child = _write(tmp_path, "child.yaml", """
extends: parent.yaml
name: child
output_dir: runs/child
training_overrides: {validation.n: 10, validation: {n: 7, seed: 9}}
""")
    assert list(load_study(child).training_overrides)[-2:] == ["validation.n", "validation"]
    child.write_text(child.read_text().replace(", validation: {n: 7, seed: 9}", ""))
    cfg = load_study(child)
    # the parent's section is set first, the child's dotted key after it: the child's 10 stands
    assert list(cfg.training_overrides)[-1] == "validation.n"
    _, trainings = plan_arms(cfg)
    assert {t.validation.n for t in trainings.values()} == {10}


def test_an_extended_files_grid_scenarios_and_endpoints_are_read_from_its_folder(tmp_path):
    _write(tmp_path / "base", "train.yaml", "model: default\n")
    _write(tmp_path / "base", "grid.jsonl", "")
    _write(tmp_path / "base", "endpoints.yaml", "{}\n")
    _write(tmp_path / "base", "parent.yaml", PARENT.replace("grid: {n: 16,", "endpoints: endpoints.yaml\ngrid: {scenarios: grid.jsonl, n: 16,"))
    child = _write(tmp_path / "series", "child.yaml", "extends: ../base/parent.yaml\nname: c\noutput_dir: runs/c\n")
    cfg = load_study(child)
    assert Path(cfg.grid.scenarios).resolve() == (tmp_path / "base" / "grid.jsonl").resolve()
    assert Path(cfg.endpoints).resolve() == (tmp_path / "base" / "endpoints.yaml").resolve()


def test_shipped_study_configs_load():
    # every study file shipped (a training config has no bases), so a new one is checked without being listed here
    shipped = sorted(p.name for p in (ROOT / "configs").glob("*.yaml") if "bases" in read_study_data(p))
    assert {"demo-study.yaml", "paper.yaml", "groups-study-fresh.yaml", "epochs-study.yaml"} <= set(shipped)
    for name in shipped:
        cfg = load_study(ROOT / "configs" / name)
        plan_arms(cfg)
        assert len(cfg.buyers) >= 2 and all(b.family for b in cfg.buyers)
    paper = load_study(ROOT / "configs" / "paper.yaml")
    assert paper.grid.n * len(paper.buyers) * len(paper.grid.openers) * paper.grid.repeats == 1152
    rates = sorted({rl.learning_rate for b in paper.bases for rl in b.rl})
    assert rates == [1e-6, 3e-6, 1e-5]


def test_the_shipped_series_of_studies_resolves_to_what_was_run():
    """skill-study < groups-study < groups-study-fresh < epochs-study < temperature-study, and groups-study-fresh <
    repair-study < matched-study < outcome-study, batch-study, onpolicy-study, lowlr-study, verdict-study <
    bigbatch-study < bigbatch-seed1-study: an edit to one file
    changes the ones that extend it, and each of these was run as resolved here (README); this pins what each ran.
    The last two figures are the grid's and validation's temperatures: every study before temperature-study
    validated at its rollouts' 1.0, which is what a study's default (the evaluation's temperature) gives them."""
    def resolved(name):
        cfg = load_study(ROOT / "configs" / name)
        _, trainings = plan_arms(cfg)
        t = next(iter(trainings.values()))
        return (cfg.grid.n, cfg.grid.seed, t.validation.n, t.grpo.num_generations, t.grpo.gradient_accumulation_steps,
                t.grpo.max_steps, t.warm_start.scenarios, t.warm_start.epochs, sorted(len(b.rl) for b in cfg.bases),
                cfg.evaluation.temperature, t.validation.temperature)
    assert resolved("skill-study.yaml") == (16, 7, 5, 4, 8, 12, 8, 1.0, [1], 1.0, 1.0)
    assert resolved("groups-study.yaml") == (16, 7, 5, 8, 16, 12, 8, 1.0, [2], 1.0, 1.0)
    assert resolved("groups-study-fresh.yaml") == (32, 11, 10, 8, 16, 12, 8, 1.0, [2], 1.0, 1.0)
    assert resolved("epochs-study.yaml") == (40, 13, 10, 8, 16, 12, 8, 2.0, [1], 1.0, 1.0)
    assert resolved("temperature-study.yaml") == (40, 17, 10, 8, 16, 12, 8, 2.0, [1], 0.3, 0.3)
    assert resolved("repair-study.yaml") == (40, 19, 10, 8, 16, 12, 8, 1.0, [1], 0.3, 0.3)
    assert resolved("matched-study.yaml") == (40, 19, 10, 8, 16, 12, 8, 1.0, [1], 0.3, 0.3)
    assert resolved("outcome-study.yaml") == (40, 23, 10, 8, 16, 12, 8, 1.0, [1], 0.3, 0.3)
    assert resolved("batch-study.yaml") == (40, 31, 10, 8, 16, 12, 8, 1.0, [1], 0.3, 0.3)
    assert resolved("onpolicy-study.yaml") == (40, 29, 10, 8, 16, 12, 8, 1.0, [1], 0.3, 0.3)
    assert resolved("lowlr-study.yaml") == (40, 37, 10, 8, 16, 12, 8, 1.0, [1], 0.3, 0.3)
    assert resolved("verdict-study.yaml") == (40, 41, 10, 8, 16, 12, 8, 1.0, [1], 0.3, 0.3)
    assert resolved("bigbatch-study.yaml") == (40, 43, 10, 8, 32, 6, 8, 1.0, [1], 0.3, 0.3)
    assert resolved("bigbatch-seed1-study.yaml") == (40, 43, 10, 8, 32, 6, 8, 1.0, [1], 0.3, 0.3)
    # what matched-study changes: the rollouts' temperature; outcome-study: the reward; batch-study: the advantages'
    # scale; onpolicy-study: the rollouts' temperature again; lowlr-study: the learning rate; verdict-study: the offer
    # slots' marks; bigbatch-study: twice the groups a step at lr 1e-4; bigbatch-seed1-study: the training seed
    # alone. The tuple above holds none of these but bigbatch-study's groups; this one holds them:
    names = ("repair-study.yaml", "matched-study.yaml", "outcome-study.yaml", "batch-study.yaml", "onpolicy-study.yaml",
             "lowlr-study.yaml", "verdict-study.yaml", "bigbatch-study.yaml", "bigbatch-seed1-study.yaml")
    arms = {n: next(iter(plan_arms(load_study(ROOT / "configs" / n))[1].values())) for n in names}
    assert {n: (t.grpo.temperature, t.reward, t.grpo.scale_rewards, t.grpo.learning_rate, t.prompt.offer_verdict,
                t.grpo.seed) for n, t in arms.items()} == {
        "repair-study.yaml": (1.0, "score", "group", 3e-4, False, 0), "matched-study.yaml": (0.5, "score", "group", 3e-4, False, 0),
        "outcome-study.yaml": (0.5, "outcome", "group", 3e-4, False, 0),
        "batch-study.yaml": (0.5, "score", "batch", 3e-4, False, 0), "onpolicy-study.yaml": (0.3, "score", "group", 3e-4, False, 0),
        "lowlr-study.yaml": (0.5, "score", "group", 1e-4, False, 0), "verdict-study.yaml": (0.5, "score", "group", 3e-4, True, 0),
        "bigbatch-study.yaml": (0.5, "score", "group", 1e-4, True, 0),
        "bigbatch-seed1-study.yaml": (0.5, "score", "group", 1e-4, True, 1)}


def test_validation_plays_at_the_evaluation_temperature_unless_the_training_file_sets_one(tmp_path):
    """The checkpoint is chosen playing as the grid is played: each arm's validation.temperature is the study's
    evaluation.temperature; one the training file (or the study's overrides) gives is kept; no validation, none."""
    _write(tmp_path, "train.yaml", "model: default\nvalidation: {n: 2}\ngrpo: {temperature: 1.0}\n")
    study = PARENT.replace("margin: 0.05", "margin: 0.05\nevaluation: {temperature: 0.3}").replace(
        "warm_start: true", "warm_start: false")
    _, trainings = plan_arms(load_study(_write(tmp_path, "study.yaml", study)))
    assert [(t.validation.temperature, t.grpo.temperature) for t in trainings.values()] == [(0.3, 1.0)] * 2
    kept = study.replace("validation.n: 5", "validation.n: 5, validation.temperature: 0.7")
    _, trainings = plan_arms(load_study(_write(tmp_path, "kept.yaml", kept)))
    assert {t.validation.temperature for t in trainings.values()} == {0.7}
    _write(tmp_path, "train.yaml", "model: default\n")
    _, trainings = plan_arms(load_study(_write(tmp_path, "none.yaml", study.replace("validation.n: 5, ", ""))))
    assert {t.validation for t in trainings.values()} == {None}
