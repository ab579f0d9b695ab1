"""Actions through function calling: the three functions an API negotiator may call, and how a reply's
tool calls are read into exactly one action, or an invalid action with its reason.

``make_offer`` takes one argument per issue, whose JSON-schema ``enum`` is that issue's option names, and a
``message``; ``accept`` and ``walk_away`` take a ``message``. Argument names are the issue names made into
identifiers (``monitoring app`` -> ``monitoring_app``); each argument's ``title`` is the issue's own name.

As with the text format, nothing ambiguous binds: no call, several calls, an unknown function, arguments
that are not a JSON object, a missing issue or a value that names no option make the turn invalid. An
option is read exactly, or by a case-insensitive match with one option alone.
"""

from __future__ import annotations

import json
import re
from typing import Any

from haggler.agents.format.prompts import describe_action
from haggler.core.scenario import Scenario
from haggler.core.types import Accept, Action, Invalid, Offer, WalkAway

FUNCTIONS = ("make_offer", "accept", "walk_away")
MESSAGE = "message"
_MESSAGE_ARG = {"type": "string", "description": "what you say to the other side (free text, not binding)"}


def argument_names(scenario: Scenario) -> list[str]:
    """One identifier per issue, in issue order: unique, and never ``message``."""
    taken = {MESSAGE}
    names = []
    for issue in scenario.issues:
        base = re.sub(r"[^A-Za-z0-9_]+", "_", issue.name).strip("_") or "issue"
        name, k = base, 2
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        names.append(name)
    return names


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


def tool_specs(scenario: Scenario) -> list[dict[str, Any]]:
    """The ``tools`` of a Chat Completions request for this scenario."""
    args = argument_names(scenario)
    terms = {a: {"type": "string", "title": issue.name, "enum": list(issue.options),
                 "description": f"the option you offer for {issue.name}"} for a, issue in zip(args, scenario.issues)}
    return [
        _function("make_offer", "Offer a deal: one option for every issue.", {**terms, MESSAGE: _MESSAGE_ARG},
                  [*args, MESSAGE]),
        _function("accept", "Accept the other side's last offer as it stands.", {MESSAGE: _MESSAGE_ARG}, [MESSAGE]),
        _function("walk_away", "End the negotiation without a deal.", {MESSAGE: _MESSAGE_ARG}, [MESSAGE]),
    ]


def _arguments(raw: Any) -> tuple[dict[str, Any] | None, str]:
    if isinstance(raw, dict):
        return raw, ""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, ""
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return None, f"arguments are not valid JSON: {str(raw)[:60]!r}"
    if not isinstance(value, dict):
        return None, f"arguments are not a JSON object: {str(raw)[:60]!r}"
    return value, ""


def _option(value: Any, options: tuple[str, ...]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = str(value).strip()
    exact = [i for i, o in enumerate(options) if o == text]
    if len(exact) == 1:
        return exact[0]
    folded = [i for i, o in enumerate(options) if o.strip().casefold() == text.casefold()]
    return folded[0] if len(folded) == 1 else None


def _offer(args: dict[str, Any], scenario: Scenario) -> Action:
    chosen = []
    for name, issue in zip(argument_names(scenario), scenario.issues):
        if name not in args:
            return Invalid(f"make_offer: no option for {issue.name!r}")
        k = _option(args[name], issue.options)
        if k is None:
            return Invalid(f"make_offer: {issue.name!r}: {str(args[name])[:40]!r} is not one of {list(issue.options)}")
        chosen.append(k)
    return Offer(tuple(chosen))


def read_tool_calls(calls: list[dict[str, Any]], content: str, scenario: Scenario) -> tuple[str, Action]:
    """(the message, the action) of one reply: its calls as the chat messages hold them, and its text."""
    text = (content or "").strip()
    if not calls:
        return text, Invalid(f"no function call (expected one of {', '.join(FUNCTIONS)})")
    if len(calls) > 1:
        names = ", ".join(str((c.get("function") or {}).get("name")) for c in calls)
        return text, Invalid(f"several function calls in one turn ({len(calls)}: {names})")
    function = calls[0].get("function") or {}
    name = function.get("name")
    if name not in FUNCTIONS:
        return text, Invalid(f"unknown function {str(name)[:40]!r} (expected one of {', '.join(FUNCTIONS)})")
    args, why = _arguments(function.get("arguments"))
    if args is None:
        return text, Invalid(f"{name}: {why}")
    message = args.get(MESSAGE)
    message = message.strip() if isinstance(message, str) and message.strip() else text
    if name == "accept":
        return message, Accept()
    if name == "walk_away":
        return message, WalkAway()
    return message, _offer(args, scenario)


def describe_call(action: Action, scenario: Scenario) -> str:
    """The tool result returned to the model for its call: what the engine read."""
    if isinstance(action, Invalid):
        return f"Not recorded, this turn counts as a message only: {action.reason}"
    return "Recorded: " + describe_action(scenario, action)
