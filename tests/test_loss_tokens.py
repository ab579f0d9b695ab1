"""The update projects only the loss's tokens (``haggler/training/loss_tokens.py``) and computes exactly what TRL's
fused head computes there: the same log-probabilities, entropies and gradients, and the same trained model.

Planted mutations that fail these tests (closing note of issue 12): the completion mask laid one position early
(``scored[:, -C - 1:-1]``), and the soft cap left out of the kernel call.
"""

import inspect

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

from trl.trainer.utils import add_fused_lm_head  # noqa: E402

from haggler.training import loss_tokens  # noqa: E402
from haggler.training.loss_tokens import loss_mask, score_loss_tokens_only, why_not_compact  # noqa: E402
from tests.conftest import biased_tiny_model  # noqa: E402
from tests.test_train import Recorder, config  # noqa: E402

VOCAB = 300
TEMPERATURE = 0.7


def tiny(kind: str):
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256)
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    else:  # Gemma's head soft-caps its logits; the weights are scaled up so that the cap bites
        model = transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
            **common, head_dim=8, final_logit_softcapping=5.0, attn_implementation="eager"))
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(40)
    return model


def batch():
    """Three rows as TRL lays them out: prompts padded on the left, completions on the right, and a loss mask
    with holes (the buyer's turns inside the seller's completion)."""
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(1, VOCAB, (3, 6), generator=g)
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]])
    completion = torch.randint(1, VOCAB, (3, 9), generator=g)
    completion_mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3, [1] * 4 + [0] * 5])
    env = torch.tensor([[1, 1, 0, 0, 0, 1, 1, 0, 1], [1, 0, 0, 1, 1, 1, 1, 1, 1], [0, 1, 1, 0, 1, 1, 1, 1, 1]])
    ids = torch.cat([prompt, completion], 1)
    attention = torch.cat([prompt_mask, completion_mask], 1)
    labels = ids.masked_fill(attention == 0, -100)  # as TRL's _get_per_token_logps_and_entropies builds them
    labels[:, :-completion.shape[1]] = -100
    return ids, attention, labels, completion_mask * env


@pytest.mark.parametrize("kind", ["llama", "gemma2"])
def test_the_loss_tokens_get_trls_log_probabilities_entropies_and_gradients(kind):
    model = tiny(kind)
    add_fused_lm_head(model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))  # what GRPOTrainer does
    assert score_loss_tokens_only(model, TEMPERATURE)
    ids, attention, labels, mask = batch()
    n = mask.shape[1]
    weights = torch.linspace(-1, 2, mask.numel()).view(mask.shape)  # a loss that tells the tokens apart

    def run(compact: bool):
        model.zero_grad(set_to_none=True)
        if compact:
            with loss_mask(mask):
                out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
        else:  # outside a loss: TRL's forward, every position projected
            out = model(input_ids=ids, attention_mask=attention, labels=labels, fused_lm_head=True)
        logps, entropy = out.log_probs[:, -n:], out.entropy[:, -n:]
        ((logps * weights * mask).sum() + (entropy * mask).sum()).backward()
        grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
        return logps.detach(), entropy.detach(), grads

    logps, entropy, grads = run(False)
    c_logps, c_entropy, c_grads = run(True)
    on = mask.bool()
    assert torch.allclose(c_logps[on], logps[on], atol=1e-5, rtol=1e-5)
    assert torch.allclose(c_entropy[on], entropy[on], atol=1e-5, rtol=1e-5)
    assert (c_logps[~on] == 0).all() and (c_entropy[~on] == 0).all()  # left out, never read by the masked loss
    assert (logps[~on & (labels[:, -n:] != -100)] != 0).any()  # TRL's path did project them
    assert grads.keys() == c_grads.keys() and len(grads) > 5
    for k in grads:  # float rounding only: the summation order differs (the logits reach 300 here)
        assert (c_grads[k] - grads[k]).abs().max() <= 1e-5 * grads[k].abs().max() + 1e-7, k
    # the check has teeth: the cap changes the answer where it is on
    if kind == "gemma2":
        assert (logps[on] - torch.log_softmax(model.get_output_embeddings()(
            model.base_model(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]).float()
            / TEMPERATURE, -1)[:, -n:].gather(-1, ids[:, -n:, None]).squeeze(-1)[on]).abs().max() > 1e-2


def test_heads_it_does_not_repeat_keep_trls_forward():
    assert why_not_compact(transformers.LlamaConfig()) is None
    assert why_not_compact(transformers.Gemma2Config()) is None  # soft cap: repeated
    assert "logits_scaling" in why_not_compact(transformers.GraniteConfig(logits_scaling=8.0))
    assert "experts" in why_not_compact(transformers.MixtralConfig())  # its router loss is on by its coefficient
    model = transformers.GraniteForCausalLM(transformers.GraniteConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, logits_scaling=8.0))
    forward = model.forward
    assert not score_loss_tokens_only(model, 1.0) and model.forward == forward


def test_the_wrapped_forward_keeps_the_models_signature_for_generate():
    model = tiny("llama")
    add_fused_lm_head(model, temperature=1.0)
    before = inspect.signature(model.forward)
    assert score_loss_tokens_only(model, 1.0)
    assert inspect.signature(model.forward) == before and "attention_mask" in before.parameters
    out = model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=3, do_sample=False)  # outside a loss: TRL's
    assert out.shape == (1, 6)


@pytest.mark.parametrize("lora,iterations", [(None, 1), ({"r": 4, "alpha": 8}, 1), (None, 2)])
def test_training_with_the_compact_head_makes_the_same_model(tokenizer, tmp_path, monkeypatch, lora, iterations):
    """Two GRPO steps of real negotiations, TRL's head against the compact one: the same rewards, the same
    entropy, the same weights; and the compact head projected exactly the seller's sampled tokens. With two
    iterations per rollout TRL computes old log-probabilities itself, over every position."""
    from haggler.training.grpo import build_trainer, training_tasks

    projected = []
    apply = loss_tokens.ChunkedLogProbFunction.apply

    def counting(hidden, *args):
        if loss_tokens._LOSS_MASK.get() is not None:  # in the loss (TRL's old log-probabilities are not)
            projected.append(hidden.shape[0])
        return apply(hidden, *args)

    monkeypatch.setattr(loss_tokens.ChunkedLogProbFunction, "apply", counting)  # TRL's class: both heads use it
    runs = {}
    for compact in (False, True):
        cfg = config(tmp_path / str(compact), lora=lora, grpo={"per_device_train_batch_size": 4,
                                                               "gradient_accumulation_steps": 2,
                                                               "num_iterations": iterations})
        tasks = training_tasks(cfg)
        rollout = Recorder(cfg, tasks)
        trainer = build_trainer(cfg, biased_tiny_model(tokenizer), tokenizer, tasks, rollout=rollout,
                                loss_tokens_only=compact)
        assert getattr(trainer, "compact_head", False) is compact
        projected.clear()
        trainer.train()
        model = trainer.accelerator.unwrap_model(trainer.model)
        runs[compact] = {
            "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "entropy": [h["entropy"] for h in trainer.state.log_history if "entropy" in h],
            "rewards": [c["out"]["seller_score"] for c in rollout.calls],
            "sampled": sum(sum(m) for c in rollout.calls for m in c["out"]["env_mask"]),
            "projected": sum(projected),
        }
    before, after = runs[False], runs[True]
    assert after["rewards"] == before["rewards"] and len(after["rewards"]) == 2 // iterations
    assert after["entropy"] == pytest.approx(before["entropy"], abs=1e-5)
    assert after["projected"] == iterations * after["sampled"] > 0  # exactly the seller's sampled tokens
    assert before["projected"] == 0  # TRL's head never sees a loss mask
    fresh = biased_tiny_model(tokenizer).state_dict()
    changed = 0
    for k, v in after["weights"].items():
        assert torch.allclose(v, before["weights"][k], atol=1e-6), k
        base = fresh.get(k.replace("base_model.model.", "").replace(".base_layer", ""))
        changed += base is not None and v.shape == base.shape and not torch.equal(v, base)
    if lora is None:  # full fine-tuning: the steps moved the weights both runs agree on
        assert changed > 0
    else:  # LoRA: the adapters moved (B starts at zero)
        assert any(k.endswith("lora_B.default.weight") and v.abs().max() > 0 for k, v in after["weights"].items())
