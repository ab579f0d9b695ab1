"""Rate and token budgets per endpoint, usage recorded per negotiation, cost tables and estimates."""

import asyncio
import json
import math
import time

import pytest

pytest.importorskip("openai")

from haggler.agents.format.prompts import system_prompt  # noqa: E402
from haggler.cli import main  # noqa: E402
from haggler.core.scenario import write_scenarios  # noqa: E402
from haggler.engine.backends.limits import EndpointLimits, TokenBucket, limits_for  # noqa: E402
from haggler.engine.backends.openai_api import ChatClient, Endpoint, estimate_tokens  # noqa: E402
from haggler.evaluation.cost import estimate, price, record_usage  # noqa: E402
from haggler.evaluation.grid import make_grid, write_grid  # noqa: E402
from haggler.evaluation.results import read_records  # noqa: E402
from haggler.evaluation.runner import run  # noqa: E402
from haggler.evaluation.summary import summarize  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.study.report import build_report  # noqa: E402
from haggler.testing.fake_negotiator import negotiator  # noqa: E402
from haggler.testing.openai_server import FakeChatServer  # noqa: E402

MESSAGES = [{"role": "user", "content": "hello"}]


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_a_token_bucket_paces_reservations_in_arrival_order():
    clock = Clock()
    b = TokenBucket(per_minute=120, burst=1, clock=clock)  # 2 a second
    assert [b.reserve(1) for _ in range(4)] == [0.0, 0.5, 1.0, 1.5]  # queued, none lost, none early
    clock.t += 2.0
    assert b.reserve(1) == 0.0  # the queue has drained
    big = TokenBucket(per_minute=60, burst=2, clock=Clock())  # a cost above the burst waits for a full bucket
    assert big.reserve(5) == 0.0 and big.reserve(1) == pytest.approx(4.0)  # ... and leaves it in debt
    s = TokenBucket(per_minute=60, burst=10, clock=Clock())
    s.reserve(10)
    s.settle(10, 4)  # the reply used fewer tokens than charged: the rest comes back
    assert s.level == pytest.approx(6)
    s.settle(0, 20)
    assert s.level == pytest.approx(-14)


def test_a_429_pauses_every_client_of_the_endpoint():
    limits = EndpointLimits()
    assert limits.reserve(100) == 0.0
    limits.pause(0.5)
    assert 0.45 < limits.reserve(100) <= 0.5 and limits.stats["rate_limited"] == 1
    ep = Endpoint(name="x", requests_per_minute=60)
    assert limits_for(ep) is limits_for(Endpoint(name="x", requests_per_minute=60))  # one per endpoint
    assert limits_for(ep) is not limits_for(Endpoint(name="y", requests_per_minute=60))


def _endpoint(url, **kw):
    return Endpoint(name=f"e{time.monotonic_ns()}", base_url=url, max_concurrency=64, timeout_s=5, max_retries=0,
                    **kw)


async def _chat_all(clients, n_each, max_tokens=8):
    coros = [c.chat(MESSAGES, 1.0, max_tokens) for c in clients for _ in range(n_each)]
    return await asyncio.gather(*coros, return_exceptions=True)


def test_the_server_limit_is_real_and_the_client_keeps_within_it():
    """20 requests a second, a burst of 10: unpaced, the server refuses; paced at its limit by two models
    sharing one endpoint, nothing is refused and the pace is the limit's."""
    with FakeChatServer(rpm=1200, window_s=0.5) as server:
        unpaced = ChatClient(_endpoint(server.base_url), "m")
        answers = asyncio.run(_chat_all([unpaced], 30))
        assert server.rate_limited >= 10 and sum(isinstance(a, Exception) for a in answers) == server.rate_limited
    with FakeChatServer(rpm=1200, window_s=0.5) as server:
        ep = _endpoint(server.base_url, requests_per_minute=1200)
        clients = [ChatClient(ep, "model-a"), ChatClient(ep, "model-b")]
        start = time.perf_counter()
        answers = asyncio.run(_chat_all(clients, 15))
        wall = time.perf_counter() - start
    assert server.rate_limited == 0 and not [a for a in answers if isinstance(a, Exception)]
    assert 29 / 20 * 0.95 <= wall <= 29 / 20 * 2 + 1, wall


def test_a_tokens_per_minute_budget_paces_by_estimated_tokens():
    with FakeChatServer() as server:
        free = ChatClient(_endpoint(server.base_url), "m")
        start = time.perf_counter()
        asyncio.run(_chat_all([free], 10, max_tokens=100))
        unlimited = time.perf_counter() - start
        cost = estimate_tokens(MESSAGES, None, 100)
        ep = _endpoint(server.base_url, tokens_per_minute=60 * 4 * cost)  # four requests a second, one second's burst
        paced = ChatClient(ep, "m")
        start = time.perf_counter()
        asyncio.run(_chat_all([paced], 10, max_tokens=100))
        wall = time.perf_counter() - start
    assert unlimited < 1.0 and (10 - 4 - 1) / 4 * 0.95 <= wall <= 3.5, (unlimited, wall)
    # settled with the tokens the replies reported: far fewer than charged, so the budget refilled
    assert limits_for(ep).tokens.level > 0


def _grid(tmp_path, buyers, n=4, max_turns=6):
    scenarios = generate_scenarios(n, 5, max_turns=max_turns)
    sp, gp = tmp_path / "s.jsonl", tmp_path / "g.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], buyers, ["seller", "buyer"]), gp)
    return scenarios, sp, gp, tmp_path / "r.jsonl"


PRICES = dict(price_in_per_mtok=2.0, price_out_per_mtok=8.0, price_cached_in_per_mtok=0.5)


def test_usage_is_recorded_per_negotiation_and_priced_per_arm_and_buyer(tmp_path):
    _, sp, gp, out = _grid(tmp_path, ["openai:m@priced", "openai:m@free"])
    with FakeChatServer(reply=negotiator) as server:
        endpoints = {"priced": Endpoint(name="priced", base_url=server.base_url, action_format="tools", **PRICES),
                     "free": Endpoint(name="free", base_url=server.base_url)}
        run(gp, sp, "scripted:boulware", out, progress=False, endpoints=endpoints)
    records = read_records(out)
    usages = [r.agents["buyer"]["usage"] for r in records]
    assert sum(u["calls"] for u in usages) == server.answered
    for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
        assert sum(u[key] for u in usages) == server.usage[key] > 0
    for r in records:  # the calls are this negotiation's: one per buyer turn
        assert r.agents["buyer"]["usage"]["calls"] == sum(t["speaker"] == "buyer" for t in r.transcript)
    priced = [r for r in records if r.buyer.endswith("@priced")]
    u = priced[0].agents["buyer"]["usage"]
    expected = ((u["prompt_tokens"] - u["cached_tokens"]) * 2.0 + u["cached_tokens"] * 0.5 + u["completion_tokens"] * 8.0) / 1e6
    assert record_usage(priced[0]).cost == pytest.approx(expected) and expected > 0
    rows = {row.buyer: row for row in summarize(records)}
    assert rows["openai:m@priced"].api_cost == pytest.approx(sum(record_usage(r).cost for r in priced))
    assert rows["openai:m@free"].api_cost is None and rows["openai:m@free"].api_calls > 0
    summary = build_report([out], tmp_path / "report", n_boot=200)
    pooled = summary["per_buyer"]["all buyers"]["scripted:boulware"]["api"]
    assert pooled["calls"] == server.answered and pooled["unpriced_calls"] == rows["openai:m@free"].api_calls
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## API calls, tokens and cost" in md and "not priced" in md
    assert f"${rows['openai:m@priced'].api_cost:.4f}" in md
    assert "API calls, tokens and cost" in (tmp_path / "report" / "report.html").read_text()


def test_the_estimate_counts_calls_to_the_turn_limit_and_prices_them(tmp_path, capsys):
    scenarios, sp, gp, out = _grid(tmp_path, ["openai:m@priced", "scripted:tft"], n=3, max_turns=5)
    endpoints = {"priced": Endpoint(name="priced", **PRICES)}
    plays = [(s, "scripted:boulware", "openai:m@priced", opener) for s in scenarios for opener in ("seller", "buyer")]
    est = estimate(plays, endpoints, reply_budget=50)
    e = est.endpoints["priced"]
    assert e.calls == 3 * (2 + 3)  # the buyer speaks twice when the seller opens 5 turns, three times when it opens
    assert e.completion_tokens == e.calls * 50  # the reply estimate (100) capped by the reply budget
    assert e.cost == pytest.approx(price({"prompt_tokens": e.prompt_tokens, "completion_tokens": e.completion_tokens},
                                         endpoints["priced"].prices()))
    assert "runs to its turn limit" in est.assumptions and "50 per reply" in est.assumptions
    # each call resends the conversation so far: the system prompt, then per turn an observation (80 tokens and
    # the other side's message, 50) and, before the next, the reply (50); 4 tokens a message
    one = estimate(plays[:1], endpoints, reply_budget=50).endpoints["priced"]
    fixed = len(system_prompt(scenarios[0], "buyer")) // 4 + 4
    assert one.calls == 2 and one.prompt_tokens == (fixed + 134) + (fixed + 2 * 134 + 54)
    # the dry run: the same figures for the cells not done, nothing played, nothing written
    (tmp_path / "ep.yaml").write_text("endpoints:\n  priced: " + json.dumps(PRICES) + "\n")
    argv = ["run", "--grid", str(gp), "--scenarios", str(sp), "--seller", "scripted:boulware", "--out", str(out),
            "--endpoints", str(tmp_path / "ep.yaml"), "--api-max-tokens", "50", "--dry-run"]
    assert main(argv) == 0 and not out.exists()
    printed = capsys.readouterr().out
    assert f"{e.calls} calls, {e.prompt_tokens:,} prompt + {e.completion_tokens:,} completion tokens" in printed
    assert f"${e.cost:.4f}" in printed


def test_an_estimate_bounds_what_a_run_spends(tmp_path):
    scenarios, sp, gp, out = _grid(tmp_path, ["openai:m@priced"], n=4, max_turns=6)
    with FakeChatServer(reply=negotiator) as server:
        endpoints = {"priced": Endpoint(name="priced", base_url=server.base_url, **PRICES)}
        est = estimate([(s, "scripted:boulware", "openai:m@priced", o) for s in scenarios for o in ("seller", "buyer")],
                       endpoints, reply_budget=300)
        run(gp, sp, "scripted:boulware", out, progress=False, endpoints=endpoints)
    assert server.answered <= est.endpoints["priced"].calls
    assert server.usage["completion_tokens"] <= est.endpoints["priced"].completion_tokens


def test_study_plan_states_its_estimate(tmp_path, capsys):
    (tmp_path / "ep.yaml").write_text("endpoints:\n  a: {price_in_per_mtok: 1, price_out_per_mtok: 4, "
                                      "requests_per_minute: 30}\n  b: {action_format: tools, tokens_per_minute: 1000}\n")
    (tmp_path / "study.yaml").write_text(json.dumps({
        "name": "s", "output_dir": str(tmp_path / "out"), "training": "unused.yaml", "endpoints": "ep.yaml",
        "bases": [{"name": "base", "model": "default"}],
        "references": [{"name": "ref", "spec": "openai:big@a"}],
        "buyers": [{"spec": "openai:x@a", "family": "x"}, {"spec": "openai:y@b", "family": "y"}],
        "grid": {"n": 2, "max_turns": 4, "openers": ["seller", "buyer"]},
        "no_deal_arm": False}))  # the arithmetic below counts the two arms named here
    assert main(["study", "plan", str(tmp_path / "study.yaml")]) == 0
    printed = capsys.readouterr().out
    # 2 arms x 8 cells; endpoint a: buyer x in 4 cells per arm, and the reference seller in all 8, 2 calls each
    assert "endpoint a: 16 agents (negotiation sides), 32 calls" in printed
    assert "endpoint b: 8 agents (negotiation sides), 16 calls" in printed and "not priced" in printed
    assert f"at least {32 / 30:.1f} min at 30 requests/min" in printed
    b_tokens = int(printed.split("endpoint b: 8 agents (negotiation sides), 16 calls, ")[1].split(" prompt")[0].replace(",", ""))
    assert f"at least {(b_tokens + 16 * 100) / 1000:.1f} min at 1000 tokens/min" in printed  # its token budget binds
    assert "as if every negotiation runs to its turn limit" in printed
    assert not (tmp_path / "out").exists()
    assert math.isfinite(float(printed.split("total priced cost: $")[1].split()[0]))
