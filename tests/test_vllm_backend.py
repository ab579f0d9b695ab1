"""The vLLM rollout backend against stand-ins with vLLM's and TRL's VLLMClient's output shapes (no GPU here)."""

import sys
import types
from dataclasses import dataclass

import pytest

transformers = pytest.importorskip("transformers")

from haggler.agents.llm import HFAgent  # noqa: E402
from haggler.engine.interfaces import Sequence  # noqa: E402
from haggler.engine.backends.vllm import VLLMModel, colocated_generate, server_generate  # noqa: E402
from haggler.scenarios.generate import generate_scenarios  # noqa: E402
from haggler.agents.format.prompts import PromptSettings  # noqa: E402
from haggler.core.protocol import Negotiation, ProtocolConfig  # noqa: E402
from tests.conftest import mask_runs  # noqa: E402


@dataclass
class Logprob:
    logprob: float


class FakeLLM:
    """Answers every prompt with a fixed text, as ``vllm.LLM.generate`` shapes it (ignoring stop strings,
    so that the adapter's own cut is what is tested)."""

    def __init__(self, tokenizer, text):
        self.ids = tokenizer.encode(text, add_special_tokens=False)
        self.calls = []

    def generate(self, prompts, sampling_params, use_tqdm):
        self.calls.append((prompts, sampling_params))
        outs = []
        for p, sp in zip(prompts, sampling_params):
            ids = self.ids[: sp.max_tokens]
            c = types.SimpleNamespace(token_ids=ids, logprobs=[{t: Logprob(-0.5 - k)} for k, t in enumerate(ids)])
            outs.append(types.SimpleNamespace(outputs=[c]))
        return outs


@pytest.fixture
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")

    class SamplingParams:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    mod.SamplingParams = SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", mod)


def test_colocated_rows_stop_like_the_hf_sampler(tokenizer, fake_vllm):  # noqa: F811
    llm = FakeLLM(tokenizer, " 2\nand more text")
    model = VLLMModel("policy", tokenizer, colocated_generate(llm), [tokenizer.eos_token_id])
    seqs = [Sequence(ids=[1, 2, 3]), Sequence(ids=[4, 5])]
    samples = model.continue_batch(seqs, [8, 1], 0.7, "\n")
    assert tokenizer.decode(samples[0].ids) == " 2\n" and samples[0].stopped == "stop"
    assert len(samples[1].ids) == 1 and samples[1].stopped == "length"
    assert samples[0].logprobs == [-0.5 - k for k in range(len(samples[0].ids))]
    assert seqs[0].ids == [1, 2, 3, *samples[0].ids]
    params = llm.calls[0][1]
    assert [p.max_tokens for p in params] == [8, 1]
    assert all(p.temperature == 0.7 and p.top_k == 0 and p.top_p == 1.0 and p.logprobs == 0 for p in params)


def test_server_rows_are_cut_to_their_own_budget_and_end_of_turn(tokenizer):  # noqa: F811
    eos = tokenizer.eos_token_id
    ids = tokenizer.encode(" walk", add_special_tokens=False) + [eos, 7, 8]

    class Client:
        def generate(self, prompts, **kw):
            self.kw = kw
            return {"prompt_ids": prompts, "completion_ids": [ids] * len(prompts),
                    "logprobs": [[[-1.0]] * len(ids)] * len(prompts)}

    client = Client()
    model = VLLMModel("policy", tokenizer, server_generate(client), [eos])
    a, b = model.continue_batch([Sequence(ids=[1]), Sequence(ids=[2])], [10, 2], 1.0, "\n")
    assert a.ids[-1] == eos and a.stopped == "eos" and a.logprobs == [-1.0] * len(a.ids)
    assert len(b.ids) == 2 and client.kw["max_tokens"] == 10 and client.kw["top_k"] == 0


def test_an_agent_plays_on_vllm_with_the_same_trajectory_rules(tokenizer, fake_vllm):  # noqa: F811
    s = generate_scenarios(1, 3, max_turns=4)[0]
    model = VLLMModel("policy", tokenizer, colocated_generate(FakeLLM(tokenizer, " 3\n")), [tokenizer.eos_token_id])
    agent = HFAgent(model, s, "seller", PromptSettings(message_tokens=0), 1.0, "vllm:policy")
    reply = agent.respond(Negotiation(s, ProtocolConfig(opener="seller")))
    assert type(reply.action).__name__ == "WalkAway"
    tr = agent.trajectory
    assert len(tr.completion_ids) == len(tr.env_mask) == len(tr.logprobs)
    assert [tokenizer.decode(tr.completion_ids[a:b]) for a, b in mask_runs(tr.env_mask)] == [" 3\n"]
