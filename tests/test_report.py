"""The report from results files: figures that match the records, verdicts that say what the data show."""

import csv
import json

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("statsmodels")

from haggler.study.report import build_report  # noqa: E402
from haggler.study.report.assemble import POOLED  # noqa: E402
from haggler.study.config import Arm  # noqa: E402
from tests.conftest import synthetic  # noqa: E402


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
    # each seed's own evaluation interval, beside the spread between seeds
    assert set(rl["seed_ci_halfwidth"]) == {"0", "1", "2"} and all(h > 0 for h in rl["seed_ci_halfwidth"].values())
    md = (tmp_path / "report" / "report.md").read_text()
    assert "sd between seeds" in md and f"half-width of {rl['evaluation_halfwidth']:.3f}" in md
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


def test_learning_curves_read_validation_with_its_band(tmp_path):
    """The band of a validation curve is the step-0 score plus the paired interval of the change."""
    from haggler.study.report.assemble import ArmInfo
    from haggler.study.report.plots import plot_training, rollout_scores, validation_bands

    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": 1, "reward": 0.3}, {"step": 0, "validation/score": 0.40, "validation/score_change": 0.0,
                                         "validation/score_change_low": 0.0, "validation/score_change_high": 0.0},
            {"step": 2, "validation/score": 0.46, "validation/score_change": 0.06,
             "validation/score_change_low": 0.01, "validation/score_change_high": 0.10}]
    (run / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = {"rl": ArmInfo("rl", kind="rl", train_dirs=[str(run)])}
    (band,) = validation_bands(table).values()
    assert band[0] == (0, 0.40, 0.40, 0.40)
    assert band[1][0] == 2 and band[1][2:] == pytest.approx((0.41, 0.50))
    assert plot_training(table, tmp_path / "curves.png") and (tmp_path / "curves.png").stat().st_size > 0
    # the rollouts' curve is their seller score where logged (an arm trained on reward: outcome logs +-1 as reward),
    # an older log's reward otherwise
    old = tmp_path / "old"
    old.mkdir()
    (old / "train_log.jsonl").write_text(json.dumps({"step": 1, "reward": 0.3}) + "\n")
    (run / "train_log.jsonl").write_text(json.dumps({"step": 1, "reward": 1.0, "negotiation/seller_score": 0.52}) + "\n")
    table["old"] = ArmInfo("old", kind="rl", train_dirs=[str(old)])
    assert rollout_scores(table) == {"rl (run)": [(1, 0.52)], "old (old)": [(1, 0.3)]}


def test_the_report_says_when_comparisons_share_the_buyers_random_streams():
    from haggler.evaluation.results import Record
    from haggler.evaluation.settings import RunSettings
    from haggler.study.report.assemble import sampling_notes

    def record(seed, backend="scripted", temperature=1.0, seller="x"):
        return Record(cell_id="c", scenario_id="s", seller=seller, buyer="b", opener="seller", seed=1, deal=None,
                      agreement=None, ended_by="deadline", walked_away_by=None, turns=2, seller_utility=None,
                      buyer_utility=None, seller_score=0.5, seller_advantage=None, pareto_optimal=None,
                      nash_distance=None, individually_irrational=None, invalid_actions={}, transcript=[],
                      error=None, settings=RunSettings(sample_seed=seed, temperature=temperature).to_json(),
                      agents={"buyer": {"backend": backend}})

    note, temperature = sampling_notes([record(0), record(0)])
    assert "common random numbers" in note
    assert "Only 1 of 2 cells" in sampling_notes([record(0), record(None)])[0]
    assert any("not guaranteed reproducible" in n for n in sampling_notes([record(0, "openai")]))
    # the grid's sampling temperature is stated with the figures; arms played at different ones are named
    assert "temperature 1 in every cell" in temperature
    assert "temperature 0.3 in every cell" in sampling_notes([record(0, temperature=0.3)])[1]
    mixed = sampling_notes([record(0, temperature=0.3, seller="rl"), record(0, seller="base")])[1]
    assert "0.3 for rl; 1 for base" in mixed


def test_the_no_deal_arm_scores_every_cell_at_the_reservation_and_arms_report_surplus_good_deals_and_losses(tmp_path):
    """A real grid: scripted:no-deal (the study's no-deal reference arm) against scripted:linear; every arm's
    surplus over no deal is its score minus its reservation, and the no-deal arm's is 0 with no deal at all."""
    from haggler.core.scenario import write_scenarios
    from haggler.evaluation.grid import make_grid, write_grid
    from haggler.evaluation.results import read_records
    from haggler.evaluation.runner import run
    from haggler.scenarios.generate import generate_scenarios

    scenarios = generate_scenarios(6, 41, max_turns=6)
    write_scenarios(scenarios, tmp_path / "s.jsonl")
    write_grid(make_grid([s.id for s in scenarios], ["scripted:conceder", "scripted:boulware"], ["seller", "buyer"]),
               tmp_path / "grid.jsonl")
    reservation = {s.id: s.seller.reservation for s in scenarios}
    for seller in ("scripted:no-deal", "scripted:linear", "scripted:random"):
        run(tmp_path / "grid.jsonl", tmp_path / "s.jsonl", seller, tmp_path / "results.jsonl")
    records = read_records(tmp_path / "results.jsonl")
    nodeal = [r for r in records if r.seller == "scripted:no-deal"]
    assert len(nodeal) == 24 and not any(r.deal for r in nodeal)
    assert all(r.seller_score == reservation[r.scenario_id] and r.seller_surplus == 0.0 for r in nodeal)
    for r in records:
        assert r.seller_surplus == pytest.approx((r.seller_utility if r.deal else reservation[r.scenario_id])
                                                 - reservation[r.scenario_id])
        assert r.good_deal == bool(r.deal and r.seller_surplus > 0)
    summary = build_report([tmp_path / "results.jsonl"], tmp_path / "report", n_boot=300)
    pooled = summary["per_buyer"][POOLED]
    assert pooled["scripted:no-deal"]["surplus"]["estimate"] == 0.0
    assert pooled["scripted:no-deal"]["good_deal_rate"] == 0.0 and pooled["scripted:no-deal"]["loss_rate"] == 0.0
    linear = [r for r in records if r.seller == "scripted:linear"]
    assert pooled["scripted:linear"]["surplus"]["estimate"] == pytest.approx(
        sum(r.seller_surplus for r in linear) / len(linear))
    assert pooled["scripted:linear"]["good_deal_rate"] == sum(r.good_deal for r in linear) / len(linear) > 0
    assert pooled["scripted:linear"]["loss_rate"] == 0.0  # AC_next never accepts below its reservation
    md = (tmp_path / "report" / "report.md").read_text()
    assert "surplus over no deal" in md and "good deals" in md
    rows = list(csv.DictReader(open(tmp_path / "report" / "tables" / "arms.csv")))
    assert {"surplus", "good_deal_rate", "loss_rate"} <= set(rows[0])


def test_a_study_plans_the_no_deal_arm_unless_told_not_to(tmp_path):
    from haggler.study.config import load_study, plan_arms

    (tmp_path / "train.yaml").write_text("model: default\noutput_dir: x\n")
    body = ("name: s\noutput_dir: out\ntraining: train.yaml\nbases: [{name: b, model: default}]\n"
            "buyers: [{spec: 'scripted:tft', family: a}, {spec: 'scripted:boulware', family: b}]\n")
    (tmp_path / "study.yaml").write_text(body)
    arms, _ = plan_arms(load_study(tmp_path / "study.yaml"))
    assert [(a.name, a.spec, a.kind) for a in arms if a.kind == "reference"] == [("no-deal", "scripted:no-deal",
                                                                                   "reference")]
    (tmp_path / "study.yaml").write_text(body + "no_deal_arm: false\n")
    arms, _ = plan_arms(load_study(tmp_path / "study.yaml"))
    assert not [a for a in arms if a.kind == "reference"]


def test_the_report_says_whether_each_rl_arms_kept_step_beat_step_zero_on_validation(tmp_path):
    synthetic(tmp_path, gain=0.1)
    runs = {}
    for name, changes, selected in (("flat", [0.0, 0.01, -0.004], None), ("better", [0.0, 0.02, 0.05], 1)):
        d = tmp_path / name
        (d / "final").mkdir(parents=True)
        lines = [{"step": s, "validation/score": 0.4 + c, "validation/score_change": c,
                  "validation/score_change_low": c - 0.015, "validation/score_change_high": c + 0.015,
                  "validation/negotiations": 40, "rows": []} for s, c in enumerate(changes)]
        (d / "validation.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        (d / "final" / "haggler-model.json").write_text(json.dumps({"selected": {"step": selected}} if selected else {}))
        runs[name] = str(d)
    arms = [Arm("base", "hf:base", "base"),
            Arm("rl", "hf:rl", "rl", base="base", learning_rate=1e-5, seed=0, train_dir=runs["flat"]),
            Arm("rl2", "hf:rl-2", "rl", base="base", learning_rate=3e-5, seed=0, train_dir=runs["better"])]
    summary = build_report([tmp_path / "results.jsonl"], tmp_path / "report", arms=arms, n_boot=200)
    by_arm = {v["arm"]: v for v in summary["validation"]}
    assert by_arm["rl"]["step"] == 2 and by_arm["rl"]["selected_by"] == "last" and not by_arm["rl"]["beat_step0"]
    assert by_arm["rl2"]["step"] == 1 and by_arm["rl2"]["selected_by"] == "best" and by_arm["rl2"]["beat_step0"]
    md = (tmp_path / "report" / "report.md").read_text()
    assert "it did not beat step 0" in md and "it beat step 0" in md
    assert "did not beat step 0" in (tmp_path / "report" / "report.html").read_text()
