"""Same inputs, same negotiations: a local model's cells replay exactly, whatever the batch size, the order
or an interruption, because every agent samples from a stream seeded by the run, its cell and its side."""

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from haggler.core.scenario import write_scenarios  # noqa: E402
from haggler.evaluation.grid import make_grid, write_grid  # noqa: E402
from haggler.evaluation.results import read_records  # noqa: E402
from haggler.evaluation.runner import run  # noqa: E402
from haggler.evaluation.settings import RunSettings  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tokenizer):
    """A tiny random model saved as a model folder (so hf:FOLDER loads it as users' models load), and a grid
    of 12 cells against a scripted and a sampling (hf:) buyer."""
    root = tmp_path_factory.mktemp("repro")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    model = transformers.LlamaForCausalLM(config)
    folder = root / "tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    scenarios = generate_scenarios(3, 21, max_turns=4)
    sp, gp = root / "s.jsonl", root / "g.jsonl"
    write_scenarios(scenarios, sp)
    write_grid(make_grid([s.id for s in scenarios], ["scripted:conceder", f"hf:{folder}"], ["seller", "buyer"]), gp)
    return root, sp, gp, f"hf:{folder}"


SETTINGS = RunSettings(prompt={"message_tokens": 6, "slot_tokens": 3, "action_tokens": 3}, max_invalid=9)


def play(setup, name, **settings):
    root, sp, gp, seller = setup
    out = root / f"{name}.jsonl"
    out.unlink(missing_ok=True)
    run(gp, sp, seller, out, settings=SETTINGS.model_copy(update=settings), progress=False)
    return by_cell(out)


def by_cell(path):
    return {r.cell_id: json.loads(r.to_line()) for r in read_records(path)}


def test_a_rerun_gives_identical_records(setup):
    first, second = play(setup, "a"), play(setup, "b")
    assert len(first) == 12 and first == second
    assert all(r["settings"]["sampling"]["seeded"] for r in first.values())
    # the cells really sampled: the model's messages are not all empty
    assert any(t["text"] for r in first.values() for t in r["transcript"] if t["speaker"] == "seller")


def test_batch_size_one_and_sixteen_give_identical_records(setup):
    assert play(setup, "one", batch_size=1) == play(setup, "sixteen", batch_size=16)


def test_a_killed_and_resumed_run_equals_an_uninterrupted_one(setup):
    root, sp, gp, seller = setup
    whole = play(setup, "whole")
    out = root / "killed.jsonl"
    out.unlink(missing_ok=True)
    seen = []

    def kill_after_five(record):
        seen.append(record)
        if len(seen) == 5:
            raise KeyboardInterrupt  # as a user's Ctrl-C: the run stops with five records written

    with pytest.raises(KeyboardInterrupt):
        run(gp, sp, seller, out, settings=SETTINGS, progress=False, on_record=kill_after_five)
    assert len(read_records(out)) == 5
    run(gp, sp, seller, out, settings=SETTINGS, progress=False)
    assert by_cell(out) == whole


def test_the_seed_decides_the_samples(setup):
    """The comparisons above would pass vacuously if the model sampled nothing that varies: another seed,
    or no seeding at all, changes the transcripts."""
    base = play(setup, "base")
    other = play(setup, "other", sample_seed=1)
    unseeded = [play(setup, f"free{i}", sample_seed=None) for i in range(2)]

    def texts(records):
        return {c: [t["text"] for t in r["transcript"]] for c, r in records.items()}

    assert texts(base) != texts(other)
    assert texts(unseeded[0]) != texts(unseeded[1])
    assert all(not r["settings"]["sampling"]["seeded"] for r in unseeded[0].values())
