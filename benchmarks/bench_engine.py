"""haggler's engine against NegMAS's SAOMechanism, like with like: the same negotiators, the same clock and the
same turn limit in both, on the same random linear additive scenarios (4 issues x 5 options), in one process.

Two comparisons, each checked game by game (the games must come out identical, or the speeds compare
different work):
- scripted: haggler's time-dependent Boulware seller (e = 0.2) against its Conceder buyer (e = 2), AC_next,
  on haggler's clock turn / (max_turns - 1). In NegMAS they run as SAO negotiators that call the very same
  decision code, so what differs is the engine: haggler's protocol loop against SAOMechanism's steps.
- negmas: NegMAS's BoulwareTBNegotiator against ConcederTBNegotiator on NegMAS's clock, as ``negmas:``
  agents in haggler (each in its own SAOMechanism, see haggler/agents/negmas.py) and natively.
Both engines: 10 turns = ``n_steps=10`` with one offer per step. Prints negotiations per second for each
engine (the best of ``--rounds`` timed rounds) and their ratio, then one JSON line with the figures.

    .venv/bin/python benchmarks/bench_engine.py [--scenarios 50] [--repeats 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from typing import Any

import numpy as np
from negmas.gb.common import ResponseType
from negmas.sao import BoulwareTBNegotiator, ConcederTBNegotiator, SAOMechanism, SAONegotiator, SAOResponse

from haggler.agents.registry import make_agent
from haggler.agents.scripted import TIE, make_scripted
from haggler.core.protocol import Negotiation, ProtocolConfig, play
from haggler.core.scenario import Issue, Preferences, Scenario
from haggler.scenarios import negmas as negmas_bridge

TURNS = 10


def random_scenario(i: int, rng: np.random.Generator, n_issues: int = 4, n_options: int = 5) -> Scenario:
    issues = tuple(Issue(name=f"issue{k}", options=tuple(f"v{j}" for j in range(n_options))) for k in range(n_issues))
    prefs = {}
    for side in ("seller", "buyer"):
        w = rng.dirichlet(np.ones(n_issues))
        w[-1] = 1.0 - w[:-1].sum()
        prefs[side] = Preferences(
            weights={iss.name: float(x) for iss, x in zip(issues, w)},
            values={iss.name: {o: float(v) for o, v in zip(iss.options, rng.uniform(0, 1, n_options))} for iss in issues},
            reservation=0.0,
        )
    return Scenario(id=f"bench{i}", context="a benchmark good", issues=issues, seller=prefs["seller"],
                    buyer=prefs["buyer"], max_turns=TURNS)


class ScriptedInNegmas(SAONegotiator):
    """haggler's time-dependent agent as a NegMAS negotiator: the same target, offer and AC_next code, fed
    NegMAS's state and haggler's clock (step / (n_steps - 1))."""

    def __init__(self, scenario: Scenario, side: str, name: str, seed: int) -> None:
        super().__init__(name=side, id=side)
        self.scenario, self.side = scenario, side
        self.agent = make_scripted(name, scenario, side, seed)

    def propose(self, state: Any, dest: str | None = None) -> Any:
        raise AssertionError("__call__ answers for it")

    def __call__(self, state: Any, dest: str | None = None) -> SAOResponse:
        a = self.agent
        mine, mine_u = a._offer_at(a._at_or_above(a.target(state.step / (self.nmi.n_steps - 1))))
        theirs = state.current_offer
        if theirs is not None and state.current_proposer != self.id:
            u = self.scenario.utility(self.side, theirs)
            if u >= mine_u - TIE and u >= a.reservation - TIE:
                return SAOResponse(ResponseType.ACCEPT_OFFER, theirs)
        return SAOResponse(ResponseType.REJECT_OFFER, mine)


def haggler_games(scenarios: list[Scenario], repeats: int, specs: tuple[str, str]) -> tuple[float, list]:
    done = []
    start = time.perf_counter()
    for r in range(repeats):
        for s in scenarios:
            n = Negotiation(s, ProtocolConfig(opener="seller"))
            seller, buyer = make_agent(specs[0], s, "seller", 2 * r), make_agent(specs[1], s, "buyer", 2 * r + 1)
            play(n, seller, buyer)
            for agent in (seller, buyer):
                if hasattr(agent, "release"):  # NegMAS's end callbacks belong to the game
                    agent.release()
            done.append(n)
    return len(done) / (time.perf_counter() - start), done


def negmas_games(scenarios: list[Scenario], repeats: int, kind: str) -> tuple[float, list]:
    spaces = [negmas_bridge.outcome_space(s) for s in scenarios]  # what haggler's Scenario holds already
    done = []
    start = time.perf_counter()
    for r in range(repeats):
        for s, space in zip(scenarios, spaces):
            m = SAOMechanism(outcome_space=space, n_steps=s.max_turns, one_offer_per_step=True)
            if kind == "scripted":
                m.add(ScriptedInNegmas(s, "seller", "boulware", 2 * r))
                m.add(ScriptedInNegmas(s, "buyer", "conceder", 2 * r + 1))
            else:  # utility functions are built per game, as the negmas: adapter builds them
                m.add(BoulwareTBNegotiator(name="seller", id="seller"), ufun=negmas_bridge.ufun(s, "seller", space))
                m.add(ConcederTBNegotiator(name="buyer", id="buyer"), ufun=negmas_bridge.ufun(s, "buyer", space))
            m.run()
            done.append(m)
    return len(done) / (time.perf_counter() - start), done


def same_games(negotiations: list[Negotiation], mechanisms: list[SAOMechanism]) -> int:
    """Games with the same offers in the same order and the same agreement in both engines."""
    same = 0
    for n, m in zip(negotiations, mechanisms):
        offers = [t.action.outcome for t in n.turns if hasattr(t.action, "outcome")]
        theirs = [tuple(o) for _, _, o in m.extended_trace]
        agreement = None if m.agreement is None else tuple(m.agreement)
        same += offers == theirs and n.agreement == agreement
    return same


def compare(scenarios: list[Scenario], repeats: int, kind: str, specs: tuple[str, str], rounds: int) -> dict[str, Any]:
    negmas_games(scenarios[:5], 1, kind)  # warm up imports and caches
    haggler_games(scenarios[:5], 1, specs)
    negmas_rate = haggler_rate = 0.0
    for _ in range(rounds):  # best of several, alternating engines: a shared machine's noise only slows a round
        rate, mechanisms = negmas_games(scenarios, repeats, kind)
        negmas_rate = max(negmas_rate, rate)
        rate, negotiations = haggler_games(scenarios, repeats, specs)
        haggler_rate = max(haggler_rate, rate)
    return {
        f"{kind}_haggler_per_s": round(haggler_rate, 1),
        f"{kind}_negmas_per_s": round(negmas_rate, 1),
        f"{kind}_ratio": round(haggler_rate / negmas_rate, 2),
        f"{kind}_identical_games": same_games(negotiations, mechanisms),
        f"{kind}_turns_per_negotiation": round(sum(len(n.turns) for n in negotiations) / len(negotiations), 2),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scenarios", type=int, default=50)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per engine; the best counts")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    scenarios = [random_scenario(i, rng) for i in range(args.scenarios)]
    warnings.simplefilter("ignore")
    total = args.scenarios * args.repeats
    figures: dict[str, Any] = {
        "benchmark": "engine", "negotiations": total, "rounds": args.rounds, "turn_limit": TURNS,
        "compared": "same negotiators, clock and turn limit in both engines (one offer per NegMAS step)",
    }
    figures |= compare(scenarios, args.repeats, "scripted", ("scripted:boulware", "scripted:conceder"), args.rounds)
    negmas_specs = ("negmas:BoulwareTBNegotiator", "negmas:ConcederTBNegotiator")
    figures |= compare(scenarios, args.repeats, "negmas", negmas_specs, args.rounds)
    figures["target_ratio"] = 10
    print(f"Like with like: {figures['compared']}; {TURNS} turns; {total} negotiations each.")
    f = figures
    print(f"scripted (haggler's Boulware vs Conceder, haggler's clock): haggler {f['scripted_haggler_per_s']:,.0f}/s,"
          f" NegMAS {f['scripted_negmas_per_s']:,.0f}/s, ratio {f['scripted_ratio']:.1f}x (target >= 10x);"
          f" identical games {f['scripted_identical_games']}/{total}")
    print(f"negmas (BoulwareTB vs ConcederTB, NegMAS's clock): as negmas: agents {f['negmas_haggler_per_s']:,.0f}/s,"
          f" native {f['negmas_negmas_per_s']:,.0f}/s, ratio {f['negmas_ratio']:.2f}x;"
          f" identical games {f['negmas_identical_games']}/{total}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
