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
