"""What a language-model negotiator reads, and the reply format it writes.

The system prompt tells one side who it is, the product, the issues and options, its own private
preferences and reservation value in plain words, the turn limit and the reply format. It never
contains the other side's private information. Each turn, a user message relays the other side's
message and action (as the engine read it), what that offer is worth to this side, and the turns left.

With cues on, the environment writes the reply's skeleton into the model's own turn and the model
fills one slot at a time: ``Message:`` (free text), ``Action:`` (offer, accept or walk away), then for
an offer one ``issue:`` line per issue, optionally listing its options. The cue text is environment
tokens, never trained on. Cues are a setting, not a special case for a model family.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field

from haggler.core.config import Strict

from haggler.agents.format.parse import split_message
from haggler.core.protocol import Negotiation
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Action, Invalid, Offer, Side, WalkAway, other


SLOT_STYLES = ("options", "numbers", "indexed", "names", "plain")
ACTION_STYLES = ("options", "numbers", "words")
# Shown once in the system prompt when a cue asks for an option number: a question about nothing in the
# negotiation, so it teaches the answer's form (one number from the list) without favouring an action.
# Measured on the untrained SmolLM2 at T = 1.0, first turn: valid action-slot answers 53% without it, 62-65%
# with the example alone, 70-81% with the example and its last line.
OPTION_EXAMPLE = ("Example of answering a question: Weekday options: 1. Monday 2. Tuesday 3. Wednesday\nOption number: 2"
                  "\nNever answer a number that is not listed.")


class PromptSettings(Strict):
    """The prompt format of a language-model agent: the one declaration of these settings and their defaults,
    used by the agents, the training and study configs (their ``prompt:`` sections) and the CLI flags.

    Which fields were given explicitly is kept (pydantic's ``model_fields_set``): a model's card decides the
    format of whatever was not (see ``AgentContext.prompt_for``).
    """

    cues: bool = True  # the environment writes the reply skeleton, the model fills the slots
    # each issue's cue: "options" (a numbered list, then "Option number:"), "numbers" (the numbered options in
    # brackets, then "Number:"; either reads a number or a name), "indexed" (options numbered once in the system
    # prompt, the cue gives only the range: fewer tokens), "names" (the options listed, answer a name) or
    # "plain" (just the issue's name)
    slots: Literal[SLOT_STYLES] = "options"  # type: ignore[valid-type]
    # the action cue: "options" ("Options: 1. offer 2. accept 3. walk away", then "Option number:"), "numbers"
    # (the same choices in brackets, then "Number:"; a number or the word reads with either) or "words"
    actions: Literal[ACTION_STYLES] = "options"  # type: ignore[valid-type]
    message_tokens: int = Field(40, ge=0)  # budget of the free-text slot (cues on); 0: no message
    action_tokens: int = Field(6, ge=1)
    slot_tokens: int = Field(12, ge=1)
    reply_tokens: int = Field(160, ge=1)  # budget of a whole free-form reply (cues off)
    # Observation settings (what each turn's user message states). relay_messages: the other side's free text;
    # off, only its binding action is relayed (a scripted buyer's text restates its offer: tokens that a CPU
    # update pays for twice). compare_no_deal: the offer on the table's score is followed by whether it beats
    # this side's no-deal score; a 135M model reads numbers as text and cannot compare 0.55 with 0.51, so the
    # decision to accept only becomes learnable with the comparison in words.
    relay_messages: bool = True
    compare_no_deal: bool = False
    # accept_verdict: the action cue's accept option carries the same comparison ("2 = accept (less than no
    # deal)"), a few tokens before the answer instead of a turn's worth of tokens back. The accept decision is
    # what a small seller gets most wrong (the warm-started SmolLM2 accepted 25% of offers worth less than no
    # deal, 47% of those worth more), and RL without it mostly learned to accept less whatever the offer.
    accept_verdict: bool = False
    # offer_verdict: each offer slot's cue marks the options that would leave the offer worth less than no deal
    # even with the best options for the issues still to fill ("3. $1,750 (less than no deal)"). Measured on the
    # grids of matched-study and onpolicy-study (seller at 0.3, accept_verdict on): 45 of the base's 46 deals
    # below its reservation were its own offers that the buyer took, not offers it accepted; a 135M model cannot
    # add weight times value over the issues, so no reward teaches it which of its own offers lose.
    offer_verdict: bool = False
    # thinking: the model thinks before each reply, in its chat template's thinking mode (Gemma 4's <|think|>,
    # Qwen3's <think>), up to thought_tokens; the thought is the model's own tokens (trained on like the rest of its
    # turn) and stays in the transcript, but is never parsed as the action nor shown to the other side. Off: the
    # template's non-thinking mode (enable_thinking=False).
    thinking: bool = False
    thought_tokens: int = Field(256, ge=1)

    @property
    def numbered(self) -> bool:
        """Do issue slots take option numbers?"""
        return self.slots in ("options", "numbers", "indexed")

    @property
    def numbered_actions(self) -> bool:
        return self.actions != "words"

    @property
    def shows_example(self) -> bool:
        """Does the system prompt show how to answer an "Option number:" cue?"""
        return self.cues and "options" in (self.actions, self.slots)

    def explicit(self) -> dict[str, Any]:
        """The fields that were given, not defaulted."""
        return {k: getattr(self, k) for k in self.model_fields_set}

    def under(self, base: PromptSettings) -> PromptSettings:
        """``base`` (a model card's format) with this object's explicit fields laid over it."""
        return base.model_copy(update=self.explicit()) if self.model_fields_set else base


def system_prompt_for(scenario: Scenario, side: Side, settings: PromptSettings) -> str:
    """The system prompt an LLM negotiator with these settings reads."""
    return system_prompt(scenario, side, settings.cues, settings.cues and settings.slots == "indexed",
                         settings.shows_example)


def system_prompt(scenario: Scenario, side: Side, cued: bool = False, indexed: bool = False,
                  example: bool = False) -> str:
    """Short on purpose: a small model reads it at every turn's first token, and on a CPU every token costs.
    With ``cued`` the environment writes the reply's skeleton itself, so the format is not explained."""
    prefs = scenario.preferences(side)
    counterpart = other(side)
    lines = [
        f"You are the {side} of {scenario.context}, negotiating with a {counterpart}.",
        "Issues, with how much you like each option (0 to 1) and how much each issue weighs:",
    ]
    for issue in scenario.issues:
        values = " | ".join(f"{f'{k}) ' if indexed else ''}{o} {prefs.values[issue.name][o]:.2f}"
                            for k, o in enumerate(issue.options, start=1))
        lines.append(f"- {issue.name} (weight {prefs.weights[issue.name]:.2f}): {values}")
    lines += [
        f"Your score for a deal is the sum of weight times value. No deal scores {prefs.reservation:.2f}."
        f" Keep these numbers secret. There are {scenario.max_turns} turns in all.",
    ]
    if cued:
        lines.append("Each turn you fill in an action (offer, accept or walk away) and, for an offer, an option per issue.")
        if example:
            lines.append(OPTION_EXAMPLE)
        return "\n".join(lines)
    lines += [
        "Reply with a line 'Message: <text>', then a line 'Action: offer', 'Action: accept' (the"
        f" {counterpart}'s last offer) or 'Action: walk away'; after 'Action: offer', one line per issue:",
    ]
    lines += [f"{i.name}: <option>" for i in scenario.issues]
    return "\n".join(lines)


# Chat-template markup in the other side's words ("<|im_start|>", "</s>", "<start_of_turn>", "<|turn>", "[INST]"):
# a tokenizer reads such text as the template's own special tokens, so a buyer could forge a system or assistant
# turn in the seller's prompt. Relayed words are data: their angle and square brackets are shown as look-alikes.
_TEMPLATE_MARKUP = re.compile(r"<[^<>\s]{1,60}>|\[/?[A-Z_]{2,30}\]")
_LOOK_ALIKE = str.maketrans({"<": "\u2039", ">": "\u203a", "[": "\u27e6", "]": "\u27e7"})


def relayed(words: str) -> str:
    """The other side's words as this side reads them: chat-template markup defused, everything else as said."""
    return _TEMPLATE_MARKUP.sub(lambda m: m.group(0).translate(_LOOK_ALIKE), words)


def describe_action(scenario: Scenario, action: Action) -> str:
    if isinstance(action, Offer):
        return "offer: " + ", ".join(f"{k}: {v}" for k, v in scenario.names_of(action.outcome).items())
    if isinstance(action, Accept):
        return "accept"
    if isinstance(action, WalkAway):
        return "walk away"
    assert isinstance(action, Invalid)
    return f"none that counts (their reply could not be read: {action.reason})"


def observe(negotiation: Negotiation, side: Side, settings: PromptSettings | None = None) -> str:
    """The user message before ``side``'s turn in this negotiation."""
    last = negotiation.turns[-1] if negotiation.turns else None
    return turn_message(negotiation.scenario, side, negotiation.turns_left, last.text if last else None,
                        last.action if last else None, negotiation.offer_for(side), settings)


def turn_message(scenario: Scenario, side: Side, turns_left: int, last_text: str | None,
                 last_action: Action | None, table_offer: tuple[int, ...] | None,
                 settings: PromptSettings | None = None) -> str:
    """The user message before this side's turn: the other side's last turn, and where things stand."""
    settings = settings or PromptSettings()
    counterpart = other(side)
    lines = []
    if last_action is None:
        lines.append(f"The negotiation starts. You speak first; the {counterpart} is waiting for your message.")
    else:
        if settings.relay_messages:
            said = relayed(split_message(last_text or "").strip()) or "(nothing)"
            lines.append(f"{counterpart.capitalize()}: {said}")
        lines.append(f"The {counterpart}'s action: {describe_action(scenario, last_action)}")
    if table_offer is not None:
        worth = scenario.utility(side, table_offer)
        line = f"The {counterpart}'s offer on the table would give you a score of {worth:.2f}"
        if settings.compare_no_deal:
            line += f", {verdict(scenario, side, table_offer)} no deal ({scenario.preferences(side).reservation:.2f})"
        lines.append(line + ".")
    lines.append(f"Turns left, including yours: {turns_left}.")
    return "\n".join(lines)


def verdict(scenario: Scenario, side: Side, table_offer: tuple[int, ...]) -> str:
    """How the offer on the table compares with this side's no deal: "more than", "the same as" or "less than",
    judged on the two-decimal figures the model reads, so the words never contradict the numbers shown."""
    worth, reservation = round(scenario.utility(side, table_offer), 2), round(scenario.preferences(side).reservation, 2)
    return "more than" if worth > reservation else "the same as" if worth == reservation else "less than"


# ---- the reply skeleton written into the model's own turn when cues are on ----

MESSAGE_CUE = "Message:"
ACTION_CUE = "\nAction:"
NUMBERED_ACTION_CUE = "\nAction (1 = offer, 2 = accept, 3 = walk away). Number:"
# Measured on the untrained SmolLM2 at T = 1.0, first turn: 52% valid answers against 18-39% for the
# bracketed cue above, which it mostly answered "4", continuing the list.
OPTIONS_ACTION_CUE = "\nOptions: 1. offer 2. accept 3. walk away\nOption number:"


def action_cue(settings: PromptSettings, accept_note: str | None = None) -> str:
    """The action slot's cue; with ``accept_note`` (see ``accept_verdict``) its accept option carries that note."""
    cue = {"options": OPTIONS_ACTION_CUE, "numbers": NUMBERED_ACTION_CUE, "words": ACTION_CUE}[settings.actions]
    if accept_note is None:
        return cue
    if settings.actions == "words":
        return f"\nAction (accept: {accept_note}):"
    return cue.replace("accept", f"accept ({accept_note})", 1)


def accept_note(negotiation: Negotiation, side: Side, settings: PromptSettings) -> str | None:
    """What the accept option says with ``accept_verdict`` on and an offer on the table: "less than no deal"."""
    table = negotiation.offer_for(side)
    if not settings.accept_verdict or table is None:
        return None
    return f"{verdict(negotiation.scenario, side, table)} no deal"


LOW = "less than no deal"


def low_options(scenario: Scenario, side: Side, chosen: tuple[int, ...]) -> frozenset[int]:
    """The options of the next issue (index ``len(chosen)``) that leave an offer starting with ``chosen`` worth
    less than ``side``'s no deal however the later issues are filled: the offer's best completion, judged by
    ``verdict`` itself (the same sum and the same two decimals), so a mark never disagrees with the figures."""
    table = scenario.weighted_table(side)
    best = tuple(max(range(len(row)), key=row.__getitem__) for row in table[len(chosen) + 1:])
    return frozenset(o for o in range(len(table[len(chosen)]))
                     if verdict(scenario, side, (*chosen, o, *best)) == "less than")


def slot_cue(scenario: Scenario, issue_index: int, settings: PromptSettings, low: frozenset[int] = frozenset()) -> str:
    """Issue ``issue_index``'s cue; the options in ``low`` (see ``offer_verdict``) are marked "less than no deal"."""
    issue = scenario.issues[issue_index]
    tag = [f" ({LOW})" if o in low else "" for o in range(len(issue.options))]
    if settings.slots == "options":
        listed = " ".join(f"{k}. {o}{tag[k - 1]}" for k, o in enumerate(issue.options, start=1))
        return f"\n{issue.name} options: {listed}\nOption number:"
    if settings.slots == "numbers":
        return f"\n{issue.name} ({', '.join(f'{k} = {o}{tag[k - 1]}' for k, o in enumerate(issue.options, start=1))}). Number:"
    if settings.slots == "names":
        return f"\n{issue.name} ({' | '.join(f'{o}{tag[k]}' for k, o in enumerate(issue.options))}):"
    if settings.slots == "indexed":
        note = f"; {LOW}: {', '.join(str(o + 1) for o in sorted(low))}" if low else ""
        return f"\n{issue.name} (1-{len(issue.options)}{note}):"
    note = f" ({LOW}: {', '.join(issue.options[o] for o in sorted(low))})" if low else ""
    return f"\n{issue.name}{note}:"
