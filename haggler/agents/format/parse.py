"""Read a language model's turn into exactly one action, or an invalid action with its reason.

The reply format (see ``prompts.py``)::

    Message: <free text to the other side>
    Action: offer            (or: accept, walk away)
    price: $9,500            (offer only: one line per issue)
    warranty: 6 months

Tolerant of case, spacing, punctuation and small spelling variants of option and issue names, but it
never guesses: a value that matches two options equally well, a number that is not exactly one of the
options, several actions, or a missing issue make the turn invalid. Nothing it cannot read binds.
"""

from __future__ import annotations

import re
import unicodedata
from difflib import SequenceMatcher

from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Action, Invalid, Offer, WalkAway

FUZZY_MIN = 0.8  # similarity needed to read a misspelt name as an option
FUZZY_GAP = 0.1  # and its lead over the runner-up, else the reading is ambiguous
MAX_REPLY_CHARS = 20_000  # beyond this a reply is not read at all (nothing in it binds)

_ACTION_LINE = re.compile(r"^\s*[*_#>\-\s]*action\s*[*_]*\s*[:=]\s*(?P<rest>.*)$", re.IGNORECASE)
_MESSAGE_LINE = re.compile(r"^\s*[*_#>\-\s]*message\s*[*_]*\s*[:=]\s*(?P<rest>.*)$", re.IGNORECASE)
_TERM_LINE = re.compile(r"^\s*[*_\-\s]*(?P<name>[^:=]+?)\s*[*_]*\s*[:=]\s*(?P<value>.+?)\s*$")

_KEYWORDS = (
    (re.compile(r"counter[\s-]*offer|offer|propos(?:e|al)", re.IGNORECASE), "offer"),
    (re.compile(r"i\s+accept|accept(?:ed|s)?", re.IGNORECASE), "accept"),
    (re.compile(r"walk[\s-]*away|walk|leave", re.IGNORECASE), "walk_away"),
)
_ANY_KEYWORD = re.compile(
    r"\b(?:counter[\s-]*offer|offer|propos(?:e|al)|i\s+accept|accept(?:ed|s)?|walk[\s-]*away|walk|leave)\b", re.IGNORECASE
)
_NUMBER_THEN_NAME = re.compile(r"^(\d+)\s*[.)=:\-(]\s*(.*)$")
# "Option 3", "option number: 3", "No. 3": the word names what the cue asked for, the number answers
_NUMBER_WORD = re.compile(r"^(?:option|number|choice|no\.?)(?:\s*(?:number|no\.?))?\s*[:#]?\s*(?=\d)", re.IGNORECASE)
_ALTERNATION = re.compile(r"\bor\b|/|\|", re.IGNORECASE)
# Inline terms ("Action: offer price=$9,500, warranty=6 months") split at a comma or semicolon that is
# followed by the next "name=" or "name:", never inside a value such as "$9,500".
_INLINE_SPLIT = re.compile(r"[;,]\s*(?=[^,;=:]+[=:])")


def normalize(text: str) -> str:
    """Case, accents, spacing and punctuation removed: '$9,500' -> '9500', '20'' LCD' -> '20lcd'."""
    text = unicodedata.normalize("NFKD", text).casefold()
    return "".join(ch for ch in text if ch.isalnum())


def match_name(value: str, names: tuple[str, ...] | list[str]) -> tuple[int | None, str]:
    """Index of the one name ``value`` denotes, or None and why not. Numbers must match exactly."""
    exact = [i for i, n in enumerate(names) if n.strip().casefold() == value.strip().casefold()]
    if len(exact) == 1:
        return exact[0], ""
    key = normalize(value)
    if not key:
        return None, "empty value"
    same = [i for i, n in enumerate(names) if normalize(n) == key]
    if len(same) == 1:
        return same[0], ""
    if len(same) > 1:
        return None, f"{value!r} matches several options ({', '.join(names[i] for i in same)})"
    if any(ch.isdigit() for ch in key):
        return None, f"{value!r} is not one of {list(names)}"
    ratios = sorted(((SequenceMatcher(None, key, normalize(n)).ratio(), i) for i, n in enumerate(names)), reverse=True)
    best, i = ratios[0]
    runner_up = ratios[1][0] if len(ratios) > 1 else 0.0
    if best >= FUZZY_MIN and best - runner_up >= FUZZY_GAP:
        return i, ""
    if best >= FUZZY_MIN:
        return None, f"{value!r} is ambiguous between {names[i]!r} and {names[ratios[1][1]]!r}"
    return None, f"{value!r} is not one of {list(names)}"


def read_action_word(text: str) -> tuple[str | None, str, str]:
    """(kind, the text after the keyword, why not if unreadable). The first keyword decides, unless the
    text offers alternatives ('accept or walk away', 'offer/accept'): that is a question, not an action."""
    m = _ANY_KEYWORD.search(text)
    lead = text[: m.start()].strip(" \t*_:-.>#\"'") if m else ""
    if m is None or lead.casefold() not in ("", "i", "we"):  # "I offer", "we walk away": still one action
        return None, text, f"unknown action {text.strip()[:60]!r} (expected offer, accept or walk away)"
    kinds = {_kind_of(k.group(0)) for k in _ANY_KEYWORD.finditer(text)}
    if len(kinds) > 1 and _ALTERNATION.search(text):
        return None, text, f"ambiguous action {text.strip()[:60]!r}: name exactly one of offer, accept, walk away"
    return _kind_of(m.group(0)), text[m.end():], ""


def _number(digits: str) -> int:
    """Decimal digits as an int. str.isdigit() also admits superscripts ("¹") that int() refuses, and int() refuses
    strings over 4,300 digits: callers test isdecimal(), and a number too long to be a choice reads as 0."""
    return int(digits) if len(digits) <= 9 else 0


def read_action_slot(text: str, numbered: bool) -> tuple[str | None, str]:
    """A cued action slot's answer: (kind, why not). When the cue numbered the choices (1 = offer,
    2 = accept, 3 = walk away), the bare number reads as well as the word."""
    value = text.strip().strip(".,;").strip()
    if numbered:
        value = _NUMBER_WORD.sub("", value)
    if numbered and value.isdecimal():
        k = _number(value)
        if 1 <= k <= 3:
            return ("offer", "accept", "walk_away")[k - 1], ""
        return None, f"{value!r} is not an action number (1 to 3)"
    if numbered and (m := _NUMBER_THEN_NAME.match(value)):
        # "1 = offer", "3. walk away": the number and the word must name the same action
        k, (kind, rest, _) = _number(m.group(1)), read_action_word(m.group(2))
        if 1 <= k <= 3 and kind == ("offer", "accept", "walk_away")[k - 1] and not rest.strip(" .,;)"):
            return kind, ""
        return None, f"{value!r} is not one action (a number, or a number and the same action's name)"
    kind, _, why = read_action_word(text)
    return kind, why


def _kind_of(word: str) -> str:
    return next(kind for pattern, kind in _KEYWORDS if pattern.fullmatch(word))


def read_slot(text: str, options: tuple[str, ...], numbered: bool) -> tuple[int | None, str]:
    """One cued slot's answer: an option's name, or (when the cue numbered the options) its number from 1."""
    value = text.strip().strip(".,;").strip()
    if numbered:
        value = _NUMBER_WORD.sub("", value)
    if numbered and (m := _NUMBER_THEN_NAME.match(value)) and not value.isdecimal():
        # "3 = 12 months", "3 (12 months)": the number and the name must denote the same option
        k, rest = _number(m.group(1)), m.group(2).strip(" ()[].,;")
        by_name, _ = match_name(rest, options) if rest else (None, "")
        if 1 <= k <= len(options) and by_name == k - 1:
            return k - 1, ""
    if numbered and value.isdecimal():
        k = _number(value)
        named = [i for i, o in enumerate(options) if o.strip() == value]
        if named and named[0] != k - 1:
            return None, f"{value!r} is both an option's name and another option's number"
        if 1 <= k <= len(options):
            return k - 1, ""
        return None, f"{value!r} is not an option number (1 to {len(options)})"
    return match_name(value, options)


def split_message(text: str) -> str:
    """The free-text part of a reply: the Message line(s), or everything before the Action line."""
    lines = text.splitlines()
    out = []
    for line in lines:
        if _ACTION_LINE.match(line):
            break
        m = _MESSAGE_LINE.match(line)
        out.append(m.group("rest") if m else line)
    return " ".join(x.strip() for x in out if x.strip())


def parse_reply(text: str, scenario: Scenario) -> Action:
    if len(text) > MAX_REPLY_CHARS:
        return Invalid(f"reply too long to read ({len(text)} characters)")
    lines = text.splitlines()
    actions = [(i, m) for i, line in enumerate(lines) if (m := _ACTION_LINE.match(line))]
    if not actions:
        return Invalid("no 'Action:' line found")
    if len(actions) > 1:
        return Invalid(f"several actions in one turn ({len(actions)} 'Action:' lines)")
    at, m = actions[0]
    kind, inline, why = read_action_word(m.group("rest"))
    if kind is None:
        return Invalid(why)
    if kind == "accept":
        return Accept()
    if kind == "walk_away":
        return WalkAway()
    term_text = [part for part in _INLINE_SPLIT.split(inline) if part.strip()] + lines[at + 1 :]
    return _read_offer(term_text, scenario)


def _read_offer(term_lines: list[str], scenario: Scenario) -> Action:
    issue_names = [i.name for i in scenario.issues]
    chosen: dict[int, int] = {}
    for line in term_lines:
        m = _TERM_LINE.match(line)
        if not m:
            continue
        name = re.sub(r"\s*\(.*\)\s*$", "", m.group("name"))  # a cue may list the options in parentheses
        issue, why = match_name(name, issue_names)
        if issue is None:
            continue  # a line that names no issue is chatter, not a term
        option, why = match_name(m.group("value"), scenario.issues[issue].options)
        if option is None:
            return Invalid(f"issue {issue_names[issue]!r}: {why}")
        if issue in chosen and chosen[issue] != option:
            return Invalid(f"issue {issue_names[issue]!r} is given two different options")
        chosen[issue] = option
    missing = [issue_names[i] for i in range(len(issue_names)) if i not in chosen]
    if missing:
        return Invalid(f"incomplete offer: no option for {missing}")
    return Offer(tuple(chosen[i] for i in range(len(issue_names))))
