"""Many negotiations at once, in lockstep: every model call waiting on the same model is one batch.

Scripted agents answer at once. A language-model agent's turn is a generator that yields sample
requests; the driver advances every negotiation until each is either finished or waiting on a model,
then serves all waiting requests of one model (and temperature and stop rule) with one batched call,
and repeats. An agent that raises ends its negotiation as an error, recorded, never scored.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from haggler.protocol import Negotiation
from haggler.types import Reply


@dataclass
class Game:
    negotiation: Negotiation
    agents: dict[str, Any]  # side -> agent
    pending: Generator | None = None  # the turn in progress of a language-model agent
    request: Any = None  # what that turn waits for


def _fail(game: Game, side: str, err: Exception) -> None:
    agent = game.agents[side]
    game.negotiation.fail(f"{side} agent {getattr(agent, 'spec', agent)!r} raised {type(err).__name__}: {err}")
    game.pending = game.request = None


def _advance(game: Game, sample: Any = None) -> None:
    """Run the game until it ends or waits on a model; ``sample`` answers the request it waited on."""
    neg = game.negotiation
    while not neg.done:
        side = neg.to_move
        agent = game.agents[side]
        try:
            if game.pending is not None:
                try:
                    game.request = game.pending.send(sample)
                    return
                except StopIteration as finished:
                    game.pending = game.request = None
                    reply: Reply = finished.value
            elif hasattr(agent, "turn"):
                game.pending = agent.turn(neg)
                game.request = next(game.pending)
                return
            else:
                reply = agent.respond(neg)
        except Exception as err:  # noqa: BLE001 - recorded as an error, never scored
            _fail(game, side, err)
            return
        sample = None
        neg.step(reply)


def play_lockstep(games: list[Game], on_finish: Callable[[Game], None] | None = None) -> None:
    for game in games:
        _advance(game)
        if game.negotiation.done and on_finish:
            on_finish(game)
    waiting = [g for g in games if g.request is not None]
    while waiting:
        groups: dict[tuple, list[Game]] = defaultdict(list)
        for g in waiting:
            r = g.request
            groups[(id(r.model), r.temperature, r.stop_chars)].append(g)
        for group in groups.values():
            model = group[0].request.model
            first = group[0].request
            try:
                samples = model.continue_batch([g.request.sequence for g in group],
                                               [g.request.max_new_tokens for g in group],
                                               first.temperature, first.stop_chars)
            except Exception as err:  # noqa: BLE001 - a failing model fails the games that waited on it
                for g in group:
                    _fail(g, g.negotiation.to_move, err)
                    if on_finish:
                        on_finish(g)
                continue
            for g, sample in zip(group, samples):
                _advance(g, sample)
                if g.negotiation.done and on_finish:
                    on_finish(g)
        waiting = [g for g in games if g.request is not None]
