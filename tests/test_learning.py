"""GRPO learns, not only moves weights: on a task where one action is plainly the best, a few steps raise
the tiny policy's probability of that action and the mean reward the engine scores.

The task: the buyer opens with the outcome that is best for both sides (their preferences agree), and the
seller has one turn, the last. Accepting scores 1.0; anything else (an offer nobody can answer, walking away,
an unreadable answer) ends without a deal and scores the seller's reservation value, 0.2. With one-token
slots the seller's action is exactly its first sampled token, so the probability of "accept" is read off the
model's next-token distribution at the action cue, in the very context the agent builds.

The test is sensitive to the two ways a GRPO pipeline most easily trains the wrong thing without crashing:
an advantage of the wrong sign (the reward negated) pushes "accept" down, and a loss mask one token off
trains the token after the answer instead of the answer.
"""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("trl")

from haggler.agents.format.parse import read_action_slot  # noqa: E402
from haggler.agents.llm import HFAgent  # noqa: E402
from haggler.agents.registry import make_agent  # noqa: E402
from haggler.core.protocol import Negotiation, ProtocolConfig  # noqa: E402
from haggler.core.scenario import Issue, Preferences, Scenario, write_scenarios  # noqa: E402
from haggler.engine.backends.hf import HFModel  # noqa: E402
from haggler.training.common import training_format  # noqa: E402
from haggler.training.config import load_config  # noqa: E402
from haggler.training.grpo import NegotiationRollout, build_trainer, training_tasks  # noqa: E402
from tests.conftest import biased_tiny_model  # noqa: E402

RESERVATION = 0.2
EVAL_GAMES = 32  # per task, before and after training


def agreeing_scenario(sid: str, thing: str) -> Scenario:
    """Both sides like blue best: the buyer's opening offer (its own best) is the seller's best too."""
    values = {"red": 0.0, "green": 0.3, "blue": 1.0}
    return Scenario(
        id=sid, context=f"a {thing}", issues=(Issue(name="colour", options=("red", "green", "blue")),),
        seller=Preferences(weights={"colour": 1.0}, values={"colour": values}, reservation=RESERVATION),
        buyer=Preferences(weights={"colour": 1.0}, values={"colour": values}, reservation=RESERVATION),
        max_turns=2,  # the buyer opens, the seller answers: the seller's one turn is the last
    )


def config(tmp_path):
    path = tmp_path / "scenarios.jsonl"
    write_scenarios([agreeing_scenario("lamp", "blue lamp"), agreeing_scenario("mug", "blue mug")], path)
    return load_config(data={
        "model": "default", "output_dir": str(tmp_path / "out"), "dtype": "float32",
        "scenarios": {"file": str(path)}, "buyers": [{"spec": "scripted:conceder"}], "opener": "buyer",
        "prompt": {"message_tokens": 0, "actions": "numbers", "slots": "numbers", "action_tokens": 1,
                   "slot_tokens": 1},
        "grpo": {"learning_rate": 1e-2, "max_steps": 3, "num_generations": 4, "per_device_train_batch_size": 8,
                 "save_steps": 1000, "report_to": "none", "use_cpu": True, "bf16": False, "seed": 3}})


def accept_ids(tokenizer) -> list[int]:
    """Every token that, as the whole one-token action answer, the agent reads as "accept"."""
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    return [i for i, t in enumerate(texts) if read_action_slot(t, True)[0] == "accept"]


def accept_probability(policy, cfg, task, accepting: list[int]) -> float:
    """The policy's probability of answering "accept" at its first action cue, in the context the agent
    builds itself (system prompt, the buyer's opening offer, the action cue): the agent plays the turn,
    and the context is its sequence up to its first sampled token."""
    neg = Negotiation(task.scenario, ProtocolConfig(opener=task.opener))
    neg.step(make_agent(task.buyer, task.scenario, "buyer", task.buyer_seed).respond(neg))
    seller = HFAgent(policy, task.scenario, "seller", training_format(cfg), 1.0, "hf:tiny")
    seller.sample_seed = 0
    seller.respond(neg)
    tr = seller.trajectory
    context = tr.prompt_ids + tr.completion_ids[:tr.env_mask.index(1)]
    with torch.no_grad():
        logits = policy.model(torch.tensor([context])).logits[0, -1].float()
    return torch.softmax(logits, -1)[accepting].sum().item()


def measure(policy, cfg, tasks, accepting) -> tuple[float, float]:
    """(mean probability of accepting, mean seller score of EVAL_GAMES engine-played games per task). The
    games' sellers sample from the same seeded streams at every call (common random numbers)."""
    prob = sum(accept_probability(policy, cfg, t, accepting) for t in tasks) / len(tasks)
    out = NegotiationRollout(cfg, tasks).play(policy, [t.key for t in tasks for _ in range(EVAL_GAMES)], 1.0, "eval")
    # the task's promise: accepting scores 1.0; anything else ends without a deal at the reservation value
    assert all(s == (1.0 if d else RESERVATION) for s, d in zip(out["seller_score"], out["deal"]))
    return prob, sum(out["seller_score"]) / len(out["seller_score"])


@pytest.mark.slow
def test_a_few_grpo_steps_raise_the_probability_of_the_better_action_and_the_mean_reward(tmp_path, tokenizer):
    cfg = config(tmp_path)
    tasks = training_tasks(cfg)
    assert {t.opener for t in tasks} == {"buyer"} and len(tasks) == 2
    accepting = accept_ids(tokenizer)
    assert "2" in {tokenizer.decode([i]) for i in accepting}  # the tiny model's one plausible accepting token
    model = biased_tiny_model(tokenizer)
    policy = HFModel("tiny", model=model, tokenizer=tokenizer)  # samples from (and reads) the very weights trained
    p0, r0 = measure(policy, cfg, tasks, accepting)

    trainer = build_trainer(cfg, model, tokenizer, tasks, rollout=NegotiationRollout(cfg, tasks))
    trainer.train()
    assert trainer.state.global_step == cfg.grpo.max_steps
    model.eval()
    assert policy.model is model
    p1, r1 = measure(policy, cfg, tasks, accepting)
    print(f"P(accept) {p0:.3f} -> {p1:.3f}; mean reward {r0:.3f} -> {r1:.3f}")

    # The better action became much more likely: the probability of any other answer at least halved
    # (measured here: P(accept) 0.22 -> 0.91, and 0.41 -> 0.84 with other seeds; with the advantage's sign
    # flipped it falls to 0.02, with the loss mask one token late it drifts to 0.29)...
    assert 1 - p1 < (1 - p0) / 2, (p0, p1)
    # ...and the engine-scored games pay more: their shortfall from the best score, 1.0, at least halved
    # (measured: 0.35 -> 0.89, and 0.56 -> 0.88; sign flipped 0.21, mask late 0.38)
    assert 1 - r1 < (1 - r0) / 2, (r0, r1)
