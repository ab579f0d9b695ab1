import pytest

transformers = pytest.importorskip("transformers")

from haggler.agents import make_agent  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.agents.format.prompts import PromptSettings  # noqa: E402
from haggler.core.protocol import Negotiation, ProtocolConfig, play  # noqa: E402
from haggler.agents.teacher import render_examples  # noqa: E402
from tests.test_llm import _runs, tokenizer  # noqa: E402,F401


@pytest.mark.parametrize("settings", [PromptSettings(), PromptSettings(slots="names", message_tokens=0),
                                      PromptSettings(slots="indexed", message_tokens=0),
                                      PromptSettings(cues=False)])
def test_teacher_transcripts_are_the_scripted_negotiation_in_rollout_tokens(tokenizer, settings):  # noqa: F811
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
        texts = [tokenizer.decode(tr.completion_ids[a:b]) for a, b in _runs(tr.env_mask)]
        assert texts == [t for t in game.agents["seller"].generated_texts if t]
