"""Results as an Inspect AI log: read back with Inspect's own reader, every sample checked against the results."""

import json

import pytest

pytest.importorskip("openai")
pytest.importorskip("inspect_ai")

from inspect_ai.log import read_eval_log  # noqa: E402

from haggler.cli import main  # noqa: E402
from haggler.core.scenario import write_scenarios  # noqa: E402
from haggler.engine.backends.openai_api import Endpoint  # noqa: E402
from haggler.evaluation.grid import make_grid, write_grid  # noqa: E402
from haggler.evaluation.inspect_export import score_values  # noqa: E402
from haggler.evaluation.results import read_latest  # noqa: E402
from haggler.evaluation.runner import run  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.testing.fake_negotiator import negotiator  # noqa: E402
from haggler.testing.openai_server import FakeChatServer  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Two sellers on one grid against an API buyer; one cell fails for good (an errored record)."""
    tmp = tmp_path_factory.mktemp("inspect")
    scenarios = generate_scenarios(3, 9, max_turns=6)
    sp, gp, out = tmp / "s.jsonl", tmp / "g.jsonl", tmp / "r.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], ["openai:m@a", "scripted:tft"], ["seller", "buyer"]), gp)
    with FakeChatServer(reply=negotiator, fail=lambda n: ("500",) if n == 0 else None) as server:
        endpoints = {"a": Endpoint(name="a", base_url=server.base_url, max_retries=0, timeout_s=5,
                                   price_in_per_mtok=1.0, price_out_per_mtok=3.0)}
        for seller in ("scripted:boulware", "scripted:conceder"):
            run(gp, sp, seller, out, progress=False, endpoints=endpoints)
    return tmp, out


def test_every_sample_carries_its_records_scores_and_metadata(results):
    tmp, out = results
    eval_path = tmp / "run.eval"
    (tmp / "arms.json").write_text(json.dumps([{"name": "boulware-arm", "spec": "scripted:boulware"}]))
    assert main(["export", "inspect", str(out), "--out", str(eval_path), "--arms", str(tmp / "arms.json")]) == 0
    log = read_eval_log(str(eval_path))
    records = read_latest(out)
    assert log.status == "success" and len(log.samples) == len(records) == 24
    errored = 0
    for sample in log.samples:
        seller, cell = sample.id.split("/", 1)
        r = records[(seller, cell)]
        m = sample.metadata
        assert (m["scenario"], m["buyer"], m["seller"], m["opener"], m["seed"]) == \
               (r.scenario_id, r.buyer, r.seller, r.opener, r.seed)
        assert m["arm"] == ("boulware-arm" if r.seller == "scripted:boulware" else r.seller)
        if r.ended_by == "error":
            errored += 1
            assert not sample.scores and r.error in sample.error.message
            continue
        assert sample.scores["seller_score"].value == pytest.approx(r.seller_score)
        assert {k: s.value for k, s in sample.scores.items()} == pytest.approx(score_values(r))
        assert sample.scores["deal"].value == int(r.deal)
        assert sample.scores["invalid_buyer"].value == r.invalid_actions["buyer"]
        turns = [msg for msg in sample.messages if msg.role != "system"]
        assert [("assistant" if t["speaker"] == "seller" else "user") for t in r.transcript] == [t.role for t in turns]
        if r.buyer.startswith("openai:"):
            [usage] = sample.model_usage.values()
            assert usage.input_tokens == r.agents["buyer"]["usage"]["prompt_tokens"] and usage.total_cost > 0
    assert errored == 1
    scored = [r for r in records.values() if r.ended_by != "error"]
    mean = {s.name: s.metrics["mean"].value for s in log.results.scores}
    assert mean["seller_score"] == pytest.approx(sum(r.seller_score for r in scored) / len(scored))


def test_inspects_dataframes_load_the_log(results):
    from inspect_ai.analysis import samples_df

    tmp, out = results
    from haggler.evaluation.inspect_export import export_inspect

    assert export_inspect([out], tmp / "df.eval") == 24
    df = samples_df(str(tmp / "df.eval"))
    assert len(df) == 24 and {"score_seller_score", "score_deal", "metadata_arm", "metadata_buyer"} <= set(df.columns)
    assert df["score_seller_score"].notna().sum() == 23


def test_a_records_groups_of_figures_become_scores_of_their_own(results):
    from haggler.evaluation.results import Record

    _, out = results
    r = next(r for r in read_latest(out).values() if r.ended_by != "error")
    line = json.loads(r.to_line())
    line["behaviour"] = {"concession": 0.25, "loss_accepted": True, "note": "text is not a score"}
    values = score_values(Record.model_validate(line))
    assert values["behaviour_concession"] == 0.25 and values["behaviour_loss_accepted"] == 1
    assert "behaviour_note" not in values and values["seller_score"] == r.seller_score
