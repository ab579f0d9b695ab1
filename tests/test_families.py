"""The engine on every family's layout: small random checkpoints built from transformers' own config classes
(``haggler/testing/families.py``), the real SmolLM2 tokenizer, and the real Gemma 3 270M where it is installed.

The parity test is the one that failed before the engine masked in positions and kept KV-shared layers out of
its buffers: Gemma 2/3/4, Mistral and Phi-3 drifted by 0.13 to 0.44 nats past a 16-token window, the KV-shared
Gemma 4 layout crashed in ``_prefill`` and the hub's multimodal class in ``_stop_table``.
"""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from haggler.agents.format.prompts import PromptSettings  # noqa: E402
from haggler.agents.registry import AgentContext, make_agent  # noqa: E402
from haggler.core.protocol import Negotiation, ProtocolConfig  # noqa: E402
from haggler.engine.backends.hf import HFModel  # noqa: E402
from haggler.engine.backends.hf.layout import ModelLayout  # noqa: E402
from haggler.engine.rollout import Game, play_lockstep  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.testing.families import LAYOUTS, WINDOW, small_checkpoint  # noqa: E402
from haggler.testing.parity import ragged_parity  # noqa: E402


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_engine_log_probabilities_are_the_models_across_the_sliding_window(tokenizer, name):
    model = HFModel(name, model=small_checkpoint(name, tokenizer), tokenizer=tokenizer)
    p = ragged_parity(model)
    assert p.longest > 4 * WINDOW and p.tokens > 80
    assert p.max_logprob_gap <= 1e-4, f"{name}: engine log-probabilities drift from a fresh forward by {p.max_logprob_gap}"
    assert p.same_as_alone and p.max_alone_gap <= 1e-4  # lockstep equals one at a time
    assert model.stats["shared_prefix_tokens"] > 0  # the shared start was read once for both sequences


@pytest.mark.parametrize("name", ["gemma4-e2b", "gemma3"])
def test_without_cache_reuse_the_engine_is_the_same_model(tokenizer, name):
    model = HFModel(name, model=small_checkpoint(name, tokenizer), tokenizer=tokenizer, kv_reuse=False)
    p = ragged_parity(model, n=3, rounds=4)
    assert p.max_logprob_gap <= 1e-4 and p.same_as_alone


def test_kv_shared_layers_get_no_buffers_and_the_multimodal_form_reads_its_text_config(tokenizer):
    for name, shared in (("gemma4-e2b", 2), ("gemma4-hub", 2), ("gemma4-31b", 0), ("llama", 0)):
        layout = ModelLayout.of(small_checkpoint(name, tokenizer))
        assert layout.owns_kv.count(False) == shared, name
    hub = ModelLayout.of(small_checkpoint("gemma4-hub", tokenizer))
    assert hub.config.model_type == "gemma4_text" and hub.windows == {"sliding_attention": WINDOW, "full_attention": None}
    assert ModelLayout.of(small_checkpoint("mistral", tokenizer)).windows == {"attention": WINDOW}


def test_a_mask_counted_in_columns_would_fail_this_check():
    """The layout's own masks, on one row with a padding gap between its past and its new chunk: a key's
    visibility follows positions (planted mutation: counting columns instead hides the oldest past tokens)."""
    class Config:
        layer_types = ["sliding_attention"]
        sliding_window = 3

    layout = ModelLayout(Config(), (True,), {"sliding_attention": 3}, False)
    columns = torch.tensor([[1, 1, 1, 0, 0, 1, 1]])  # past at positions 0-2, a gap of 2, chunk at positions 3-4
    positions = torch.tensor([[3, 4]])
    mask = layout.masks(columns, positions, torch.float32)[0, 0] == 0
    # position 3 sees 1, 2, 3; position 4 sees 2, 3, 4 (never the padding)
    assert mask.tolist() == [[False, True, True, False, False, True, False],
                             [False, False, True, False, False, True, True]]


def _play(model, n=4, turns=8):
    ctx = AgentContext(prompt=PromptSettings(message_tokens=0), temperature=1.0, sample_seed=3)
    ctx.models["m"] = model
    games = []
    for i, s in enumerate(generate_scenarios(n, 21, max_turns=turns)):
        neg = Negotiation(s, ProtocolConfig(opener="seller" if i % 2 == 0 else "buyer", max_invalid=99))
        games.append(Game(neg, {"seller": make_agent("hf:m", s, "seller", i, ctx),
                                "buyer": make_agent("scripted:conceder", s, "buyer", i, ctx)}))
    play_lockstep(games)
    return games


def test_the_hubs_multimodal_gemma4_saves_reloads_and_plays_as_a_text_model(tokenizer, tmp_path):
    built = small_checkpoint("gemma4-hub", tokenizer, sharpen=4.0)
    built.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    model = HFModel(str(tmp_path / "m"))
    assert type(model.model).__name__ == "Gemma4ForConditionalGeneration"
    games = _play(model)
    assert all(g.negotiation.ended_by != "error" for g in games), [g.negotiation.error for g in games]
    for g in games:  # every sampled token's log-probability is the model's
        tr = g.agents["seller"].trajectory
        ids = torch.tensor([tr.prompt_ids + tr.completion_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model.model(input_ids=ids).logits[0].float(), -1)
        p = len(tr.prompt_ids)
        gaps = [abs(float(logp[p + j - 1, t]) - lp) for j, (t, m, lp) in
                enumerate(zip(tr.completion_ids, tr.env_mask, tr.logprobs)) if m]
        assert gaps and max(gaps) <= 1e-4
        assert len(ids[0]) > 4 * WINDOW  # the negotiation ran well past the sliding window


def test_a_moe_checkpoint_saved_by_a_trainer_plays(tokenizer, tmp_path):
    """TRL saves MoE models with output_router_logits on (for its auxiliary loss): a warm-started Qwen3-MoE then
    errored on every turn, the load-balancing loss reading the engine's attention masks as padding masks."""
    built = small_checkpoint("qwen3-moe", tokenizer, sharpen=4.0)
    built.config.output_router_logits = True
    built.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    games = _play(HFModel(str(tmp_path / "m")), n=2, turns=4)
    assert all(g.negotiation.ended_by != "error" for g in games), [g.negotiation.error for g in games]


@pytest.mark.slow
def test_the_real_gemma3_270m_is_the_model_across_its_512_token_window(gemma3_model):
    """Google's Gemma 3 270M (window 512), rows of about 500 to 610 tokens extended by ragged turns."""
    p = ragged_parity(gemma3_model, n=3, rounds=4, prompt=490)
    assert p.longest > 512 + 64
    assert p.max_logprob_gap <= 1e-4 and p.same_as_alone


def biased_head(model, tokenizer, allowed=(" 1", " 2", " 3", "1", "2", "3", "\n")):
    """``model`` with an output layer of its own (untied) whose bias leaves only ``allowed`` tokens and the end of
    turn plausible, so that its turns are numbers: offers, accepts and walk-aways all happen and rewards vary."""
    old = model.get_output_embeddings()
    head = torch.nn.Linear(old.in_features, old.out_features, bias=True)
    with torch.no_grad():
        head.weight.copy_(old.weight)
        head.bias.fill_(-30.0)
        head.bias[sorted({i for t in allowed for i in tokenizer.encode(t, add_special_tokens=False)})] = 0.0
        head.bias[tokenizer.eos_token_id] = -4.0
    model.set_output_embeddings(head)
    return model


@pytest.mark.slow
def test_the_hubs_multimodal_gemma4_warm_starts_trains_lora_on_its_language_model_and_reloads(tokenizer, tmp_path):
    """Gemma 4 as the hub ships it, through ``haggler train``'s own path: warm start, a GRPO step with LoRA on
    "all-linear" (which peft would otherwise put on the audio tower's wrapped linear layers), ``final/``
    reloaded as the same class and played, its towers untouched. Then, with a head that makes its rewards vary,
    two GRPO steps move the language model's adapters and nothing else."""
    pytest.importorskip("trl")
    pytest.importorskip("peft")
    import re

    from haggler.training.config import load_config
    from haggler.training.grpo import build_trainer
    from haggler.training.lora import peft_config
    from haggler.training.recipe import run_training

    built = small_checkpoint("gemma4-hub", tokenizer, sharpen=4.0)
    built.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    data = {"model": str(tmp_path / "m"), "output_dir": str(tmp_path / "run"), "dtype": "float32",
            "scenarios": {"n": 4, "seed": 1001, "max_turns": 4},
            "buyers": [{"spec": "scripted:conceder"}, {"spec": "scripted:linear"}],
            "prompt": {"message_tokens": 0, "slot_tokens": 3, "action_tokens": 3},
            "warm_start": {"scenarios": 2, "max_steps": 1, "batch_size": 2}, "lora": {"r": 4, "alpha": 8},
            "grpo": {"learning_rate": 1e-2, "max_steps": 1, "num_generations": 4, "per_device_train_batch_size": 8,
                     "save_steps": 2, "report_to": "none", "use_cpu": True, "bf16": False, "seed": 3}}
    cfg = load_config(data=data)
    pattern = peft_config(cfg, built).target_modules
    adapted = [n for n, _ in built.named_modules() if re.fullmatch(pattern, n)]
    assert adapted and all(n.startswith("model.language_model.layers.") for n in adapted)
    final = run_training(cfg, log=lambda _: None)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(final)
    assert type(reloaded).__name__ == "Gemma4ForConditionalGeneration"
    start, after = built.state_dict(), reloaded.state_dict()
    towers = [k for k in after if "_tower" in k]
    assert towers and all(torch.equal(after[k], start[k]) for k in towers)
    games = _play(HFModel(str(final)), n=2, turns=4)
    assert all(g.negotiation.ended_by != "error" for g in games)

    cfg = load_config(data={**data, "output_dir": str(tmp_path / "varied"), "warm_start": None,
                            "grpo": {**data["grpo"], "max_steps": 2}})
    model = biased_head(small_checkpoint("gemma4-hub", tokenizer, sharpen=4.0), tokenizer)
    trainer = build_trainer(cfg, model, tokenizer)
    peft_model = trainer.accelerator.unwrap_model(trainer.model)
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    trainer.train()
    rewards = [h["reward_std"] for h in trainer.state.log_history if "reward_std" in h]
    assert rewards and max(rewards) > 0  # there was something to learn from
    # (sampling merges the adapters into the base weights and unmerges them after: float rounding, no more)
    moved = {n for n, p in peft_model.named_parameters() if not torch.allclose(before[n], p.detach(), atol=1e-6)}
    assert moved and all("lora_" in n and ".language_model.layers." in n for n in moved)
