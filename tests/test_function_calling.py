"""openai: agents that act through function calling: the tools, the reading of tool calls, malformed calls,
and the same negotiations played through both action formats against the loopback server."""

import json

import pytest

pytest.importorskip("openai")

from conftest import small_scenario  # noqa: E402

from haggler.agents.format.tools import argument_names, read_tool_calls, tool_specs  # noqa: E402
from haggler.core.scenario import Issue, write_scenarios  # noqa: E402
from haggler.core.types import Accept, Invalid, Offer, WalkAway  # noqa: E402
from haggler.engine.backends.openai_api import Endpoint  # noqa: E402
from haggler.evaluation.grid import make_grid, write_grid  # noqa: E402
from haggler.evaluation.results import read_records  # noqa: E402
from haggler.evaluation.runner import run  # noqa: E402
from haggler.evaluation.settings import RunSettings  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.testing.fake_negotiator import malformed, negotiator  # noqa: E402
from haggler.testing.openai_server import FakeChatServer  # noqa: E402


def call(name, arguments):
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}


def test_the_tools_name_every_issue_with_its_options_as_an_enum():
    s = small_scenario()
    s = s.model_copy(update={"issues": (Issue(name="price", options=("$10", "$20", "$30")),
                                        Issue(name="colour / finish", options=("red", "blue")))})
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in tool_specs(s)}
    assert list(tools) == ["make_offer", "accept", "walk_away"]
    offer = tools["make_offer"]
    assert argument_names(s) == ["price", "colour_finish"]
    assert offer["properties"]["price"]["enum"] == ["$10", "$20", "$30"]
    assert offer["properties"]["colour_finish"] == {**offer["properties"]["colour_finish"], "enum": ["red", "blue"],
                                                    "title": "colour / finish"}
    assert set(offer["required"]) == {"price", "colour_finish", "message"}
    assert tools["accept"]["required"] == ["message"] and tools["walk_away"]["required"] == ["message"]
    # an issue named like the message argument, or two issues made into one identifier, stay apart
    s2 = s.model_copy(update={"issues": (Issue(name="message", options=("a", "b")), Issue(name="Message!", options=("c",)))})
    assert argument_names(s2) == ["message_2", "Message"]


def test_tool_calls_read_into_exactly_one_action():
    s = small_scenario()  # price ($10, $20, $30), colour (red, blue)
    read = lambda calls, content="": read_tool_calls(calls, content, s)  # noqa: E731
    assert read([call("make_offer", {"price": "$20", "colour": "blue", "message": "deal?"})]) == ("deal?", Offer((1, 1)))
    assert read([call("make_offer", {"price": " $30", "colour": "BLUE"})], "text") == ("text", Offer((2, 1)))
    assert read([call("accept", {"message": "yes"})]) == ("yes", Accept())
    assert read([call("accept", "")], "ok then") == ("ok then", Accept())  # no arguments at all: the text speaks
    assert read([call("walk_away", {})]) == ("", WalkAway())
    invalid = {
        "no call": ([], "no function call"),
        "two calls": ([call("accept", {}), call("walk_away", {})], "several function calls in one turn (2"),
        "same call twice": ([call("accept", {}), call("accept", {})], "several function calls"),
        "unknown function": ([call("counter_offer", {"price": "$20"})], "unknown function 'counter_offer'"),
        "bad JSON": ([call("make_offer", '{"price": "$20", "colour": ')], "not valid JSON"),
        "not an object": ([call("accept", "[1]")], "not a JSON object"),
        "unknown option": ([call("make_offer", {"price": "$25", "colour": "blue"})], "'$25' is not one of"),
        "a number for a name": ([call("make_offer", {"price": 20, "colour": "blue"})], "'20' is not one of"),
        "missing issue": ([call("make_offer", {"price": "$20"})], "no option for 'colour'"),
        "null option": ([call("make_offer", {"price": None, "colour": "red"})], "is not one of"),
    }
    for why, (calls, reason) in invalid.items():
        _, action = read(calls)
        assert isinstance(action, Invalid) and reason in action.reason, (why, action)


def test_an_option_named_twice_up_to_case_never_binds():
    s = small_scenario()
    s = s.model_copy(update={"issues": (Issue(name="price", options=("$10", "$20", "$30")),
                                        Issue(name="colour", options=("Red", "RED")))})
    assert read_tool_calls([call("make_offer", {"price": "$10", "colour": "RED"})], "", s)[1] == Offer((0, 1))
    _, action = read_tool_calls([call("make_offer", {"price": "$10", "colour": "red"})], "", s)
    assert isinstance(action, Invalid)


def _grid(tmp_path, buyers, n=6, max_turns=8, openers=("seller", "buyer")):
    scenarios = generate_scenarios(n, 21, max_turns=max_turns)
    sp, gp = tmp_path / "s.jsonl", tmp_path / "g.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], buyers, list(openers)), gp)
    return sp, gp, tmp_path / "r.jsonl"


def _endpoint(name, url, **kw):
    return Endpoint(name=name, base_url=url, timeout_s=5, max_retries=1, backoff_s=0.01, **kw)


def test_the_same_negotiations_through_text_and_through_function_calling(tmp_path):
    sp, gp, out = _grid(tmp_path, ["openai:fake@text", "openai:fake@tools"])
    seen = []
    def reply(request):  # noqa: E306
        seen.append(request)
        return negotiator(request)
    with FakeChatServer(reply=reply) as server:
        endpoints = {"text": _endpoint("text", server.base_url),
                     "tools": _endpoint("tools", server.base_url, action_format="tools")}
        report = run(gp, sp, "scripted:boulware", out, progress=False, endpoints=endpoints)
    assert report.errors == 0
    records = read_records(out)
    by_format = {"text": {}, "tools": {}}
    for r in records:
        by_format[r.buyer.rsplit("@", 1)[1]][(r.scenario_id, r.opener)] = r
        assert r.agents["buyer"]["action_format"] == r.buyer.rsplit("@", 1)[1]
    assert by_format["text"].keys() == by_format["tools"].keys() and len(by_format["text"]) == 12
    outcomes = set()
    for key, text in by_format["text"].items():
        tools = by_format["tools"][key]
        assert (text.ended_by, text.agreement, text.seller_score, text.turns) == \
               (tools.ended_by, tools.agreement, tools.seller_score, tools.turns), key
        assert [t["action"] for t in text.transcript] == [t["action"] for t in tools.transcript], key
        assert all(t["action"]["type"] != "invalid" for t in tools.transcript)
        outcomes.add(text.ended_by)
    assert {"accept", "deadline"} <= outcomes, "the script should reach deals and deadlines alike"
    # the tools requests: three functions, a forced call, and the engine's reading returned before each turn
    tool_requests = [q for q in seen if q.get("tools")]
    assert tool_requests and all(q["tool_choice"] == "required" for q in tool_requests)
    assert not [q for q in seen if not q.get("tools") and "tool_choice" in q]
    later = [q for q in tool_requests if any(m["role"] == "assistant" for m in q["messages"])]
    assert later and all(m["content"].startswith("Recorded: offer: ") for q in later for m in q["messages"]
                         if m["role"] == "tool")
    assert records[0].settings["endpoints"]["tools"]["action_format"] == "tools"


@pytest.mark.parametrize("kind,reason", [
    ("no_call", "no function call"), ("two_calls", "several function calls"),
    ("unknown_function", "unknown function 'counter_offer'"), ("bad_json", "not valid JSON"),
    ("not_object", "not a JSON object"), ("bad_option", "'a pony' is not one of"),
    ("missing_issue", "make_offer: no option for"),
])
def test_malformed_tool_calls_are_invalid_actions_with_a_reason(tmp_path, kind, reason):
    sp, gp, out = _grid(tmp_path, ["openai:fake@tools"], n=1, openers=("buyer",))
    with FakeChatServer(reply=lambda request: malformed(kind, request)) as server:
        endpoints = {"tools": _endpoint("tools", server.base_url, action_format="tools")}
        run(gp, sp, "scripted:boulware", out, settings=RunSettings(max_invalid=2), progress=False, endpoints=endpoints)
    [r] = read_records(out)
    buyer_turns = [t for t in r.transcript if t["speaker"] == "buyer"]
    assert buyer_turns and all(t["action"]["type"] == "invalid" and reason in t["action"]["reason"]
                               for t in buyer_turns), buyer_turns
    assert r.invalid_actions["buyer"] == 2 and r.ended_by == "walk_away" and r.walked_away_by == "buyer"
    assert r.agreement is None


def test_a_server_that_refuses_a_required_call_is_asked_with_auto(tmp_path):
    sp, gp, out = _grid(tmp_path, ["openai:fake@tools"], n=2, openers=("buyer",))
    with FakeChatServer(reply=negotiator, refuse_required=True) as server:
        endpoints = {"tools": _endpoint("tools", server.base_url, action_format="tools")}
        report = run(gp, sp, "scripted:boulware", out, progress=False, endpoints=endpoints)
    assert report.errors == 0
    # the negotiations in flight asked with "required" once each, then every request asked with "auto"
    assert 1 <= server.tool_choices.count("required") <= 2 and set(server.tool_choices) == {"required", "auto"}
    assert server.answered == server.tool_choices.count("auto")
    assert all(r.agents["buyer"]["tool_choice"] == "auto" for r in read_records(out))
