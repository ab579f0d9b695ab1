"""A scripted "model" for the loopback server: it negotiates from its own prompt, in either action format.

It reads the issues, options and its values from its system prompt, counts its own turns, and reads the
score of the offer on the table from the last user message. It accepts an offer worth at least its
current aspiration (0.9, lowered by 0.1 each turn); otherwise it offers its best option on every issue
but the k lowest-weighted ones at its k-th turn, where it takes the next best. The same conversation gets
the same decision whichever the format, so a grid played through the text format and through function
calling must end alike. ``malformed(kind)`` gives the broken tool-call replies a test needs.
"""

from __future__ import annotations

import json
import re
from typing import Any

_ISSUE = re.compile(r"^- (?P<name>.+?) \(weight (?P<weight>[\d.]+)\): (?P<options>.+)$")
_SCORE = re.compile(r"would give you a score of (?P<score>\d+(?:\.\d+)?)")


def _issues(system: str) -> list[tuple[str, float, list[tuple[str, float]]]]:
    out = []
    for line in system.splitlines():
        m = _ISSUE.match(line)
        if m:
            options = [o.rsplit(" ", 1) for o in m.group("options").split(" | ")]
            out.append((m.group("name"), float(m.group("weight")), [(o, float(v)) for o, v in options]))
    return out


def decide(messages: list[dict[str, Any]]) -> tuple[str, dict[str, str] | None]:
    """("accept", None) or ("offer", {issue: option}) for this conversation."""
    issues = _issues(messages[0]["content"])
    k = sum(1 for m in messages if m["role"] == "assistant")
    m = _SCORE.search(messages[-1].get("content") or "")
    if m and float(m.group("score")) >= 0.9 - 0.1 * k:
        return "accept", None
    conceded = {name for name, _, _ in sorted(issues, key=lambda i: (i[1], i[0]))[:k]}
    offer = {}
    for name, _, options in issues:
        ranked = sorted(options, key=lambda o: -o[1])
        offer[name] = ranked[min(1, len(ranked) - 1)][0] if name in conceded else ranked[0][0]
    return "offer", offer


def negotiator(request: dict[str, Any]) -> str | dict[str, Any]:
    """A ``FakeChatServer`` reply: text when the request has no tools, else one function call."""
    messages = request.get("messages", [])
    kind, offer = decide(messages)
    turn = sum(1 for m in messages if m["role"] == "assistant") + 1
    message = f"My move number {turn}."
    if not request.get("tools"):
        if kind == "accept":
            return f"Message: {message}\nAction: accept"
        return "\n".join([f"Message: {message}", "Action: offer", *(f"{k}: {v}" for k, v in offer.items())])
    if kind == "accept":
        return {"content": None, "tool_calls": [{"name": "accept", "arguments": {"message": message}}]}
    params = request["tools"][0]["function"]["parameters"]["properties"]
    arg_of = {p.get("title"): name for name, p in params.items() if name != "message"}
    args = {arg_of[issue]: option for issue, option in offer.items()}
    return {"content": None, "tool_calls": [{"name": "make_offer", "arguments": {**args, "message": message}}]}


def malformed(kind: str, request: dict[str, Any]) -> str | dict[str, Any]:
    """A broken tool-call reply: "no_call", "two_calls", "unknown_function", "bad_json", "not_object",
    "bad_option" or "missing_issue"."""
    good = negotiator({**request, "messages": request.get("messages", [])[:2]})  # a first-turn offer
    call = good["tool_calls"][0]
    args = dict(call["arguments"])
    first = next(k for k in args if k != "message")
    replies: dict[str, Any] = {
        "no_call": {"content": "I would like to think about it."},
        "two_calls": {"content": None, "tool_calls": [call, {"name": "walk_away", "arguments": {"message": "bye"}}]},
        "unknown_function": {"content": None, "tool_calls": [{"name": "counter_offer", "arguments": args}]},
        "bad_json": {"content": None, "tool_calls": [{"name": "make_offer", "arguments": json.dumps(args)[:-3]}]},
        "not_object": {"content": None, "tool_calls": [{"name": "make_offer", "arguments": "[1, 2]"}]},
        "bad_option": {"content": None, "tool_calls": [{"name": "make_offer",
                                                        "arguments": {**args, first: "a pony"}}]},
        "missing_issue": {"content": None, "tool_calls": [{"name": "make_offer", "arguments": {
            k: v for k, v in args.items() if k != first}}]},
    }
    return replies[kind]
