"""The whole study in one command: train every RL arm, evaluate every arm on one grid, write the report.

Every stage resumes. A trained arm (its final model folder complete) is skipped; a killed training run
continues from its latest checkpoint; evaluation skips finished cells and replays errored ones; the
report is rebuilt from the results each time. The study's folder::

    OUT/scenarios.jsonl  OUT/grid.jsonl        the evaluation set (its own seed; training refuses it)
    OUT/train/BASE/warm-start/                 one warm start per base, shared by its RL arms
    OUT/train/BASE-lrRATE-sSEED/               each RL arm's training run (final/ holds the model)
    OUT/security-grid.jsonl                    the small adversarial grid, when the study has ``security``
    OUT/results.jsonl                          every arm's negotiations (the adversarial ones too)
    OUT/report/                                summary.json, report.md, report.html, plots, tables
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from haggler.core.scenario import load_scenarios, write_scenarios
from haggler.engine.backends.openai_api import Endpoint, load_endpoints
from haggler.engine.card import is_complete
from haggler.evaluation.grid import make_grid, write_grid
from haggler.evaluation.runner import run
from haggler.scenarios.generate import generate_scenarios
from haggler.study.config import RLArm, StudyConfig, arm_training_config, plan_arms, scenarios_path, study_dir
from haggler.study.report import build_report
from haggler.study.selection import selection_lines, write_selection
from haggler.training.config import TrainConfig
from haggler.training.errors import TrainingFailed
from haggler.training.recipe import run_training
from haggler.training.sft import run_warm_start


def write_evaluation_set(cfg: StudyConfig) -> tuple[Path, Path]:
    out = study_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    scen = scenarios_path(cfg)
    if not cfg.grid.scenarios and not scen.exists():
        write_scenarios(generate_scenarios(cfg.grid.n, cfg.grid.seed, max_turns=cfg.grid.max_turns), scen)
    grid = out / "grid.jsonl"
    if not grid.exists():
        ids = list(load_scenarios(scen))
        write_grid(make_grid(ids, [b.spec for b in cfg.buyers], list(cfg.grid.openers), cfg.grid.repeats,
                             cfg.grid.grid_seed), grid)
    return scen, grid


def write_security_grid(cfg: StudyConfig, scen: Path) -> Path | None:
    """The adversarial grid: the evaluation set's first ``security.n`` scenarios against each adversary."""
    if cfg.security is None:
        return None
    grid = study_dir(cfg) / "security-grid.jsonl"
    if not grid.exists():
        ids = list(load_scenarios(scen))[: cfg.security.n]
        write_grid(make_grid(ids, cfg.security.buyers, list(cfg.security.openers), 1, cfg.grid.grid_seed), grid)
    return grid


def study_endpoints(cfg: StudyConfig) -> dict[str, Endpoint]:
    return load_endpoints(cfg.endpoints) if cfg.endpoints else {}


def train_arms(cfg: StudyConfig, log: Callable[[str], None]) -> None:
    """Every RL arm (a finished one is skipped, a killed one resumes), and each warm-started base."""
    _, trainings = plan_arms(cfg)
    for i, (train_dir, tc) in enumerate(trainings.items(), start=1):
        if is_complete(tc.final_model_dir()):
            log(f"[train {i}/{len(trainings)}] {train_dir}: done")
            continue
        log(f"[train {i}/{len(trainings)}] {train_dir}: model {tc.model}, lr {tc.grpo.learning_rate}, "
            f"{tc.grpo.max_steps} steps, seed {tc.grpo.seed}")
        if cfg.training_processes > 1:
            train_in_processes(tc, cfg.training_processes, log)
        else:
            run_training(tc, resume=True, log=log)
    # a base that is the warm-started model: make sure it exists even without RL arms
    for b in cfg.bases:
        if b.warm_start and not b.rl:
            run_warm_start(arm_training_config(cfg, b.name, b.model, RLArm(learning_rate=1e-6), 0), log=log)


def train_in_processes(tc: TrainConfig, processes: int, log: Callable[[str], None]) -> None:
    """``haggler train`` of one arm on ``processes`` processes, started by torch.distributed.run (every rank
    builds the same arm from the config written beside its run); it resumes as the one-process path does."""
    import subprocess
    import sys

    import yaml

    folder = Path(tc.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "train-config.yaml"
    # only what was set: a field left out (a prompt setting) still comes from the model card, as in one process
    config.write_text(yaml.safe_dump(tc.model_dump(mode="json", exclude_unset=True), sort_keys=False))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "-m", "haggler.cli",
           "train", "--config", str(config), "--resume"]
    log(f"  on {processes} processes: {' '.join(cmd[1:])}")
    done = subprocess.run(cmd)
    if done.returncode != 0:
        raise TrainingFailed(f"training {tc.output_dir} on {processes} processes failed (exit {done.returncode}); "
                           "its output is above")


def run_study(cfg: StudyConfig, study_path: str | None = None, log: Callable[[str], None] = print,
              progress: bool = True) -> Path:
    out = study_dir(cfg)
    scen, grid = write_evaluation_set(cfg)
    arms, _ = plan_arms(cfg)
    (out / "arms.json").write_text(json.dumps([a.to_json() for a in arms], indent=2) + "\n")
    train_arms(cfg, log)
    # decided on validation only, and written before any evaluation cell is played
    selection = write_selection(arms, out / "selection.json", cfg.bootstrap)
    for line in selection_lines(selection):
        log(f"[select] {line}")
    results = out / "results.jsonl"
    endpoints = study_endpoints(cfg)
    security = write_security_grid(cfg, scen)
    for stage, cells in (("evaluate", grid), ("security", security)):
        seen: set[str] = set()
        for arm in arms if cells is not None else []:
            if arm.spec in seen:
                continue
            seen.add(arm.spec)
            log(f"[{stage}] {arm.name}{f' (seed {arm.seed})' if arm.seed is not None else ''}: {arm.spec}")
            report = run(cells, scen, arm.spec, results, settings=cfg.evaluation, progress=progress,
                         endpoints=endpoints)
            log(f"  {report.played} played, {report.skipped} already done, {report.errors} errors")
    report_dir = out / "report"
    build_report([results], report_dir, study=cfg, arms=arms, study_path=study_path)
    log(f"report: {report_dir / 'report.html'} (and report.md, summary.json, tables/, plots/)")
    return report_dir
