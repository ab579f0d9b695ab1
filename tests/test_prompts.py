"""The cued formats: what the environment writes into a language-model seller's turn."""

from __future__ import annotations

import pytest

from haggler.scenarios.generate import generate_scenarios
from haggler.agents.format.parse import read_action_slot, read_slot
from haggler.agents.format.prompts import (OPTION_EXAMPLE, PromptSettings, action_cue, slot_cue, system_prompt,
                             system_prompt_for)

SCENARIO = generate_scenarios(1, 5)[0]


def test_options_cues_list_every_choice_in_order_and_a_listed_number_reads_as_that_choice():
    settings = PromptSettings()
    assert (settings.actions, settings.slots) == ("options", "options")  # the defaults
    assert action_cue(settings) == "\nOptions: 1. offer 2. accept 3. walk away\nOption number:"
    for k, issue in enumerate(SCENARIO.issues):
        cue = slot_cue(SCENARIO, k, settings)
        assert cue.startswith(f"\n{issue.name} options: 1. {issue.options[0]} ") and cue.endswith("\nOption number:")
        for j, option in enumerate(issue.options, start=1):
            assert f"{j}. {option}" in cue
            assert read_slot(f" {j}\n", issue.options, settings.numbered) == (j - 1, "")
    for j, kind in enumerate(("offer", "accept", "walk_away"), start=1):
        assert read_action_slot(f" {j}", settings.numbered_actions)[0] == kind


@pytest.mark.parametrize("actions,slots,shown", [("options", "options", True), ("options", "indexed", True),
                                                 ("numbers", "options", True), ("numbers", "numbers", False),
                                                 ("words", "names", False)])
def test_the_answer_example_shows_when_a_cue_asks_for_an_option_number(actions, slots, shown):
    settings = PromptSettings(actions=actions, slots=slots)
    text = system_prompt_for(SCENARIO, "seller", settings)
    assert (OPTION_EXAMPLE in text) is shown
    assert OPTION_EXAMPLE not in system_prompt_for(SCENARIO, "seller", PromptSettings(cues=False))
    assert system_prompt_for(SCENARIO, "buyer", settings) == system_prompt(
        SCENARIO, "buyer", True, slots == "indexed", shown)


def test_the_example_favours_no_action_and_names_nothing_of_the_negotiation():
    words = OPTION_EXAMPLE.casefold()
    assert not any(w in words for w in ("offer", "accept", "walk"))
    scenarios = generate_scenarios(50, 1)
    assert not any(issue.name.casefold() in words for s in scenarios for issue in s.issues)
    assert not any(f" {o.casefold()} " in words for s in scenarios for i in s.issues for o in i.options)


# ---- observation settings: what each turn's user message states ----

@pytest.mark.parametrize("outcome,reservation,verdict", [
    ((1, 0), 0.30, "0.40, more than no deal (0.30)"),    # ($20, red): 0.8 x 0.5 + 0.2 x 0.0
    ((0, 1), 0.30, "0.20, less than no deal (0.30)"),    # ($10, blue): 0.8 x 0.0 + 0.2 x 1.0
    ((1, 0), 0.404, "0.40, the same as no deal (0.40)"),  # the words follow the two decimals shown, never contradict them
    ((2, 1), 0.996, "1.00, the same as no deal (1.00)"),
])
def test_compare_no_deal_states_in_words_how_the_table_offer_compares_with_no_deal(outcome, reservation, verdict):
    from conftest import small_scenario
    from haggler.agents.format.prompts import turn_message
    from haggler.core.types import Offer

    scenario = small_scenario(rs=reservation)
    on = turn_message(scenario, "seller", 3, "Message: deal?", Offer(outcome), outcome, PromptSettings(compare_no_deal=True))
    assert f"The buyer's offer on the table would give you a score of {verdict}." in on
    off = turn_message(scenario, "seller", 3, "Message: deal?", Offer(outcome), outcome, PromptSettings())
    assert "no deal" not in off and f"a score of {verdict[:4]}." in off  # the default keeps the plain figure


def test_relay_messages_off_drops_the_other_sides_words_and_keeps_its_binding_action():
    from conftest import small_scenario
    from haggler.agents.format.prompts import turn_message
    from haggler.core.types import Offer

    scenario = small_scenario()
    words = "Message: I would agree to price $20 and colour red."
    relayed = turn_message(scenario, "seller", 3, words, Offer((1, 0)), (1, 0), PromptSettings())
    silent = turn_message(scenario, "seller", 3, words, Offer((1, 0)), (1, 0), PromptSettings(relay_messages=False))
    assert "Buyer: I would agree" in relayed and "I would agree" not in silent
    for msg in (relayed, silent):
        assert "The buyer's action: offer: price: $20, colour: red" in msg
        assert "Turns left, including yours: 3." in msg


def test_a_language_model_seller_reads_its_observation_settings(tokenizer):
    """The agent (and so the warm start's examples and GRPO's rollouts, which play through it) passes its own
    settings to the observation: a setting that only the prompt builder knew would change nothing."""
    from conftest import small_scenario
    from haggler.agents.llm import HFAgent
    from haggler.core.protocol import Negotiation, ProtocolConfig
    from haggler.core.types import Accept, Offer, Reply
    from haggler.engine.interfaces import Sample

    class Accepts:  # a stand-in sampler that answers the action slot "2" (accept) and ends its turn
        def __init__(self):
            self.tokenizer, self.eos_ids = tokenizer, [tokenizer.eos_token_id]

        def describe(self):
            return {"backend": "test"}

        def continue_batch(self, seqs, max_new_tokens, temperature, stop_chars="\n", generator=None):
            ids = tokenizer.encode(" 2", add_special_tokens=False) + [tokenizer.eos_token_id]
            seqs[0].ids.extend(ids)
            return [Sample(ids=ids, logprobs=[-1.0] * len(ids), stopped="eos")]

    scenario = small_scenario(rs=0.3)
    for compare, relay in ((True, False), (False, True)):
        settings = PromptSettings(slots="indexed", actions="numbers", message_tokens=0, compare_no_deal=compare,
                                  relay_messages=relay)
        neg = Negotiation(scenario, ProtocolConfig(opener="buyer"))
        neg.step(Reply("Message: I would agree to price $20 and colour red.", Offer((1, 0))))
        agent = HFAgent(Accepts(), scenario, "seller", settings, 1.0, "hf:test")
        assert isinstance(agent.respond(neg).action, Accept)
        text = tokenizer.decode(agent.trajectory.prompt_ids)
        assert ("a score of 0.40, more than no deal (0.30)." in text) is compare
        assert ("I would agree to price" in text) is relay


@pytest.mark.parametrize("actions,want", [
    ("options", "\nOptions: 1. offer 2. accept (less than no deal) 3. walk away\nOption number:"),
    ("numbers", "\nAction (1 = offer, 2 = accept (less than no deal), 3 = walk away). Number:"),
    ("words", "\nAction (accept: less than no deal):"),
])
def test_an_accept_note_rides_on_the_accept_option_of_every_action_style(actions, want):
    settings = PromptSettings(actions=actions)
    assert action_cue(settings, "less than no deal") == want
    assert "no deal" not in action_cue(settings)  # without a note: the plain cue


def test_accept_verdict_puts_the_table_offers_comparison_into_the_action_cue(tokenizer):
    """With ``accept_verdict`` the environment's action cue says how accepting compares with no deal (on the
    figures the observation shows); with nothing on the table, or the setting off, the cue is the plain one.
    The note is the environment's text: none of its tokens is the seller's to train on."""
    from conftest import small_scenario
    from haggler.agents.llm import HFAgent
    from haggler.core.protocol import Negotiation, ProtocolConfig
    from haggler.core.types import Offer, Reply
    from haggler.engine.interfaces import Sample

    class Offers:  # a stand-in sampler: "1" (offer) at the action slot, then option 1 for every issue
        def __init__(self):
            self.tokenizer, self.eos_ids = tokenizer, [tokenizer.eos_token_id]

        def describe(self):
            return {"backend": "test"}

        def continue_batch(self, seqs, max_new_tokens, temperature, stop_chars="\n", generator=None):
            ids = tokenizer.encode(" 1\n", add_special_tokens=False)
            seqs[0].ids.extend(ids)
            return [Sample(ids=ids, logprobs=[-1.0] * len(ids), stopped="stop")]

    def cue_after(opener, reservation, on=True):
        scenario = small_scenario(rs=reservation)
        settings = PromptSettings(slots="indexed", actions="numbers", message_tokens=0, accept_verdict=on)
        neg = Negotiation(scenario, ProtocolConfig(opener=opener))
        if opener == "buyer":
            neg.step(Reply("", Offer((1, 0))))  # worth 0.40 to the seller
        agent = HFAgent(Offers(), scenario, "seller", settings, 1.0, "hf:test")
        assert isinstance(agent.respond(neg).action, Offer)
        tr = agent.trajectory
        env = tokenizer.decode([t for t, m in zip(tr.completion_ids, tr.env_mask) if not m])
        mine = tokenizer.decode([t for t, m in zip(tr.completion_ids, tr.env_mask) if m])
        assert "no deal" not in mine
        return env

    assert "2 = accept (more than no deal)," in cue_after("buyer", 0.30)
    assert "2 = accept (less than no deal)," in cue_after("buyer", 0.50)
    assert "2 = accept (the same as no deal)," in cue_after("buyer", 0.404)
    assert "2 = accept, 3" in cue_after("seller", 0.30)  # nothing on the table to accept
    assert "2 = accept, 3" in cue_after("buyer", 0.30, on=False)


def test_low_options_are_those_that_no_later_choice_can_lift_to_no_deal():
    """Seller's weighted values: price $10/$20/$30 = 0/0.4/0.8, colour red/blue = 0/0.2. An option is "less
    than no deal" when even the best options for the issues still to fill leave the offer below the reservation;
    a tie on the two decimals the verdicts use is not less."""
    from conftest import small_scenario
    from haggler.agents.format.prompts import low_options

    s = small_scenario(rs=0.5)
    assert low_options(s, "seller", ()) == {0}  # $10 + blue = 0.2; $20 + blue = 0.6 can still beat 0.5
    assert low_options(s, "seller", (1,)) == {0}  # $20 + red = 0.4
    assert low_options(s, "seller", (2,)) == set()
    assert low_options(s, "seller", (0,)) == {0, 1}  # the offer is lost whatever its colour
    assert low_options(small_scenario(rs=0.6), "seller", (1,)) == {0}  # $20 + blue = 0.60: the same, not less
    assert low_options(small_scenario(rs=0.604), "seller", (1,)) == {0}  # 0.60 against 0.604 shown as 0.60
    assert low_options(small_scenario(rs=0.61), "seller", (1,)) == {0, 1}
    assert low_options(small_scenario(rs=0.5), "buyer", ()) == set()  # the buyer's own table and reservation
    assert low_options(small_scenario(rb=0.9), "buyer", ()) == {1, 2}  # $20: 0.3 + 0.4; $30: 0 + 0.4


def test_low_options_agree_with_the_verdict_on_every_completion_of_generated_scenarios():
    """Brute force on generated scenarios (several issues, so every later issue counts): an option is marked
    exactly when every offer that completes it is "less than" no deal by the verdict the seller reads."""
    import itertools

    from haggler.agents.format.prompts import low_options, verdict

    checked = 0
    # s7-00187: its seller's offers that start with option 1 all score 0.495 (0.49, below 0.50), which a sum taken
    # in another order than the verdict's rounds up to 0.50
    for scenario in [*generate_scenarios(12, 41), generate_scenarios(188, 7)[187]]:
        for side in ("seller", "buyer"):
            shape = scenario.shape
            for k in range(len(shape)):
                for chosen in itertools.islice(itertools.product(*map(range, shape[:k])), 0, None, 3):
                    want = {o for o in range(shape[k]) if all(
                        verdict(scenario, side, (*chosen, o, *rest)) == "less than"
                        for rest in itertools.product(*map(range, shape[k + 1:])))}
                    assert low_options(scenario, side, chosen) == want, (scenario.id, side, chosen)
                    checked += bool(want)
    assert checked > 50  # the check met marked options, not only empty sets


@pytest.mark.parametrize("slots,want", [
    ("options", "\nprice options: 1. $10 (less than no deal) 2. $20 3. $30\nOption number:"),
    ("numbers", "\nprice (1 = $10 (less than no deal), 2 = $20, 3 = $30). Number:"),
    ("names", "\nprice ($10 (less than no deal) | $20 | $30):"),
    ("indexed", "\nprice (1-3; less than no deal: 1):"),
    ("plain", "\nprice (less than no deal: $10):"),
])
def test_every_slot_style_marks_the_options_below_no_deal_and_only_those(slots, want):
    from conftest import small_scenario

    settings = PromptSettings(slots=slots)
    assert slot_cue(small_scenario(), 0, settings, frozenset({0})) == want
    assert "no deal" not in slot_cue(small_scenario(), 0, settings)  # nothing marked: the plain cue


def test_offer_verdict_marks_each_slot_from_the_options_already_chosen(tokenizer):
    """With ``offer_verdict`` each offer slot's cue marks the options that lose against no deal given the slots
    the seller has filled; the marks are the environment's text, never the seller's tokens to train on."""
    from conftest import small_scenario
    from haggler.agents.llm import HFAgent
    from haggler.core.protocol import Negotiation, ProtocolConfig
    from haggler.core.types import Offer
    from haggler.engine.interfaces import Sample

    class Says:  # a stand-in sampler: "1" (offer) at the action slot, then the given option numbers
        def __init__(self, answers):
            self.tokenizer, self.eos_ids, self.answers = tokenizer, [tokenizer.eos_token_id], list(answers)

        def describe(self):
            return {"backend": "test"}

        def continue_batch(self, seqs, max_new_tokens, temperature, stop_chars="\n", generator=None):
            ids = tokenizer.encode(f" {self.answers.pop(0)}\n", add_special_tokens=False)
            seqs[0].ids.extend(ids)
            return [Sample(ids=ids, logprobs=[-1.0] * len(ids), stopped="stop")]

    def cues(price, on=True):
        settings = PromptSettings(slots="indexed", actions="numbers", message_tokens=0, offer_verdict=on)
        agent = HFAgent(Says([1, price, 2]), small_scenario(rs=0.5), "seller", settings, 1.0, "hf:test")
        assert agent.respond(Negotiation(small_scenario(rs=0.5), ProtocolConfig(opener="seller"))).action == Offer(
            (price - 1, 1))
        tr = agent.trajectory
        env = tokenizer.decode([t for t, m in zip(tr.completion_ids, tr.env_mask) if not m])
        assert "no deal" not in tokenizer.decode([t for t, m in zip(tr.completion_ids, tr.env_mask) if m])
        return env

    assert "price (1-3; less than no deal: 1):" in cues(2)
    assert "colour (1-2; less than no deal: 1):" in cues(2)  # $20 + red = 0.4
    assert "colour (1-2):" in cues(3)  # $30: any colour beats 0.5
    assert "colour (1-2; less than no deal: 1, 2):" in cues(1)
    assert "no deal" not in cues(1, on=False)
