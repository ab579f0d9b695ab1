import json
import os
import signal
import subprocess
import sys
import time

import pytest

from haggler.evaluation import runner as evaluate
from haggler.evaluation.runner import run
from haggler.scenarios.generate import generate_scenarios
from haggler.evaluation.grid import GridError, load_grid, make_grid, write_grid
from haggler.evaluation.results import Record, ResultsError, compact, load_results, read_latest, read_records
from haggler.core.scenario import write_scenarios

FIELDS = {
    "cell_id", "scenario_id", "seller", "buyer", "opener", "seed", "deal", "agreement", "ended_by", "turns",
    "seller_utility", "buyer_utility", "seller_score", "pareto_optimal", "nash_distance", "invalid_actions",
    "transcript", "error",
}


@pytest.fixture
def setup(tmp_path):
    scenarios = generate_scenarios(8, 77)
    sp, gp = tmp_path / "scenarios.jsonl", tmp_path / "grid.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], ["scripted:conceder", "scripted:boulware"], ["seller", "buyer"]), gp)
    return sp, gp, tmp_path / "results.jsonl"


def test_the_studys_grid_has_1152_cells_with_stable_seeds(tmp_path):
    ids = [f"s{i}" for i in range(288)]
    cells = make_grid(ids, ["openai:a", "openai:b"], ["seller", "buyer"])
    assert len(cells) == 1152 and len({c.cell_id for c in cells}) == 1152
    again = make_grid(ids[:10], ["openai:a", "openai:b"], ["seller", "buyer"])
    assert {c.cell_id: c.seed for c in again}.items() <= {c.cell_id: c.seed for c in cells}.items()
    assert make_grid(ids, ["x:y"], ["seller"], seed=1)[0].seed != make_grid(ids, ["x:y"], ["seller"], seed=2)[0].seed
    with pytest.raises(GridError, match="openers"):
        make_grid(ids, ["x:y"], ["referee"])
    with pytest.raises(GridError, match="repeated"):
        make_grid(["a", "a"], ["x:y"], ["seller"])
    path = tmp_path / "g.jsonl"
    path.write_text('{"cell_id": "a", "scenario_id": "s", "buyer": "b", "opener": "nobody", "repeat": 0, "seed": 1}\n')
    with pytest.raises(GridError, match=r"g.jsonl:1: field opener"):
        load_grid(path)


def test_run_writes_every_field_once_per_cell(setup):
    sp, gp, out = setup
    report = run(gp, sp, "scripted:linear", out, progress=False)
    assert (report.played, report.skipped, report.errors) == (32, 0, 0)
    records = read_records(out)
    assert len(records) == 32 and len({r.cell_id for r in records}) == 32
    for r in records:
        assert FIELDS <= set(r.model_dump())
        assert r.ended_by in ("accept", "walk_away", "deadline")
        assert r.turns == len(r.transcript)
        assert {t["speaker"] for t in r.transcript} <= {"seller", "buyer"}
        assert r.transcript[0]["speaker"] == r.opener
        if r.deal:
            assert r.seller_score == r.seller_utility and set(r.agreement) == {
                t for t in r.transcript[0]["action"]["offer"]}
    again = run(gp, sp, "scripted:linear", out, progress=False)
    assert (again.played, again.skipped) == (0, 32)
    assert read_records(out) == records


def test_error_records_carry_every_field_and_are_retried(setup, monkeypatch):
    sp, gp, out = setup
    real = evaluate.make_agent

    def flaky(spec, scenario, side, seed, context=None):
        if side == "buyer" and spec == "scripted:boulware":
            raise ConnectionError("buyer endpoint down")
        return real(spec, scenario, side, seed, context)

    monkeypatch.setattr(evaluate, "make_agent", flaky)
    report = run(gp, sp, "scripted:linear", out, progress=False)
    assert report.errors == 16
    errored = [r for r in read_records(out) if r.ended_by == "error"]
    assert len(errored) == 16
    for r in errored:
        assert FIELDS <= set(r.model_dump()) and "buyer endpoint down" in r.error
        assert r.deal is None and r.seller_score is None and r.turns is None
    monkeypatch.setattr(evaluate, "make_agent", real)
    report = run(gp, sp, "scripted:linear", out, progress=False)
    assert (report.played, report.errors) == (16, 0)
    records = read_records(out)
    assert len(records) == 32 and not [r for r in records if r.ended_by == "error"]


def test_half_written_last_line_is_dropped_and_replayed(setup):
    sp, gp, out = setup
    run(gp, sp, "scripted:linear", out, progress=False)
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # a kill mid-write
    assert len(read_records(out)) == 31
    report = run(gp, sp, "scripted:linear", out, progress=False)
    assert report.played == 1 and len(read_records(out)) == 32


def test_a_corrupt_line_in_the_middle_is_an_error_not_data_loss(setup):
    sp, gp, out = setup
    run(gp, sp, "scripted:linear", out, progress=False)
    lines = out.read_text().splitlines(keepends=True)
    lines[3] = "garbage\n"
    out.write_text("".join(lines))
    before = out.read_bytes()
    with pytest.raises(ResultsError, match=r"results.jsonl:4: unreadable"):
        run(gp, sp, "scripted:linear", out, progress=False)
    assert out.read_bytes() == before


def test_later_records_supersede_and_sellers_share_a_file(setup):
    sp, gp, out = setup
    run(gp, sp, "scripted:linear", out, progress=False)
    run(gp, sp, "scripted:boulware", out, progress=False)
    latest = read_latest(out)
    assert len(latest) == 64
    record = next(iter(latest.values())).model_copy(update={"seller_score": -1.0})
    with out.open("a") as fh:
        fh.write(record.to_line() + "\n")
    assert read_latest(out)[(record.seller, record.cell_id)].seller_score == -1.0



def test_records_are_written_back_byte_for_byte_keeping_keys_this_version_does_not_know(setup):
    sp, gp, out = setup
    run(gp, sp, "scripted:linear", out, progress=False)
    before = out.read_bytes()
    assert all(isinstance(r, Record) for r in read_records(out))
    compact(out)
    assert out.read_bytes() == before  # a record's line is exactly json.dumps of its keys, in order
    lines = out.read_text(encoding="utf-8").splitlines()
    old = json.loads(lines[0])
    del old["agents"]  # written before agents were recorded
    old["from_a_newer_version"] = {"kept": ["é", 1.5]}
    lines[0] = json.dumps(old, ensure_ascii=False)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = read_records(out)[0]
    assert first.agents is None and first.from_a_newer_version == {"kept": ["é", 1.5]}
    compact(out)
    assert out.read_text(encoding="utf-8").splitlines() == lines  # nothing added, nothing lost


def test_a_line_that_is_json_but_not_a_record_is_an_error_naming_it(setup):
    sp, gp, out = setup
    run(gp, sp, "scripted:linear", out, progress=False)
    lines = out.read_text().splitlines(keepends=True)
    lines[1] = json.dumps({**json.loads(lines[1]), "seed": "not a number"}) + "\n"
    out.write_text("".join(lines))
    with pytest.raises(ResultsError, match=r"results.jsonl:2: unreadable result record \(seed: "):
        read_records(out)


def test_load_results_takes_the_latest_of_every_file_and_refuses_missing_or_empty_ones(setup):
    sp, gp, out = setup
    run(gp, sp, "scripted:linear", out, progress=False)
    other = out.with_name("other.jsonl")
    run(gp, sp, "scripted:boulware", other, progress=False)
    records = load_results([out, other])
    assert len(records) == 64 and {r.seller for r in records} == {"scripted:linear", "scripted:boulware"}
    with pytest.raises(ValueError, match="no such results file"):
        load_results([out, out.with_name("nope.jsonl")])
    empty = out.with_name("empty.jsonl")
    empty.write_text("")
    with pytest.raises(ValueError, match="hold no records"):
        load_results([empty])


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "haggler.cli", *args], capture_output=True, text=True, **kw)


@pytest.mark.slow
def test_killed_runs_resume_to_every_cell_exactly_once(tmp_path):
    scenarios = generate_scenarios(40, 5)
    sp, gp = tmp_path / "s.jsonl", tmp_path / "g.jsonl"
    write_scenarios(scenarios, sp)
    cells = make_grid([s.id for s in scenarios], ["scripted:conceder", "scripted:tft", "negmas:AspirationNegotiator"],
                      ["seller", "buyer"], repeats=3)
    write_grid(cells, gp)
    args = ["run", "--grid", str(gp), "--scenarios", str(sp), "--seller", "scripted:boulware", "--no-progress"]

    reference = tmp_path / "reference.jsonl"
    assert _cli(*args, "--out", str(reference)).returncode == 0

    out = tmp_path / "killed.jsonl"
    interrupted = 0
    for threshold in (1, 150, 400):
        proc = subprocess.Popen([sys.executable, "-m", "haggler.cli", *args, "--out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            if out.exists() and out.stat().st_size and out.read_bytes().count(b"\n") >= threshold:
                break
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        interrupted += len(read_latest(out)) < len(cells)
    assert interrupted >= 1, "no kill landed mid-run; the test proved nothing"
    assert _cli(*args, "--out", str(out)).returncode == 0
    records = read_records(out)
    assert len(records) == len(cells) and len({r.cell_id for r in records}) == len(cells)
    # scripted and NegMAS agents are seeded per cell and replay in any process (NegMAS's tie-breaking no
    # longer follows the per-process string hash): the resumed run equals an uninterrupted one
    ref = {r.cell_id: r for r in read_records(reference)}
    mine = {r.cell_id: r for r in records}
    assert any(c.buyer.startswith("negmas:") for c in cells)
    assert all(mine[c.cell_id] == ref[c.cell_id] for c in cells)


def test_cli_summary_and_errors(setup):
    sp, gp, out = setup
    r = _cli("run", "--grid", str(gp), "--scenarios", str(sp), "--seller", "scripted:linear", "--out", str(out))
    assert r.returncode == 0, r.stderr
    r = _cli("summary", str(out))
    assert r.returncode == 0 and "scripted:linear" in r.stdout and "scripted:conceder" in r.stdout
    assert "deal rate" in r.stdout
    bad = _cli("run", "--grid", str(gp), "--scenarios", str(sp), "--seller", "scripted:bogus", "--out", str(out))
    assert bad.returncode == 2 and "unknown scripted negotiator" in bad.stderr and "Traceback" not in bad.stderr
    missing = _cli("summary", str(out) + ".nope")
    assert missing.returncode == 2 and "no such results file" in missing.stderr
    grid = _cli("grid", "--scenarios", str(sp), "--buyers", "scripted:tft,scripted:random", "--out", str(gp) + "2")
    assert grid.returncode == 0 and "wrote 32 cells" in grid.stdout
