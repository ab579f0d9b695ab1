import pytest

transformers = pytest.importorskip("transformers")

from haggler.agents.registry import make_agent  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.agents.format.prompts import PromptSettings  # noqa: E402
from haggler.core.protocol import Negotiation, ProtocolConfig, play  # noqa: E402
from haggler.agents.teacher import render_examples  # noqa: E402
from tests.conftest import mask_runs  # noqa: E402


@pytest.mark.parametrize("settings", [PromptSettings(), PromptSettings(slots="names", message_tokens=0),
                                      PromptSettings(slots="indexed", message_tokens=0),
                                      PromptSettings(cues=False)])
def test_teacher_transcripts_are_the_scripted_negotiation_in_rollout_tokens(tokenizer, settings):
    scenarios = generate_scenarios(3, 44, max_turns=6)
    examples = render_examples(tokenizer, scenarios, "scripted:linear", ["scripted:conceder"], settings)
    assert len(examples) == 6
    for n, (game, tr) in enumerate(examples):
        # the same negotiation as scripted against scripted with the same seeds: every rendered action
        # (message, action word, option numbers or names, in rollout tokens) reads back to the teacher's own
        s = game.negotiation.scenario
        opener = game.negotiation.config.opener
        k = 1000 * (n // 2) + (opener == "buyer")
        reference = Negotiation(s, ProtocolConfig(opener=opener))
        play(reference, make_agent("scripted:linear", s, "seller", k), make_agent("scripted:conceder", s, "buyer", k + 7))
        assert [t.action for t in game.negotiation.turns] == [t.action for t in reference.turns]
        assert game.negotiation.agreement == reference.agreement
        # the trajectory has a rollout's shape: mask and completion aligned, ending on end-of-turn
        assert len(tr.completion_ids) == len(tr.env_mask) == len(tr.logprobs)
        assert tr.completion_ids[-1] == tokenizer.eos_token_id
        texts = [tokenizer.decode(tr.completion_ids[a:b]) for a, b in mask_runs(tr.env_mask)]
        assert texts == [t for t in game.agents["seller"].generated_texts if t]


def test_the_teacher_is_a_sampler_that_gives_the_scripted_sellers_slots(tokenizer):
    from haggler.agents.teacher import TeacherSampler, slot_texts
    from haggler.core.types import Offer, Reply
    from haggler.engine.interfaces import Sampler, Sequence

    s = generate_scenarios(1, 44, max_turns=6)[0]
    offer = Reply("Message: a fair price\nAction: offer", Offer(tuple(0 for _ in s.issues)))
    assert slot_texts(offer, s, PromptSettings()) == [" a fair price\n", " 1\n"] + [" 1\n"] * len(s.issues)
    assert slot_texts(offer, s, PromptSettings(message_tokens=0, actions="words", slots="names")) == (
        [" offer\n"] + [f" {i.options[0]}\n" for i in s.issues])
    sampler = TeacherSampler(tokenizer, "scripted:linear")
    assert isinstance(sampler, Sampler)
    sampler.queue([" 2\n", "Action: accept"], end_turn=True)
    seq = Sequence(ids=[1, 2])
    (first,) = sampler.continue_batch([seq], 6, 1.0)
    (last,) = sampler.continue_batch([seq], 6, 1.0, "")
    assert first.ids == tokenizer.encode(" 2\n", add_special_tokens=False) and first.stopped == "stop"
    assert last.ids[-1] == tokenizer.eos_token_id and last.stopped == "eos" and last.logprobs == [0.0] * len(last.ids)
    assert seq.ids == [1, 2] + first.ids + last.ids  # appended as a model's samples are
    with pytest.raises(RuntimeError, match="no scripted reply"):
        sampler.continue_batch([seq], 6, 1.0)
