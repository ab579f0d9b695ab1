"""Play every cell of a grid with one seller and append one record per finished negotiation.

Resumable: finished cells already in the output are skipped, errored ones are played again, and at
the end the file is compacted so that it holds each (seller, cell) exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haggler.agents.registry import AgentContext, check_spec, make_agent
from haggler.evaluation.grid import Cell, GridError, load_grid
from haggler.core.protocol import Negotiation, ProtocolConfig, transcript
from haggler.engine.backends.openai_api import Endpoint
from haggler.engine.interfaces import Describable, Releasable
from haggler.engine.rollout import Game, play_lockstep
from haggler.evaluation.results import Appender, Record, compact
from haggler.evaluation.behaviour import seller_behaviour
from haggler.evaluation.security import measure
from haggler.core.scenario import Scenario, load_scenarios
from haggler.core.score import score
from haggler.evaluation.settings import RunSettings


def agent_seed(cell_seed: int, side: str) -> int:
    return cell_seed * 2 + (1 if side == "buyer" else 0)


def describe_agent(agent: Any) -> dict[str, Any]:
    """What was run on a side: the spec, and for a model its name, temperature, token budgets and cues."""
    out = {"spec": agent.spec}
    if isinstance(agent, Describable):
        out.update(agent.describe())
    return out


def make_record(cell: Cell, seller: str, negotiation: Negotiation, settings: RunSettings, recorded: dict[str, Any],
                agents: dict[str, Any] | None = None) -> Record:
    """One finished negotiation as a results record; ``recorded`` is what it keeps of the run's settings."""
    figures = score(negotiation, settings.no_deal)
    errored = negotiation.ended_by == "error"
    agreement = negotiation.agreement
    # every completed negotiation is measured (an errored one has nothing to measure: the key stays out)
    measured = {} if errored else {"security": measure(negotiation), "behaviour": seller_behaviour(negotiation)}
    return Record(
        cell_id=cell.cell_id,
        scenario_id=cell.scenario_id,
        seller=seller,
        buyer=cell.buyer,
        opener=cell.opener,
        seed=cell.seed,
        deal=figures.deal,
        agreement=None if agreement is None else negotiation.scenario.names_of(agreement),
        ended_by=negotiation.ended_by,
        walked_away_by=negotiation.walked_away_by,
        turns=None if errored else len(negotiation.turns),
        seller_utility=figures.seller_utility,
        buyer_utility=figures.buyer_utility,
        seller_score=figures.seller_score,
        seller_advantage=figures.seller_advantage,
        pareto_optimal=figures.pareto_optimal,
        nash_distance=figures.nash_distance,
        individually_irrational=figures.individually_irrational,
        seller_surplus=figures.seller_surplus,
        good_deal=figures.good_deal,
        invalid_actions=dict(negotiation.invalid),
        transcript=transcript(negotiation),
        error=negotiation.error,
        settings=recorded,
        agents=agents or {},
        **measured,
    )


def start_game(cell: Cell, scenario: Scenario, seller: str, settings: RunSettings, context: AgentContext) -> Game:
    negotiation = Negotiation(scenario, ProtocolConfig(opener=cell.opener, max_invalid=settings.max_invalid))
    try:
        agents = {
            "seller": make_agent(seller, scenario, "seller", agent_seed(cell.seed, "seller"), context),
            "buyer": make_agent(cell.buyer, scenario, "buyer", agent_seed(cell.seed, "buyer"), context),
        }
    except Exception as err:  # noqa: BLE001 - a cell whose agents cannot be built is an error, not a crash
        negotiation.fail(f"could not build the agents: {type(err).__name__}: {err}")
        agents = {}
    return Game(negotiation, agents)


def finish_record(cell: Cell, seller: str, game: Game, settings: RunSettings, recorded: dict[str, Any]) -> Record:
    described = {side: describe_agent(a) for side, a in game.agents.items()}
    return make_record(cell, seller, game.negotiation, settings, recorded, described)


@dataclass(frozen=True)
class RunReport:
    total: int
    skipped: int
    played: int
    errors: int


def pending_cells(cells: list[Cell], seller: str, existing: dict[tuple[str, str], Record]) -> list[Cell]:
    todo = []
    for cell in cells:
        done = existing.get((seller, cell.cell_id))
        if done is None or done.ended_by == "error":
            todo.append(cell)
    return todo


def run(
    grid_path: str | Path,
    scenarios_path: str | Path,
    seller: str,
    out_path: str | Path,
    settings: RunSettings | None = None,
    progress: bool = True,
    on_record: Callable[[Record], None] | None = None,
    endpoints: dict[str, Endpoint] | None = None,
) -> RunReport:
    """Play the cells of the grid this seller has not finished; every agent spec is checked (a model folder
    that is not there, an unknown endpoint) before any cell is played."""
    settings = settings or RunSettings()
    endpoints = endpoints or {}
    check_spec(seller, endpoints)
    cells = load_grid(grid_path)
    scenarios = load_scenarios(scenarios_path)
    missing = sorted({c.scenario_id for c in cells} - set(scenarios))
    if missing:
        raise GridError(f"{grid_path}: cells name scenarios not in {scenarios_path}: {missing[:5]}")
    for buyer in sorted({c.buyer for c in cells}):
        check_spec(buyer, endpoints)

    existing = compact(out_path)  # also drops a half-written line left by a killed run
    todo = pending_cells(cells, seller, existing)
    context = AgentContext(prompt=settings.prompt, temperature=settings.temperature, endpoints=endpoints,
                           api_max_tokens=settings.api_max_tokens, sample_seed=settings.sample_seed)
    recorded = settings.to_json(endpoints)  # what every record keeps of the run's settings
    errors = 0
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=seller, unit="neg", dynamic_ncols=True)
    with Appender(out_path) as out:
        cell_of: dict[int, Cell] = {}

        def games() -> Any:  # built lazily: only the negotiations in play hold agents (and caches)
            for cell in todo:
                game = start_game(cell, scenarios[cell.scenario_id], seller, settings, context)
                cell_of[id(game)] = cell
                yield game

        def finished(game: Game) -> None:
            nonlocal errors
            record = finish_record(cell_of.pop(id(game)), seller, game, settings, recorded)
            errors += record.ended_by == "error"
            for agent in game.agents.values():
                if isinstance(agent, Releasable):  # a finished negotiation's cache is not needed
                    agent.release()
            out.write(record)
            if on_record is not None:
                on_record(record)
            if bar is not None:
                bar.update(1)

        play_lockstep(games(), on_finish=finished, max_active=settings.batch_size)
    if bar is not None:
        bar.close()
    compact(out_path)
    return RunReport(total=len(cells), skipped=len(cells) - len(todo), played=len(todo), errors=errors)
