import json

import pytest

from haggler.core.analysis import all_utilities

from haggler.core.scenario import ScenarioError, dump_scenario, load_scenarios, write_scenarios
from tests.conftest import small_scenario


def test_utility_is_weighted_sum(tiny):
    # seller: 0.8 * v(price) + 0.2 * v(colour)
    assert tiny.utility("seller", (2, 1)) == pytest.approx(1.0)
    assert tiny.utility("seller", (1, 0)) == pytest.approx(0.4)
    assert tiny.utility("buyer", (0, 0)) == pytest.approx(0.6 + 0.4 * 0.25)
    # the vectorised table agrees with the scalar path on every outcome
    for idx in range(tiny.n_outcomes):
        o = tiny.outcome_at(idx)
        assert tiny.index_of(o) == idx
        assert all_utilities(tiny, "buyer")[idx] == pytest.approx(tiny.utility("buyer", o))


def test_round_trip(tmp_path, tiny):
    path = tmp_path / "s.jsonl"
    write_scenarios([tiny], path)
    loaded = load_scenarios(path)["tiny"]
    assert loaded == tiny
    assert dump_scenario(loaded) == dump_scenario(tiny)


def _write(tmp_path, data_lines):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(data_lines) + "\n")
    return path


@pytest.mark.parametrize(
    "mutate, field_fragment",
    [
        (lambda d: d["seller"]["weights"].update(price=0.9), "seller.weights"),
        (lambda d: d["buyer"]["values"]["colour"].pop("red"), "buyer"),
        (lambda d: d["seller"]["values"]["price"].update({"$10": 1.5}), "seller.values"),
        (lambda d: d.update(max_turns=1), "max_turns"),
        (lambda d: d["seller"].update(reservation=-0.1), "seller.reservation"),
        (lambda d: d.pop("context"), "context"),
        (lambda d: d.update(colour="blue"), "colour"),
    ],
)
def test_broken_scenario_names_file_line_scenario_and_field(tmp_path, tiny, mutate, field_fragment):
    good = json.loads(dump_scenario(tiny))
    bad = json.loads(dump_scenario(tiny))
    bad["id"] = "broken-one"
    mutate(bad)
    path = _write(tmp_path, [json.dumps(good), json.dumps(bad)])
    with pytest.raises(ScenarioError) as err:
        load_scenarios(path)
    msg = str(err.value)
    assert f"{path}:2" in msg and "'broken-one'" in msg and field_fragment in msg


def test_not_json_and_duplicates_and_missing(tmp_path, tiny):
    path = _write(tmp_path, [dump_scenario(tiny), "{not json"])
    with pytest.raises(ScenarioError, match=r"bad.jsonl:2: not valid JSON"):
        load_scenarios(path)
    path = _write(tmp_path, [dump_scenario(tiny), dump_scenario(tiny)])
    with pytest.raises(ScenarioError, match="appears more than once"):
        load_scenarios(path)
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenarios(tmp_path / "nope.jsonl")


def test_reservation_values_are_private_per_side():
    s = small_scenario(rs=0.1, rb=0.7)
    assert s.reservation("seller") == 0.1 and s.reservation("buyer") == 0.7
