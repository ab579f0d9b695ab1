"""Any NegMAS SAO negotiator as a haggler agent (``negmas:CLASSNAME``): the negotiator plays as it does in
NegMAS's own ``SAOMechanism``, because it plays in one.

Each haggler negotiation gets a real ``SAOMechanism`` (``n_steps`` = the turn limit, one offer per step)
seating the NegMAS negotiator and a proxy for the haggler counterpart, in the order of haggler's opener.
haggler's turn k is the mechanism's step k: the counterpart's turns are handed to the mechanism as the
proxy's moves (``SAOMechanism.step(action=...)``), and the negotiator's turn is one ordinary step. So NegMAS
itself delivers everything it delivers in its own runs: the start and end callbacks, round callbacks,
``on_partner_proposal`` and ``on_partner_response`` at the moments it sends them, and a mechanism state
read the NegMAS way (step, relative time ``(step + 1) / (n_steps + 1)``, current offer and proposer id, two
negotiators). Only the bridge between haggler's turns and the mechanism's steps is written here.

haggler's counterpart moves map to NegMAS responses: offer = reject with that counter-offer, accept =
accept, walk away (or the invalid action that haggler counts as walking away) = END_NEGOTIATION, an
invalid action = NO_RESPONSE (the step passes and the offer on the table stands, as in haggler).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import random
from collections.abc import Iterator
from typing import Any

import negmas
import negmas.gb
import negmas.sao
import numpy as np
from negmas.gb.common import ResponseType
from negmas.sao import SAOMechanism, SAONegotiator, SAOResponse

from haggler.core.protocol import Negotiation
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Invalid, Offer, Reply, Side, Turn, WalkAway, other
from haggler.scenarios import negmas as negmas_bridge

# Measured on NegMAS 0.16: the SAO classes whose games change with the random stream (every other class
# that can be built from its name alone plays the same whatever the seed). Reproducible from the seed all
# the same (see ``OwnRandom``); the parity test covers the first two.
RANDOMIZED = ("MiCRONegotiator", "FastMiCRONegotiator", "RandomNegotiator", "RandomAlwaysAcceptingNegotiator",
              "LimitedOutcomesNegotiator", "NiceNegotiator", "TopFractionNegotiator")
MAX_WAITS = 1000  # NegMAS lets a negotiator answer WAIT without bound; a bridge that hangs helps nobody


@functools.cache
def negmas_class(name: str) -> type:
    """A NegMAS negotiator class by name (``BoulwareTBNegotiator``, from ``negmas.sao`` or ``negmas``) or by module
    path (``negmas_genius_agents.HardHeaded``, ``mypackage.agents.MyNegotiator``: any importable SAO negotiator,
    such as the ANAC agents the ``negmas-genius-agents`` package reimplements)."""
    if "." in name:
        module, _, attr = name.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), attr, None)
        except ImportError as err:
            raise ValueError(f"negmas:{name}: cannot import {module} ({err})") from None
        if cls is None:
            raise ValueError(f"negmas:{name}: {module} has no {attr}")
    else:
        cls = getattr(negmas.sao, name, None) or getattr(negmas, name, None)
    # SAO negotiators and the generic (GB) ones that SAO mechanisms accept, e.g. BoulwareTBNegotiator
    if not (isinstance(cls, type) and issubclass(cls, (negmas.sao.SAONegotiator, negmas.gb.GBNegotiator))):
        raise ValueError(f"negmas:{name} is not a NegMAS SAO negotiator class (try negmas:BoulwareTBNegotiator, or "
                         "a module path such as negmas:negmas_genius_agents.HardHeaded)")
    try:  # abstract bases and meta negotiators need more than a name: refuse them before a run, not mid-run
        with OwnRandom(0).active():  # NegMAS draws a random name; the caller's stream is not ours to move
            cls(name="check", id="check")
    except Exception as err:  # noqa: BLE001 - whatever the constructor raises, the spec is unusable
        raise ValueError(f"negmas:{name} cannot be built from its class name alone ({type(err).__name__}: {err})"
                         ) from None
    return cls


class StepClockMechanism(SAOMechanism):
    """An SAOMechanism whose wall clock stands still, so that a game depends on its moves and its seed only.

    NegMAS 0.16's ``Mechanism.step`` draws one extra number from the global random stream whenever the
    mechanism's elapsed wall time passes a whole second (for its per-second random ending, drawn even when
    that ending is off). A randomized negotiator (MiCRO) draws from the same stream, so its moves depended on
    how long the game took: a language model that thinks for seconds, or a slow machine (one game of 612 in
    the parity grid differed on CI). With no wall-clock limits set, the elapsed time is read nowhere else, and
    a stopped clock is the game NegMAS plays whenever it runs within its first second."""

    @property
    def time(self) -> float:
        return 0.0


def mechanism(scenario: Scenario) -> SAOMechanism:
    """The SAOMechanism a ``negmas:`` agent plays in: one offer per step, haggler's turn limit as ``n_steps``,
    and no wall-clock limits (a language-model counterpart may think for minutes; NegMAS's relative time
    would otherwise follow the clock on the wall)."""
    return StepClockMechanism(outcome_space=negmas_bridge.outcome_space(scenario), n_steps=scenario.max_turns,
                              one_offer_per_step=True)


class OwnRandom:
    """This agent's own random streams, swapped in for Python's and numpy's global ones while NegMAS runs.

    NegMAS negotiators (MiCRO's repeated offers) and the mechanism itself (a draw per step for its optional
    random ending) use the global streams. Seeded from the negotiation's seed, a ``negmas:`` game then replays
    exactly, whatever else the process draws. Setting up (NegMAS draws random object names) runs on a stream
    of its own, so the game's stream starts at the first step: the game equals an ``SAOMechanism`` run that
    calls ``random.seed(seed); np.random.seed(seed % 2**32)`` after adding the negotiators, whenever only
    this side draws during the run.
    """

    def __init__(self, seed: int) -> None:
        self.py = random.Random(seed).getstate()
        self.np = np.random.RandomState(seed % 2**32).get_state()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        outer_py, outer_np = random.getstate(), np.random.get_state()
        random.setstate(self.py)
        np.random.set_state(self.np)
        try:
            yield
        finally:
            self.py, self.np = random.getstate(), np.random.get_state()
            random.setstate(outer_py)
            np.random.set_state(outer_np)


class Proxy(SAONegotiator):
    """The haggler counterpart's seat in the mechanism. Its moves are handed to the mechanism, so it is never
    asked to propose; it only listens, keeping the NegMAS negotiator's last response (the one thing the
    mechanism's state does not show: an accept of the negotiator's own standing offer)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.heard: ResponseType | None = None

    def propose(self, state: Any, dest: str | None = None) -> Any:
        # Reached only if NegMAS re-ran a step without the move it was given: Mechanism.step retries a step
        # without its action when a negotiator's callback raises TypeError.
        raise RuntimeError("NegMAS asked the haggler counterpart's proxy to propose (a negotiator raised TypeError?)")

    def on_partner_response(self, state: Any, partner_id: str, outcome: Any, response: ResponseType) -> None:
        self.heard = response


class NegmasAgent:
    def __init__(self, scenario: Scenario, side: Side, class_name: str, seed: int) -> None:
        self.spec = f"negmas:{class_name}"
        self.scenario = scenario
        self.side = side
        self.cls = negmas_class(class_name)
        self.seed = seed
        self.random = OwnRandom(seed)
        self.mechanism: SAOMechanism | None = None  # built at the first turn, when the opener is known
        self.negotiator: Any = None
        self.proxy: Proxy | None = None
        self._fed = 0  # haggler turns the mechanism has seen
        self._negotiation: Negotiation | None = None  # kept so that ``release`` can finish NegMAS's side

    def describe(self) -> dict[str, Any]:
        return {"negmas": negmas.__version__, "class": self.cls.__name__, "module": self.cls.__module__,
                "clock": "negmas: (step + 1) / (n_steps + 1)", "randomized": self.cls.__name__ in RANDOMIZED}

    def _start(self, negotiation: Negotiation) -> None:
        # The opener is seated first: SAOMechanism lets its first negotiator move at step 0.
        self.mechanism = mechanism(self.scenario)
        opener = negotiation.config.opener
        for side in (opener, other(opener)):
            if side == self.side:
                self.negotiator = self.cls(name=side, id=side)
                ufun = negmas_bridge.ufun(self.scenario, side, self.mechanism.outcome_space)
                self.mechanism.add(self.negotiator, ufun=ufun)
            else:
                self.proxy = Proxy(name=side, id=side)
                self.mechanism.add(self.proxy)

    def respond(self, negotiation: Negotiation) -> Reply:
        self._negotiation = negotiation
        if self.mechanism is None:
            with OwnRandom(self.seed).active():  # names only; see OwnRandom
                self._start(negotiation)
        with self.random.active():
            self._feed(negotiation)
            step = self.mechanism.state.step if self.mechanism.state.started else 0
            if step != negotiation.turn_index:  # the clocks must agree, or nothing downstream is NegMAS
                raise RuntimeError(f"NegMAS bridge out of step: mechanism step {step}, turn {negotiation.turn_index}")
            reply = self._own_move()
        self._fed = negotiation.turn_index + 1  # haggler records this reply as the current turn
        return reply

    def release(self) -> None:
        """Finish NegMAS's side of an ended negotiation: the negotiator hears the moves it has not seen and
        the mechanism ends as SAOMechanism ends (its end callback; at the deadline, NegMAS's timeout).
        The runner calls this when a negotiation finishes; ``play`` does not, so call it after ``play``."""
        n, m = self._negotiation, self.mechanism
        if n is None or m is None or not n.done:
            return
        self._negotiation = None
        with self.random.active():
            if n.error is not None:
                # Already recorded as an error; a negotiator that broke mid-game may break again in its
                # error callbacks, and that must not end the run.
                with contextlib.suppress(Exception):
                    m.abort()
                return
            self._feed(n)
            if m.state.running:
                m.step()  # past the last step: NegMAS ends the negotiation as timed out

    def _feed(self, negotiation: Negotiation) -> None:
        turns = negotiation.turns
        assert self.mechanism is not None and self.proxy is not None
        while self._fed < len(turns):
            turn = turns[self._fed]
            if turn.speaker != self.side:  # own turns were mechanism steps already
                last = self._fed == len(turns) - 1
                walked_away = last and negotiation.walked_away_by == turn.speaker
                self.mechanism.step({self.proxy.id: self._as_negmas(turn, walked_away)})
            self._fed += 1

    def _as_negmas(self, turn: Turn, walked_away: bool) -> SAOResponse:
        action = turn.action
        if isinstance(action, Offer):
            outcome = negmas_bridge.to_negmas_outcome(self.scenario, action.outcome)
            return SAOResponse(ResponseType.REJECT_OFFER, outcome)
        if isinstance(action, Accept):
            return SAOResponse(ResponseType.ACCEPT_OFFER, self.mechanism.state.current_offer)
        if isinstance(action, WalkAway) or walked_away:  # also the last of too many invalid actions
            return SAOResponse(ResponseType.END_NEGOTIATION, None)
        return SAOResponse(ResponseType.NO_RESPONSE, None)

    def _own_move(self) -> Reply:
        m, name = self.mechanism, self.cls.__name__
        self.proxy.heard = None
        state = m.step()
        for _ in range(MAX_WAITS):  # WAIT: NegMAS asks the same negotiator again within the same step
            if not (state.waiting and state.running):
                break
            state = m.step()
        else:
            raise RuntimeError(f"{name} answered WAIT {MAX_WAITS} times in a row")
        if state.agreement is not None:
            return Reply(f"[{name}] I accept.", Accept())
        mine = [o for who, o in state.new_offers if who == self.negotiator.id]
        if mine:
            return self._offer(name, mine[-1], "I propose")
        if not state.running:  # END_NEGOTIATION, LEAVE, refusing to propose, or no response at all
            return Reply(f"[{name}] I am leaving the negotiation.", WalkAway())
        if self.proxy.heard == ResponseType.ACCEPT_OFFER and state.current_proposer == self.negotiator.id:
            # It accepted its own standing offer (the counterpart's last move was invalid). NegMAS leaves that
            # offer on the table with the negotiator standing by it; haggler's way to say so is to repeat it.
            return self._offer(name, state.current_offer, "I stand by my offer:")
        return Reply(f"[{name}] (no response)", Invalid(f"the NegMAS negotiator answered {self.proxy.heard}"))

    def _offer(self, name: str, negmas_outcome: Any, words: str) -> Reply:
        outcome = negmas_bridge.from_negmas_outcome(self.scenario, tuple(negmas_outcome))
        terms = ", ".join(f"{k} {v}" for k, v in self.scenario.names_of(outcome).items())
        return Reply(f"[{name}] {words} {terms}.", Offer(outcome))
