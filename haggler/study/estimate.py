"""What a study's evaluation will spend on APIs, before anything is spent: every arm against every cell of
the grid the study would write (its scenarios file, or the scenarios its seed generates) and of its
adversarial grid, priced with its endpoints file. Results already in the study's folder are not
subtracted: this is the whole study."""

from __future__ import annotations

from haggler.core.scenario import load_scenarios
from haggler.engine.backends.openai_api import load_endpoints
from haggler.evaluation.cost import Estimate, estimate
from haggler.evaluation.grid import make_grid
from haggler.scenarios.generate import generate_scenarios
from haggler.study.config import StudyConfig, plan_arms


def estimate_study(cfg: StudyConfig) -> Estimate:
    if cfg.grid.scenarios:
        scenarios = load_scenarios(cfg.grid.scenarios)
    else:
        scenarios = {s.id: s for s in generate_scenarios(cfg.grid.n, cfg.grid.seed, max_turns=cfg.grid.max_turns)}
    cells = make_grid(list(scenarios), [b.spec for b in cfg.buyers], list(cfg.grid.openers), cfg.grid.repeats,
                      cfg.grid.grid_seed)
    security = getattr(cfg, "security", None)
    if security is not None:  # the adversarial grid: the first scenarios against each adversary
        cells += make_grid(list(scenarios)[: security.n], security.buyers, list(security.openers), 1,
                           cfg.grid.grid_seed)
    sellers = list(dict.fromkeys(a.spec for a in plan_arms(cfg)[0]))  # each spec is evaluated once
    plays = [(scenarios[c.scenario_id], seller, c.buyer, c.opener) for seller in sellers for c in cells]
    endpoints = load_endpoints(cfg.endpoints) if cfg.endpoints else {}
    return estimate(plays, endpoints, cfg.evaluation.api_max_tokens)
