"""Many negotiations at once: local-model calls batched in lockstep, API calls concurrent.

Agents that only ``respond`` answer at once. A ``TurnTakingAgent``'s turn is a generator that yields
requests: a ``SampleRequest`` (a local model: continue this token sequence) or an ``AsyncRequest`` (an API:
complete this chat). The driver advances every negotiation until it finishes or waits; hands local
requests to their model, which decodes them in a worker thread so that the event loop keeps serving API
calls meanwhile (a ``BatchingSampler`` takes them through ``submit``: they join its running batch, and
each comes back as soon as it is done; any other ``Sampler`` gets all waiting requests in one batched
call); and runs API requests concurrently (each endpoint has its own concurrency limit).
An agent or request that fails ends its negotiation as an error: recorded, never scored.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from haggler.core.protocol import Negotiation
from haggler.core.types import Reply
from haggler.engine.interfaces import (
    Agent,
    AsyncRequest,
    BatchingSampler,
    Request,
    RespondingAgent,
    SampleRequest,
    TurnTakingAgent,
)


@dataclass
class Game:
    negotiation: Negotiation
    agents: dict[str, Agent]  # side -> agent
    pending: Generator[Request, Any, Reply] | None = None  # the turn in progress of a turn-taking agent
    request: Request | None = None  # what that turn waits for
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
            elif isinstance(agent, TurnTakingAgent):
                game.pending = agent.turn(neg)
                try:
                    game.request = next(game.pending)
                    return
                except StopIteration as finished:  # a turn that needed no model call
                    game.pending = game.request = None
                    reply = finished.value
            elif isinstance(agent, RespondingAgent):
                reply = agent.respond(neg)
            else:
                raise TypeError(f"{type(agent).__name__} neither responds nor takes turns")
        except Exception as err:  # noqa: BLE001 - recorded as an error, never scored
            _fail(game, side, err)
            return
        answer = None
        neg.step(reply)


def _batch_key(request: SampleRequest) -> tuple:
    return (id(request.model), request.temperature, request.stop_chars, request.stop_ids)


class _Driver:
    """The state of one ``play_async``: the games in play, the tasks that serve them, the busy models."""

    def __init__(self, source: Iterator[Game], on_finish: Callable[[Game], None] | None,
                 max_active: int | None) -> None:
        self.source = source
        self.on_finish = on_finish
        self.max_active = max_active
        self.games: list[Game] = []
        self.tasks: dict[asyncio.Future, tuple[bool, list[Game]]] = {}  # -> (is a local batch, the games it serves)
        self.busy_models: set[int] = set()  # models without ``submit`` that are running a batched call

    def settle(self, game: Game) -> None:
        if game.negotiation.done and self.on_finish is not None:
            self.on_finish(game)

    def refill(self) -> None:
        """Drop finished games and start new ones up to ``max_active`` (a sliding window)."""
        self.games[:] = [g for g in self.games if not g.negotiation.done]
        while self.max_active is None or len(self.games) < self.max_active:
            game = next(self.source, None)
            if game is None:
                return
            if not game.negotiation.done:
                _advance(game)
            self.settle(game)
            if not game.negotiation.done:
                self.games.append(game)

    def start_api_requests(self) -> None:
        for game in self.games:
            if isinstance(game.request, AsyncRequest) and not game.in_flight:
                game.in_flight = True
                self.tasks[asyncio.ensure_future(game.request.run())] = (False, [game])

    def start_local_requests(self) -> None:
        """A model that batches continuously takes its requests at once (they join its running batch); any
        other gets one batched call at a time, with everything waiting on it."""
        groups: dict[tuple, list[Game]] = defaultdict(list)
        for game in self.games:
            if isinstance(game.request, SampleRequest) and not game.in_flight:
                groups[_batch_key(game.request)].append(game)
        for key, group in groups.items():
            if isinstance(group[0].request.model, BatchingSampler):
                self._submit(group)
            elif key[0] not in self.busy_models:
                self._call(key[0], group)

    def _submit(self, group: list[Game]) -> None:
        r = group[0].request
        try:
            futures = r.model.submit([g.request.sequence for g in group],
                                     [g.request.max_new_tokens for g in group], r.temperature, r.stop_chars,
                                     **r.stops())
        except Exception as err:  # noqa: BLE001 - a request the model refuses ends its games as errors
            for g in group:
                _advance(g, None, err)
                self.settle(g)
            return
        for g, future in zip(group, futures):
            g.in_flight = True
            self.tasks[asyncio.wrap_future(future)] = (False, [g])

    def _call(self, model_key: int, group: list[Game]) -> None:
        r = group[0].request
        self.busy_models.add(model_key)
        for g in group:
            g.in_flight = True
        call = asyncio.to_thread(r.model.continue_batch, [g.request.sequence for g in group],
                                 [g.request.max_new_tokens for g in group], r.temperature, r.stop_chars, **r.stops())
        self.tasks[asyncio.ensure_future(call)] = (True, group)

    def answer(self, done: set[asyncio.Future]) -> None:
        for task in done:
            batch, group = self.tasks.pop(task)
            if batch:
                self.busy_models.discard(id(group[0].request.model))
            error = task.exception()
            if error is not None:
                answers = [None] * len(group)
            else:
                answers = task.result() if batch else [task.result()]
            for game, answer in zip(group, answers):
                _advance(game, answer, error)
                self.settle(game)

    async def run(self) -> None:
        self.refill()
        while True:
            self.start_api_requests()
            self.start_local_requests()
            if not self.tasks:
                return
            done, _ = await asyncio.wait(self.tasks, return_when=asyncio.FIRST_COMPLETED)
            self.answer(done)
            self.refill()


async def play_async(source: Iterable[Game], on_finish: Callable[[Game], None] | None = None,
                     max_active: int | None = None) -> None:
    """Play every game from ``source``, at most ``max_active`` at a time (a sliding window: a finished
    game's place goes to the next one at once, so one slow negotiation never holds up a whole batch)."""
    await _Driver(iter(source), on_finish, max_active).run()


def play_lockstep(games: Iterable[Game], on_finish: Callable[[Game], None] | None = None,
                  max_active: int | None = None) -> None:
    asyncio.run(play_async(games, on_finish, max_active))
