"""``negmas:X`` is NegMAS's X: haggler's games against NegMAS's own ``SAOMechanism``.

The reference is written here, independently of the adapter: a plain ``SAOMechanism`` (``n_steps`` = the
turn limit, one offer per step, the same opener seated first). A haggler counterpart (a scripted agent with
the same seed) sits in it as a ``Seat``, a NegMAS negotiator that asks that agent on a mirror haggler
negotiation, so it plays on haggler's clock in both engines and only the NegMAS side is under test.

Deterministic classes must give the same moves, turn by turn, and the same ending. The randomized ones
(MiCRO, FastMiCRO) must too, under a shared seed, whenever only one side draws from the random stream;
when both do, NegMAS's single global stream cannot be split the way haggler's per-agent streams are, so
deal rates and mean utilities are compared over many games instead.
"""

from __future__ import annotations

import contextlib
import random
import time
from unittest import mock

import negmas.mechanisms
import numpy as np
import pytest
from negmas.gb.common import ResponseType
from negmas.sao import AspirationNegotiator, SAOMechanism, SAONegotiator, SAOResponse

from haggler.agents.negmas import RANDOMIZED, NegmasAgent, negmas_class
from haggler.agents.registry import SpecError, check_spec, make_agent
from haggler.core.protocol import Negotiation, ProtocolConfig, play
from haggler.core.types import Accept, Invalid, Offer, Reply, WalkAway, other
from haggler.scenarios import negmas as nb
from haggler.scenarios.generate import generate_scenarios
from haggler.scenarios.genius import import_genius
from tests.conftest import REPO, small_scenario
from tests.conftest import DOMAINS, Replay

CLASSES = [
    "AspirationNegotiator", "NaiveTitForTatNegotiator", "NiceTitForTatNegotiator", "LinearTBNegotiator",
    "ConcederTBNegotiator", "BoulwareTBNegotiator", "ToughNegotiator", "MiCRONegotiator", "FastMiCRONegotiator",
    "CABNegotiator", "WARNegotiator", "HybridNegotiator", "BestOfferOrientedTBNegotiator",
]
SCRIPTED = ["scripted:boulware", "scripted:linear", "scripted:conceder", "scripted:hardliner", "scripted:tft",
            "scripted:random"]
GENERATED = generate_scenarios(6, 41, max_turns=16)
MICRO = ("MiCRONegotiator", "FastMiCRONegotiator")  # the randomized classes among CLASSES

pytestmark = pytest.mark.filterwarnings("ignore")  # NegMAS warns freely (e.g. about unset time limits)


class Seat(SAONegotiator):
    """A haggler agent seated in an SAOMechanism: the partner's move of each step is replayed into a mirror
    haggler negotiation, and the agent's reply there is its answer here (an invalid action: NO_RESPONSE)."""

    def __init__(self, agent, scenario, side, opener):
        super().__init__(name=side, id=side)
        self.agent = agent
        self.mirror = Negotiation(scenario, ProtocolConfig(opener=opener))

    def propose(self, state, dest=None):
        raise AssertionError("the mechanism calls the seat itself")

    def __call__(self, state, dest=None):
        if len(self.mirror.turns) < state.step:  # the partner's move since ours
            moved = state.current_proposer != self.id and state.current_offer is not None
            action = Offer(tuple(state.current_offer)) if moved else Invalid("no response")
            self.mirror.step(Reply("", action))
        action = self.agent.respond(self.mirror).action
        self.mirror.step(Reply("", action))
        if isinstance(action, Accept):
            return SAOResponse(ResponseType.ACCEPT_OFFER, state.current_offer)
        if isinstance(action, Offer):
            return SAOResponse(ResponseType.REJECT_OFFER, action.outcome)
        if isinstance(action, Invalid):
            return SAOResponse(ResponseType.NO_RESPONSE, None)
        return SAOResponse(ResponseType.END_NEGOTIATION, None)


def spec_seats(scenario, opener, specs, seeds):
    """Who sits where in the reference: NegMAS classes as themselves, haggler agents in a ``Seat`` (with no
    NegMAS utility function, like the adapter's proxy)."""

    def seat(side, space):
        kind, name = specs[side].split(":")
        if kind == "negmas":
            return negmas_class(name)(name=side, id=side), nb.ufun(scenario, side, space)
        return Seat(make_agent(specs[side], scenario, side, seeds[side]), scenario, side, opener), None

    return seat


class Clock:
    """``time`` as NegMAS's mechanisms read it, with ``perf_counter_ns`` advancing ``seconds`` per read."""

    def __init__(self, seconds):
        self.now, self.tick = 0, int(seconds * 1e9)

    def perf_counter_ns(self):
        self.now += self.tick
        return self.now

    def __getattr__(self, name):
        return getattr(time, name)


def wall_clock(seconds_per_read):
    return mock.patch.object(negmas.mechanisms, "time", Clock(seconds_per_read))


def reference(scenario, opener, seat, shared_seed=0, clock=None):
    """The game in NegMAS's own SAOMechanism: one move per step as (kind, outcome), the ending, the deal.
    Played on a stopped wall clock (the game NegMAS plays within its first second; see StepClockMechanism)
    unless ``clock`` says otherwise."""
    with clock or wall_clock(0):
        return _reference(scenario, opener, seat, shared_seed)


def _reference(scenario, opener, seat, shared_seed):
    space = nb.outcome_space(scenario)
    m = SAOMechanism(outcome_space=space, n_steps=scenario.max_turns, one_offer_per_step=True)
    for side in (opener, other(opener)):
        negotiator, ufun = seat(side, space)
        m.add(negotiator, ufun=ufun)
    random.seed(shared_seed)  # the negotiation's stream starts at the first step (setup only draws names)
    np.random.seed(shared_seed % 2**32)
    moves = []
    while True:
        state = m.step()
        if state.agreement is not None:
            return moves + [("accept", None)], "accept", tuple(state.agreement)
        if state.broken:
            return moves + [("end", None)], "walk_away", None
        if not state.running:
            return moves, "deadline", None
        offered = [o for who, o in state.new_offers]
        mover = m.negotiator_ids[(state.step - 1) % 2]
        if offered:
            moves.append(("offer", tuple(offered[-1])))
        elif state.current_proposer == mover and state.n_acceptances == 1:
            # It accepted its own standing offer (after an invalid haggler turn): NegMAS leaves the offer
            # standing, and haggler writes that move as repeating the offer.
            moves.append(("offer", tuple(state.current_offer)))
        else:
            moves.append(("none", None))


def haggler_play(scenario, opener, agents):
    n = Negotiation(scenario, ProtocolConfig(opener=opener))
    play(n, agents["seller"], agents["buyer"])
    for agent in agents.values():
        if isinstance(agent, NegmasAgent):
            agent.release()  # play() does not; the runner does
    assert n.error is None, n.error
    kinds = {Offer: "offer", Accept: "accept", WalkAway: "end", Invalid: "none"}
    moves = [(kinds[type(t.action)], getattr(t.action, "outcome", None)) for t in n.turns]
    return moves, n.ended_by, n.agreement


def haggler_game(scenario, opener, specs, seeds):
    return haggler_play(scenario, opener, {side: make_agent(specs[side], scenario, side, seeds[side])
                                           for side in ("seller", "buyer")})


def _draws(spec):
    return spec.split(":")[1] in RANDOMIZED


def same_game(scenario, opener, seller, buyer, seed=7):
    """Plays one pairing in both engines; True when every move and the ending agree."""
    specs, seeds = {"seller": seller, "buyer": buyer}, {"seller": 2 * seed, "buyer": 2 * seed + 1}
    drawing = [side for side in specs if _draws(specs[side])]
    assert len(drawing) <= 1, "exact parity needs at most one side drawing from the random stream"
    shared = seeds[drawing[0]] if drawing else 0
    return haggler_game(scenario, opener, specs, seeds) == reference(
        scenario, opener, spec_seats(scenario, opener, specs, seeds), shared)


def pairings(classes, counterparts):
    """Every class against every counterpart, on both sides; pairs where both sides draw are left out."""
    out = []
    for x in classes:
        for c in counterparts:
            for seller, buyer in ((f"negmas:{x}", c), (c, f"negmas:{x}")):
                if not (_draws(seller) and _draws(buyer)) and (seller, buyer) not in out:
                    out.append((seller, buyer))
    return out


def parity_table(scenarios, classes, counterparts):
    table = {x: [0, 0] for x in classes}
    failures = []
    for s in scenarios:
        for seller, buyer in pairings(classes, counterparts):
            for opener in ("seller", "buyer"):
                ok = same_game(s, opener, seller, buyer)
                for x in {seller, buyer}:
                    if x.removeprefix("negmas:") in table:
                        table[x.removeprefix("negmas:")][0] += ok
                        table[x.removeprefix("negmas:")][1] += 1
                if not ok:
                    failures.append((s.id, opener, seller, buyer))
    return table, failures


def _genius(genius_dir, key, max_turns=20):
    d, sp, bp = (genius_dir / p for p in DOMAINS[key])
    return import_genius(d, sp, bp, max_turns=max_turns)


NEGMAS = [f"negmas:{c}" for c in CLASSES]


def test_every_class_plays_as_in_saomechanism_on_generated_scenarios():
    table, failures = parity_table(GENERATED[:1], CLASSES, NEGMAS + SCRIPTED)
    assert not failures, failures[:10]
    assert all(n > 0 for _, n in table.values())


def test_every_class_plays_as_in_saomechanism_on_a_genius_domain(genius_dir):
    s = _genius(genius_dir, "laptop", max_turns=12)
    _, failures = parity_table([s], CLASSES, ["negmas:AspirationNegotiator", "negmas:MiCRONegotiator",
                                               "scripted:boulware", "scripted:tft"])
    assert not failures, failures[:10]


def test_a_randomized_negmas_game_does_not_follow_the_wall_clock():
    """NegMAS draws from the random stream each time a mechanism's elapsed wall time passes a whole second,
    and MiCRO draws its repeated offers from that stream: on NegMAS's own mechanism a slow game is another
    game. A ``negmas:`` agent's game must not depend on how long its partner (a language model) thinks."""
    s, opener = GENERATED[1], "buyer"
    specs, seeds = {"seller": "negmas:MiCRONegotiator", "buyer": "negmas:ToughNegotiator"}, {"seller": 14, "buyer": 15}
    fast = haggler_game(s, opener, specs, seeds)
    with wall_clock(1.5):
        assert haggler_game(s, opener, specs, seeds) == fast
    assert reference(s, opener, spec_seats(s, opener, specs, seeds), 14) == fast
    slow = reference(s, opener, spec_seats(s, opener, specs, seeds), 14, clock=wall_clock(1.5))
    assert slow[0] != fast[0]  # the effect is real in NegMAS itself


@pytest.mark.slow
def test_full_parity_grid(genius_dir):
    scenarios = [_genius(genius_dir, k) for k in ("laptop", "camera", "itex")] + GENERATED
    table, failures = parity_table(scenarios, CLASSES, NEGMAS + SCRIPTED)
    print("\nparity (identical games / games):")
    for x, (ok, n) in table.items():
        print(f"  {x}: {ok} / {n}")
    assert not failures, failures[:10]


class Recorder(AspirationNegotiator):
    """AspirationNegotiator with a log of every callback NegMAS sends and what the state reads at each."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log = []

    def _note(self, what, state, *extra):
        nmi = self.nmi
        self.log.append((what, state.step, state.relative_time, state.current_offer, state.current_proposer,
                         nmi.n_negotiators, nmi.state.step, nmi.state.relative_time, *extra))

    def on_negotiation_start(self, state):
        self._note("start", state)
        super().on_negotiation_start(state)

    def on_round_start(self, state):
        self._note("round_start", state)
        super().on_round_start(state)

    def on_partner_proposal(self, state, partner_id, offer):
        self._note("proposal", state, partner_id, offer)
        super().on_partner_proposal(state, partner_id, offer)

    def on_partner_response(self, state, partner_id, outcome, response):
        self._note("response", state, partner_id, outcome, response)
        super().on_partner_response(state, partner_id, outcome, response)

    def on_negotiation_end(self, state):
        self._note("end", state, state.agreement, state.broken, state.timedout)
        super().on_negotiation_end(state)

    def __call__(self, state, dest=None):
        self._note("call", state)
        return super().__call__(state, dest)


def _recorded_games(scenario, opener, side, counterpart):
    """The Recorder on ``side`` against ``counterpart()`` (a fresh haggler agent each call), in both engines."""
    agent = NegmasAgent(scenario, side, "AspirationNegotiator", 3)
    agent.cls = Recorder
    mine = haggler_play(scenario, opener, {side: agent, other(side): counterpart()})
    recorder = Recorder(name=side, id=side)

    def seat(s, space):
        if s == side:
            return recorder, nb.ufun(scenario, side, space)
        return Seat(counterpart(), scenario, s, opener), None

    theirs = reference(scenario, opener, seat)
    return mine, theirs, agent.negotiator.log, recorder.log


@pytest.mark.parametrize("opener", ["seller", "buyer"])
def test_callbacks_and_clock_are_saomechanisms(opener):
    s = GENERATED[1]
    tft = lambda: make_agent("scripted:tft", s, "seller", 4)  # noqa: E731 - a fresh agent per engine
    mine, theirs, log, expected = _recorded_games(s, opener, "buyer", tft)
    assert mine == theirs and log == expected
    kinds = [e[0] for e in log]
    assert kinds[0] == "start" and kinds.count("end") == 1 and kinds[-1] == "end"
    assert {"proposal", "response", "round_start", "call"} <= set(kinds)
    for what, step, t, offer, proposer, n_negotiators, nmi_step, nmi_t, *_ in log:
        assert n_negotiators == 2 and nmi_step == step and nmi_t == t
        if what == "call":  # NegMAS's clock, never haggler's: it never reaches 1
            assert t == (step + 1) / (s.max_turns + 1) and proposer in (None, "seller")


def test_an_invalid_turn_and_a_walk_away_reach_negmas_as_saomechanism_sends_them():
    s = small_scenario(max_turns=8)
    script = [Offer((2, 1)), Invalid("garbled"), Offer((2, 0)), WalkAway()]
    mine, theirs, log, expected = _recorded_games(s, "seller", "buyer", lambda: Replay(list(script)))
    assert mine == theirs and log == expected
    assert mine[1] == "walk_away" and [m[0] for m in mine[0]][1:3] == ["offer", "none"]
    assert mine[0][3] == mine[0][1]  # Aspiration accepted its own standing offer: haggler shows it standing by it
    responses = [e[-1] for e in log if e[0] == "response"]
    assert ResponseType.NO_RESPONSE in responses and ResponseType.END_NEGOTIATION in responses
    assert log[-1][0] == "end" and log[-1][-2] is True  # ended broken, as END_NEGOTIATION ends it in NegMAS


def _outcome_stats(scenario, agreement):
    if agreement is None:
        return (0.0, scenario.seller.reservation, scenario.buyer.reservation)
    return (1.0, scenario.utility("seller", agreement), scenario.utility("buyer", agreement))


def test_randomized_pairs_match_saomechanism_in_deal_rate_and_utilities():
    """MiCRO-like against MiCRO-like: both sides draw, and NegMAS's one global stream interleaves their draws,
    which haggler's per-agent streams cannot reproduce game by game. Over many seeded games (paired by
    scenario, opener and seed), deal rate and mean utilities must agree within three standard errors."""
    diffs, deals, identical = [], [0, 0], 0
    for s in GENERATED:
        for opener in ("seller", "buyer"):
            for seed in range(3):
                for a in MICRO:
                    for b in MICRO:
                        specs = {"seller": f"negmas:{a}", "buyer": f"negmas:{b}"}
                        seeds = {"seller": seed, "buyer": seed + 100}
                        mine = haggler_game(s, opener, specs, seeds)
                        theirs = reference(s, opener, spec_seats(s, opener, specs, seeds), seed)
                        identical += mine == theirs
                        h, r = _outcome_stats(s, mine[2]), _outcome_stats(s, theirs[2])
                        deals[0] += h[0]
                        deals[1] += r[0]
                        diffs.append(np.subtract(h, r))
    d = np.array(diffs)
    mean, se = d.mean(axis=0), d.std(axis=0, ddof=1) / np.sqrt(len(d))
    assert np.all(np.abs(mean) <= 3 * se + 1e-12), (mean, se)
    assert deals[0] > 0 and deals[1] > 0  # MiCRO against MiCRO does agree, in both engines
    print(f"\nrandomized pairs: {identical}/{len(d)} games identical, deals {deals[0]:.0f} vs {deals[1]:.0f}, "
          f"mean differences (deal, seller u, buyer u) {mean.round(4).tolist()}, SE {se.round(4).tolist()}")


REPLAY_SCRIPT = """
import warnings; warnings.simplefilter("ignore")
from haggler.agents.registry import SpecError, check_spec, make_agent
from haggler.core.protocol import Negotiation, ProtocolConfig, play, transcript
from haggler.scenarios.generate import generate_scenarios
for s in generate_scenarios(3, 41, max_turns=16):
    for seller, buyer in [("negmas:MiCRONegotiator", "negmas:HybridNegotiator"),
                          ("scripted:tft", "negmas:CABNegotiator"),
                          ("negmas:AspirationNegotiator", "negmas:FastMiCRONegotiator")]:
        n = play(Negotiation(s), make_agent(seller, s, "seller", 1), make_agent(buyer, s, "buyer", 2))
        print(transcript(n))
"""


def test_negmas_games_replay_across_processes():
    """NegMAS breaks ties in set and dict order; with string option values that order followed Python's
    per-process hash seed, and games changed from run to run. They must not."""
    import os
    import subprocess
    import sys

    runs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", REPLAY_SCRIPT], capture_output=True, text=True, env=env,
                             cwd=REPO, timeout=120, check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(out.stdout)
    assert runs[0] == runs[1] and runs[0].count("\n") == 9


def test_a_seeded_randomized_agent_replays_and_leaves_the_callers_stream_alone():
    s = GENERATED[2]
    specs = {"seller": "negmas:MiCRONegotiator", "buyer": "negmas:FastMiCRONegotiator"}
    random.seed(123)
    before = random.getstate()
    first = haggler_game(s, "seller", specs, {"seller": 5, "buyer": 6})
    assert random.getstate() == before  # NegMAS drew from the agents' own streams, not the caller's
    random.seed(999)  # a different caller stream changes nothing
    assert haggler_game(s, "seller", specs, {"seller": 5, "buyer": 6}) == first
    others = {repr(haggler_game(s, "seller", specs, {"seller": k, "buyer": k + 1})) for k in range(10, 20)}
    assert len(others | {repr(first)}) > 1  # the seed matters: the agents do draw


def test_the_randomized_list_is_what_draws_and_every_listed_class_matches_under_a_shared_seed():
    s = GENERATED[3]
    for name in CLASSES + [c for c in RANDOMIZED if c not in CLASSES]:
        specs = {"seller": f"negmas:{name}", "buyer": "scripted:tft"}
        games = {repr(haggler_game(s, "seller", specs, {"seller": k, "buyer": 1})) for k in range(6)}
        assert (len(games) > 1) == (name in RANDOMIZED), name
        if name not in CLASSES:  # the listed classes are covered by the grids above
            for opener in ("seller", "buyer"):
                assert same_game(s, opener, f"negmas:{name}", "scripted:tft"), (name, opener)
                assert same_game(s, opener, "negmas:AspirationNegotiator", f"negmas:{name}"), (name, opener)


@pytest.mark.parametrize("name", ["SAOCallNegotiator", "MeanMetaNegotiator"])
def test_classes_that_need_more_than_a_name_are_refused_before_a_run(name):
    with pytest.raises(SpecError, match="cannot be built from its class name alone"):
        check_spec(f"negmas:{name}")


ANAC_DETERMINISTIC = ["HardHeaded", "CUHKAgent", "IAMhaggler", "AgentGG"]  # ANAC 2011-2019 agents, no random draws
ANAC_RANDOMIZED = ["AgentK", "Atlas3"]  # ANAC 2010 and 2015: draw from the random stream


def test_negotiator_classes_by_module_path_play_as_in_saomechanism():
    """``negmas:MODULE.CLASS``: the ANAC agents that ``negmas-genius-agents`` reimplements, as faithfully as the
    built-in classes: the same moves and endings as in NegMAS's own mechanism, and a randomized one replays its
    seed and matches under a shared seed."""
    pytest.importorskip("negmas_genius_agents")
    classes = [f"negmas_genius_agents.{c}" for c in ANAC_DETERMINISTIC]
    table, failures = parity_table(GENERATED[:1], classes, ["scripted:boulware", "scripted:linear", "scripted:tft"])
    assert not failures, failures[:10]
    assert all(n == 12 for _, n in table.values())
    s = GENERATED[2]
    for c in ANAC_RANDOMIZED:
        for opener in ("seller", "buyer"):
            specs, seeds = {"seller": f"negmas:negmas_genius_agents.{c}", "buyer": "scripted:linear"}, {"seller": 14,
                                                                                                    "buyer": 15}
            game = haggler_game(s, opener, specs, seeds)
            assert game == haggler_game(s, opener, specs, seeds)
            assert game == reference(s, opener, spec_seats(s, opener, specs, seeds), 14)
    check_spec("negmas:negmas_genius_agents.HardHeaded")
    with pytest.raises(SpecError, match="has no NoSuchAgent"):
        check_spec("negmas:negmas_genius_agents.NoSuchAgent")
    with pytest.raises(SpecError, match="cannot import no_such_package"):
        check_spec("negmas:no_such_package.Agent")
    with pytest.raises(SpecError, match="not a NegMAS SAO negotiator"):
        check_spec("negmas:collections.OrderedDict")
