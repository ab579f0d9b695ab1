"""OpenAI-compatible agents against loopback servers: retries, errors, keys, resumable runs."""

import json
import os

import pytest

pytest.importorskip("openai")

from haggler.agents.registry import AgentContext, SpecError, check_spec, make_agent  # noqa: E402
from haggler.testing.openai_server import FakeChatServer  # noqa: E402
from haggler.engine.backends.openai_api import Endpoint, load_endpoints  # noqa: E402
from haggler.evaluation.runner import run  # noqa: E402
from haggler.evaluation.settings import RunSettings  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.evaluation.grid import make_grid, write_grid  # noqa: E402
from haggler.core.protocol import Negotiation, ProtocolConfig  # noqa: E402
from haggler.evaluation.results import read_records  # noqa: E402
from haggler.engine.rollout import Game, play_lockstep  # noqa: E402
from haggler.core.scenario import write_scenarios  # noqa: E402

SECRET = "sk-test-SECRET-value-1234567890"


def _fast(base_url, **kw):
    fields = dict(base_url=base_url, api_key_env="HAGGLER_TEST_KEY", timeout_s=1.0, max_retries=3, backoff_s=0.01,
                  max_backoff_s=0.05, max_concurrency=8)
    fields.update(kw)
    return Endpoint(**fields)


def _setup(tmp_path, n=6):
    scenarios = generate_scenarios(n, 12, max_turns=6)
    sp, gp = tmp_path / "s.jsonl", tmp_path / "g.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], ["openai:fake-buyer"], ["seller", "buyer"]), gp)
    return sp, gp, tmp_path / "r.jsonl"


def test_an_api_buyer_plays_and_its_settings_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("HAGGLER_TEST_KEY", SECRET)
    sp, gp, out = _setup(tmp_path)
    with FakeChatServer() as server:
        endpoints = {"default": _fast(server.base_url)}
        report = run(gp, sp, "scripted:boulware", out, progress=False, endpoints=endpoints)
    assert report.errors == 0 and report.played == 12
    records = read_records(out)
    assert all(r.ended_by == "accept" for r in records)
    buyer = records[0].agents["buyer"]
    assert buyer["backend"] == "openai" and buyer["reported_model"] == "fake-model-v1"
    assert buyer["temperature"] == 1.0 and buyer["max_tokens"] > 0
    # the key travels in the Authorization header only, never into results
    assert all(h == f"Bearer {SECRET}" for h in server.auth_headers)
    assert SECRET not in out.read_text()


def test_retries_honour_retry_after_then_succeed(tmp_path, monkeypatch):
    sp, gp, out = _setup(tmp_path, n=2)
    fates = {0: ("429", "0"), 1: ("500",), 2: ("hang", 2.0)}
    with FakeChatServer(fail=lambda n: fates.get(n)) as server:
        endpoints = {"default": _fast(server.base_url, max_retries=4)}
        report = run(gp, sp, "scripted:boulware", out, settings=RunSettings(batch_size=1), progress=False,
                     endpoints=endpoints)
    assert report.errors == 0
    assert server.requests >= server.answered + 3


@pytest.mark.slow
def test_a_failing_server_loses_nothing_and_a_rerun_completes(tmp_path):
    sp, gp, out = _setup(tmp_path, n=10)
    pattern = [None, ("429", "0"), ("500",), None, ("hang", 1.5), ("500",), ("500",), ("500",), ("500",), None]
    with FakeChatServer(fail=lambda n: pattern[n % len(pattern)]) as server:
        endpoints = {"default": _fast(server.base_url, max_retries=2, timeout_s=0.5)}
        first = run(gp, sp, "scripted:conceder", out, progress=False, endpoints=endpoints)
    records = read_records(out)
    assert len(records) == 20 and len({r.cell_id for r in records}) == 20
    errored = [r for r in records if r.ended_by == "error"]
    assert first.errors == len(errored) > 0, "the failure pattern should exhaust some retries"
    for r in errored:
        assert "failed after 3 attempts" in r.error and r.seller_score is None and r.deal is None
    with FakeChatServer() as healthy:
        endpoints = {"default": _fast(healthy.base_url)}
        second = run(gp, sp, "scripted:conceder", out, progress=False, endpoints=endpoints)
    assert second.played == len(errored) and second.errors == 0
    records = read_records(out)
    assert len(records) == 20 and not [r for r in records if r.ended_by == "error"]


def test_client_errors_are_not_retried_and_keys_are_redacted(tmp_path, monkeypatch):
    monkeypatch.setenv("HAGGLER_TEST_KEY", SECRET)
    s = generate_scenarios(1, 3)[0]
    with FakeChatServer() as server:
        ctx = AgentContext(endpoints={"default": _fast(server.base_url.replace("/v1", "/nope"))})
        buyer = make_agent("openai:fake", s, "buyer", 0, ctx)
        game = Game(Negotiation(s, ProtocolConfig(opener="buyer")), {"buyer": buyer, "seller": make_agent("scripted:linear", s, "seller", 0)})
        play_lockstep([game])
        assert server.not_found == 1  # a client error is not retried
    assert game.negotiation.ended_by == "error" and "HTTP 404" in game.negotiation.error
    assert SECRET not in game.negotiation.error


def test_endpoint_tables(tmp_path):
    path = tmp_path / "endpoints.yaml"
    path.write_text("endpoints:\n  a: {base_url: 'http://127.0.0.1:1/v1', api_key_env: A_KEY, max_concurrency: 4}\n"
                    "  b: {base_url: 'http://127.0.0.1:2/v1', api_key_env: B_KEY}\n")
    table = load_endpoints(path)
    assert table["a"].api_key_env == "A_KEY" and table["a"].max_concurrency == 4 and table["b"].base_url.endswith(":2/v1")
    assert check_spec("openai:gpt-x@a", table) and check_spec("openai:gpt-x", table)
    with pytest.raises(SpecError, match="no endpoint named 'c'"):
        check_spec("openai:gpt-x@c", table)
    path.write_text("endpoints:\n  a: {base_url: x, api_key: sk-123}\n")
    with pytest.raises(ValueError, match="never a file"):
        load_endpoints(path)
    path.write_text("endpoints:\n  a: {base_url: x, rate: 3}\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load_endpoints(path)
    path.write_text("endpoints:\n  a: {base_url: x, action_format: json}\n")
    with pytest.raises(ValueError, match="action_format must be one of"):
        load_endpoints(path)
    path.write_text("endpoints:\n  a: {base_url: x, requests_per_minute: 0}\n")
    with pytest.raises(ValueError, match="requests_per_minute must be a positive number"):
        load_endpoints(path)
    path.write_text("endpoints:\n  a: {base_url: x, requests_per_minute: 60, tokens_per_minute: 1000, action_format: tools,"
                    " price_in_per_mtok: 2, price_out_per_mtok: 8}\n")
    a = load_endpoints(path)["a"]
    assert (a.requests_per_minute, a.tokens_per_minute, a.action_format, a.tool_choice) == (60, 1000, "tools", "required")
    assert a.prices() == {"in": 2, "out": 8, "cached_in": 2}
    path.write_text("endpoints: [1, 2]\n")
    with pytest.raises(ValueError, match="mapping under 'endpoints'"):
        load_endpoints(path)


def test_two_buyers_on_two_endpoints_in_one_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KEY_A", "sk-aaaa-1111")
    monkeypatch.setenv("KEY_B", "sk-bbbb-2222")
    scenarios = generate_scenarios(3, 5, max_turns=6)
    sp, gp, out = tmp_path / "s.jsonl", tmp_path / "g.jsonl", tmp_path / "r.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], ["openai:m@a", "openai:m@b"], ["seller"]), gp)
    with FakeChatServer(model="model-a") as a, FakeChatServer(model="model-b") as b:
        endpoints = {"a": _fast(a.base_url, api_key_env="KEY_A"), "b": _fast(b.base_url, api_key_env="KEY_B")}
        run(gp, sp, "scripted:boulware", out, progress=False, endpoints=endpoints)
    assert a.answered == 3 and b.answered == 3
    assert set(a.auth_headers) == {"Bearer sk-aaaa-1111"} and set(b.auth_headers) == {"Bearer sk-bbbb-2222"}
    reported = {r.buyer: r.agents["buyer"]["reported_model"] for r in read_records(out)}
    assert reported == {"openai:m@a": "model-a", "openai:m@b": "model-b"}
    text = out.read_text()
    assert "sk-aaaa" not in text and "sk-bbbb" not in text and json.loads(text.splitlines()[0])
    assert os.environ["KEY_A"] == "sk-aaaa-1111"


def test_api_agents_send_a_seed_per_request_derived_from_the_cell_and_record_it(tmp_path):
    sp, gp, out = _setup(tmp_path, n=3)
    with FakeChatServer() as server:
        run(gp, sp, "scripted:boulware", out, progress=False, endpoints={"default": _fast(server.base_url)})
        sent = list(server.seeds)
    records = read_records(out)
    seeds = {r.cell_id: r.agents["buyer"]["seed"] for r in records}
    assert all(isinstance(s, int) for s in seeds.values()) and len(set(seeds.values())) == len(seeds)
    assert set(seeds.values()) <= set(sent)  # a cell's first request sends the agent's own seed, the next ones +1, ...
    assert set(sent) <= {s + k for s in seeds.values() for k in range(6)}
    assert all(r.agents["buyer"]["seed_sent"] for r in records)
    again = tmp_path / "again.jsonl"
    with FakeChatServer() as server:
        run(gp, sp, "scripted:boulware", again, progress=False, endpoints={"default": _fast(server.base_url)})
    assert {r.cell_id: r.agents["buyer"]["seed"] for r in read_records(again)} == seeds
    quiet = tmp_path / "quiet.jsonl"
    with FakeChatServer() as server:
        run(gp, sp, "scripted:boulware", quiet, progress=False,
            endpoints={"default": _fast(server.base_url, send_seed=False)})
        assert set(server.seeds) == {None}
