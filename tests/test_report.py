"""The report from results files: figures that match the records, verdicts that say what the data show."""

import csv
import json
import random

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("statsmodels")

from haggler.study.report import build_report  # noqa: E402
from haggler.study.report.assemble import POOLED  # noqa: E402
from haggler.study.config import Arm  # noqa: E402


def record(seller, scenario, buyer, opener, score, deal=True, error=False):
    cell = f"{scenario}|{buyer}|{opener}|0"
    return {"cell_id": cell, "scenario_id": scenario, "seller": seller, "buyer": buyer, "opener": opener, "seed": 1,
            "deal": None if error else deal, "agreement": None, "ended_by": "error" if error else "agreement",
            "walked_away_by": None, "turns": None if error else 3,
            "seller_utility": None if error else score, "buyer_utility": None if error else 1 - score,
            "seller_score": None if error else score, "seller_advantage": None, "pareto_optimal": not error,
            "nash_distance": None if error else 0.1, "individually_irrational": False,
            "invalid_actions": {} if error else {"seller": 1},
            "transcript": [] if error else [{"turn": 0, "speaker": "seller", "text": "Hello <b>buyer</b>",
                                             "action": {"type": "walk_away"}},
                                            {"turn": 1, "speaker": "buyer", "text": "hi", "action": {"type": "accept"}}],
            "error": "server down" if error else None, "settings": {"no_deal": "reservation"}, "agents": {}}


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def synthetic(tmp_path, gain=0.1, seeds=(None,)):
    rng = random.Random(0)
    records = []
    for k in range(16):
        base_level = rng.uniform(0.3, 0.6)
        for buyer in ("scripted:tft", "negmas:AspirationNegotiator"):
            for opener in ("seller", "buyer"):
                noise = rng.gauss(0, 0.02)
                records.append(record("hf:base", f"s{k}", buyer, opener, base_level + noise))
                for sd in seeds:
                    name = "hf:rl" if sd is None else f"hf:rl-{sd}"
                    bump = gain if buyer == "scripted:tft" else 0.0  # the gain sits on one buyer
                    records.append(record(name, f"s{k}", buyer, opener, base_level + noise + bump + rng.gauss(0, 0.01)))
    records.append(record("hf:base", "s0", "scripted:tft", "extra", 0.0, error=True))
    write(tmp_path / "results.jsonl", records)
    return records


def test_results_only_compares_every_pair_and_matches_the_records(tmp_path):
    records = synthetic(tmp_path)
    summary = build_report([tmp_path / "results.jsonl"], tmp_path / "report", n_boot=500)
    pooled = summary["per_buyer"][POOLED]
    done = [r for r in records if r["seller"] == "hf:base" and r["ended_by"] != "error"]
    assert pooled["hf:base"]["seller_score"]["estimate"] == pytest.approx(sum(r["seller_score"] for r in done) / len(done))
    assert pooled["hf:base"]["errored"] == 1 and pooled["hf:base"]["completed"] == 64
    assert pooled["hf:base"]["invalid_action_rate"] == pytest.approx(1.0)  # one invalid per seller turn
    (cmp,) = [c for c in summary["comparisons"] if c["buyer"] == POOLED]
    assert {cmp["a"], cmp["b"]} == {"hf:base", "hf:rl"} and cmp["common_cells"] == 64 and cmp["excluded_cells"] == 1
    for name in ("summary.json", "report.md", "report.html", "tables/arms.csv", "tables/comparisons.csv",
                 "plots/per_buyer.png"):
        assert (tmp_path / "report" / name).is_file(), name
    rows = list(csv.DictReader(open(tmp_path / "report" / "tables" / "arms.csv")))
    assert {(r["arm"], r["buyer"]) for r in rows} >= {("hf:base", POOLED), ("hf:rl", "scripted:tft")}
    html = (tmp_path / "report" / "report.html").read_text()
    assert "Hello &lt;b&gt;buyer&lt;/b&gt;" in html and "Hello <b>" not in html  # transcripts are escaped
    assert "http" not in html.replace("http-equiv", "")  # self-contained: nothing to fetch


def test_study_arms_give_rl_against_base_per_buyer_with_plain_verdicts(tmp_path):
    synthetic(tmp_path, gain=0.1)
    arms = [Arm("base", "hf:base", "base", size=0.135), Arm("rl", "hf:rl", "rl", base="base", size=0.135,
                                                            learning_rate=1e-5, seed=0)]
    summary = build_report([tmp_path / "results.jsonl"], tmp_path / "report", arms=arms, n_boot=500, margin=0.02)
    by_buyer = {c["buyer"]: c for c in summary["comparisons"] if c["family"] == "rl_vs_base"}
    tft, asp = by_buyer["scripted:tft"], by_buyer["negmas:AspirationNegotiator"]
    assert tft["difference"]["estimate"] == pytest.approx(0.1, abs=0.01) and tft["difference"]["low"] > 0
    assert "detectable difference" in tft["verdict"]
    assert asp["difference"]["low"] < 0 < asp["difference"]["high"]
    assert "equivalent within" in asp["verdict"]  # no gain there, and tightly so
    assert "evaluation noise only" in asp["verdict"]
    assert (tmp_path / "report" / "plots" / "gain_vs_size.png").is_file()
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| base |" in md and "includes zero" in md


def test_several_training_seeds_show_their_spread(tmp_path):
    synthetic(tmp_path, seeds=(0, 1, 2))
    arms = [Arm("base", "hf:base", "base")] + [Arm("rl", f"hf:rl-{s}", "rl", base="base", learning_rate=1e-6, seed=s)
                                                for s in (0, 1, 2)]
    summary = build_report([tmp_path / "results.jsonl"], tmp_path / "report", arms=arms, n_boot=300)
    rl = summary["per_buyer"][POOLED]["rl"]
    assert rl["seeds"] == 3 and set(rl["seed_means"]) == {"0", "1", "2"} and rl["seed_sd"] >= 0
    (cmp,) = [c for c in summary["comparisons"] if c["buyer"] == POOLED and c["family"] == "rl_vs_base"]
    assert cmp["difference"]["n_seeds"] == 3 and "evaluation noise only" not in cmp["verdict"]


def test_the_page_holds_what_the_browser_test_looks_for_without_a_browser(tmp_path):
    records = synthetic(tmp_path)
    arms = [Arm("base", "hf:base", "base", size=0.135),
            Arm("rl", "hf:rl", "rl", base="base", size=0.135, learning_rate=1e-5, seed=0)]
    build_report([tmp_path / "results.jsonl"], tmp_path / "report", arms=arms, n_boot=300)
    html = (tmp_path / "report" / "report.html").read_text()
    assert '<table id="headline">' in html and "<td>base</td>" in html and "<td>rl</td>" in html
    assert html.count('class="plot"') >= 2 and "data:image/png;base64," in html
    assert html.count('<details class="transcript" id="t') == len(records)
    assert '<details class="transcript" id="t3" data-arm="' in html
    for key in ("arm", "buyer", "scenario"):
        assert f'<select id="f-{key}"><option value="">every {key}</option>' in html
    assert '<span id="shown"></span>' in html
    script = html.split("<script>")[1].split("</script>")[0]
    assert "location.hash" in script and "target.open = true" in script  # report.html#t12 opens transcript 12
    assert "{{" not in html and "{%" not in html  # the template rendered completely
