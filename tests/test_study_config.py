"""Study files: one study extends another and says only what it changes."""

from pathlib import Path

import pytest

from haggler.core.config import ConfigError
from haggler.study.config import load_study

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
    with pytest.raises(ConfigError, match="nowhere.yaml: no such file"):
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
