"""Many negotiations at once: local-model calls batched in lockstep, API calls concurrent.

Scripted agents answer at once. A model-backed agent's turn is a generator that yields requests:
``SampleRequest`` (a local model: continue this token sequence) or ``ChatRequest`` (an API: complete this
chat). The driver advances every negotiation until it finishes or waits; hands local requests to their
model, which decodes them in a worker thread so that the event loop keeps serving API calls meanwhile
(``HFModel.submit``: they join its running batch, and each comes back as soon as it is done; a model
without it gets all waiting requests in one batched call); and runs API requests concurrently (each
endpoint has its own concurrency limit).
An agent or request that fails ends its negotiation as an error: recorded, never scored.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

from haggler.core.protocol import Negotiation
from haggler.core.types import Reply


@dataclass
class Game:
    negotiation: Negotiation
    agents: dict[str, Any]  # side -> agent
    pending: Generator | None = None  # the turn in progress of a model-backed agent
    request: Any = None  # what that turn waits for
    in_flight: bool = False


def _fail(game: Game, side: str, err: BaseException) -> None:
    agent = game.agents.get(side)
    game.negotiation.fail(f"{side} agent {getattr(agent, 'spec', agent)!r} failed: {type(err).__name__}: {err}")
    game.pending = game.request = None


def _advance(game: Game, answer: Any = None, error: BaseException | None = None) -> None:
    """Run the game until it ends or waits on a model; ``answer`` (or ``error``) answers what it waited on."""
    neg = game.negotiation
    game.in_flight = False
    if error is not None:
        _fail(game, neg.to_move, error)
        return
    while not neg.done:
        side = neg.to_move
        agent = game.agents[side]
        try:
            if game.pending is not None:
                try:
                    game.request = game.pending.send(answer)
                    return
                except StopIteration as finished:
                    game.pending = game.request = None
                    reply: Reply = finished.value
            elif hasattr(agent, "turn"):
                game.pending = agent.turn(neg)
                try:
                    game.request = next(game.pending)
                    return
                except StopIteration as finished:  # a turn that needed no model call
                    game.pending = game.request = None
                    reply = finished.value
            else:
                reply = agent.respond(neg)
        except Exception as err:  # noqa: BLE001 - recorded as an error, never scored
            _fail(game, side, err)
            return
        answer = None
        neg.step(reply)


def _batch_key(request: Any) -> tuple:
    return (id(request.model), request.temperature, request.stop_chars)


async def play_async(source: Iterable[Game], on_finish: Callable[[Game], None] | None = None,
                     max_active: int | None = None) -> None:
    """Play every game from ``source``, at most ``max_active`` at a time (a sliding window: a finished
    game's place goes to the next one at once, so one slow negotiation never holds up a whole batch)."""
    pending_games = iter(source)
    games: list[Game] = []

    def settle(game: Game) -> None:
        if game.negotiation.done and on_finish is not None:
            on_finish(game)

    def refill() -> None:
        games[:] = [g for g in games if not g.negotiation.done]
        while max_active is None or len(games) < max_active:
            game = next(pending_games, None)
            if game is None:
                return
            if not game.negotiation.done:
                _advance(game)
            settle(game)
            if not game.negotiation.done:
                games.append(game)

    refill()
    tasks: dict[asyncio.Task, tuple[bool, list[Game]]] = {}  # task -> (is a local batch, the games it serves)
    busy_models: set[int] = set()
    while True:
        # start every API request that is not yet running
        for game in games:
            if game.request is not None and not game.in_flight and hasattr(game.request, "run"):
                game.in_flight = True
                tasks[asyncio.ensure_future(game.request.run())] = (False, [game])
        # local requests: a model that batches continuously takes them at once (they join its running
        # batch); any other gets one batched call at a time, with everything waiting on it
        groups: dict[tuple, list[Game]] = defaultdict(list)
        for game in games:
            if game.request is not None and not game.in_flight and hasattr(game.request, "sequence"):
                groups[_batch_key(game.request)].append(game)
        for key, group in groups.items():
            r = group[0].request
            if hasattr(r.model, "submit"):
                try:
                    futures = r.model.submit([g.request.sequence for g in group],
                                             [g.request.max_new_tokens for g in group], r.temperature, r.stop_chars)
                except Exception as err:  # noqa: BLE001 - a request the model refuses ends its games as errors
                    for g in group:
                        _advance(g, None, err)
                        settle(g)
                    continue
                for g, future in zip(group, futures):
                    g.in_flight = True
                    tasks[asyncio.wrap_future(future)] = (False, [g])
                continue
            if key[0] in busy_models:
                continue
            busy_models.add(key[0])
            for g in group:
                g.in_flight = True
            call = asyncio.to_thread(r.model.continue_batch, [g.request.sequence for g in group],
                                     [g.request.max_new_tokens for g in group], r.temperature, r.stop_chars)
            tasks[asyncio.ensure_future(call)] = (True, group)
        if not tasks:
            return
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            batch, group = tasks.pop(task)
            if batch:
                busy_models.discard(id(group[0].request.model))
            error = task.exception()
            if error is not None:
                answers = [None] * len(group)
            else:
                answers = task.result() if batch else [task.result()]
            for game, answer in zip(group, answers):
                _advance(game, answer, error)
                settle(game)
        refill()


def play_lockstep(games: Iterable[Game], on_finish: Callable[[Game], None] | None = None,
                  max_active: int | None = None) -> None:
    asyncio.run(play_async(games, on_finish, max_active))
