"""A person at the terminal, playing one side: sees only that side's private preferences."""

from __future__ import annotations

from collections.abc import Callable

from haggler.agents.format.parse import read_action_word, read_slot
from haggler.agents.format.prompts import describe_action, system_prompt
from haggler.core.protocol import Negotiation
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Invalid, Offer, Reply, Side, WalkAway, other


class HumanAgent:
    spec = "human"

    def __init__(self, scenario: Scenario, side: Side, ask: Callable[[str], str] = input,
                 say: Callable[[str], None] = print) -> None:
        self.scenario = scenario
        self.side = side
        self.ask = ask
        self.say = say
        self.say(system_prompt(scenario, side, cued=True))

    def respond(self, negotiation: Negotiation) -> Reply:
        s, counterpart = self.scenario, other(self.side)
        if negotiation.turns:
            last = negotiation.turns[-1]
            self.say(f"\n{counterpart}: {last.text}\n  -> {describe_action(s, last.action)}")
        table = negotiation.offer_for(self.side)
        if table is not None:
            self.say(f"  (that offer is worth {s.utility(self.side, table):.2f} to you)")
        self.say(f"Turns left, including yours: {negotiation.turns_left}")
        message = self.ask("Your message: ").strip()
        kind, _, why = read_action_word(self.ask("Your action (offer / accept / walk away): "))
        if kind is None:
            return Reply(message, Invalid(why))
        if kind == "accept":
            return Reply(message, Accept())
        if kind == "walk_away":
            return Reply(message, WalkAway())
        chosen = []
        for issue in s.issues:
            menu = ", ".join(f"{k} = {o}" for k, o in enumerate(issue.options, start=1))
            option, why = read_slot(self.ask(f"  {issue.name} ({menu}): "), issue.options, numbered=True)
            if option is None:
                return Reply(message, Invalid(f"issue {issue.name!r}: {why}"))
            chosen.append(option)
        return Reply(message, Offer(tuple(chosen)))
