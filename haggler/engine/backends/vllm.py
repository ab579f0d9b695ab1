"""The policy served by vLLM during GRPO training, behind the same ``continue_batch`` API as ``HFModel``.

TRL owns the vLLM engine (``use_vllm: true`` in the training config): colocated in the training process
(``vllm_mode: colocate``) or a separate ``trl vllm-serve`` process (``vllm_mode: server``), and it syncs
the trained weights into it before each rollout. This adapter only continues token sequences with it,
so the negotiation engine, the agents and the trajectories are exactly those of the CPU path.

Sampling follows the same rules as ``HFModel``: the configured temperature, top-k and top-p off, a slot
ends on the first token whose text holds a stop character or on an end-of-turn token, and the sampler's
log-probability of every sampled token is returned. Each rank talks to vLLM on its own (no collective
call per turn), so ranks that play different numbers of turns cannot deadlock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from haggler.engine.chat import end_of_turn_ids
from haggler.engine.interfaces import Sample, Sequence

# (prompts as token ids, per-row budgets, temperature, stop characters) -> per row (token ids, logprobs)
GenerateFn = Callable[[list[list[int]], list[int], float, str], list[tuple[list[int], list[float]]]]


class VLLMModel:
    def __init__(self, name: str, tokenizer: Any, generate: GenerateFn, eos_ids: list[int]) -> None:
        self.name = name
        self.tokenizer = tokenizer
        self.model = None  # no torch module to switch between train and eval
        self._generate = generate
        self.eos_ids = sorted(set(eos_ids))
        self._stop_pieces: dict[str, set[int]] = {}
        self.stats = {"calls": 0, "prompt_tokens": 0, "generated_tokens": 0}

    @classmethod
    def from_trainer(cls, trainer: Any) -> VLLMModel:
        gen = trainer.vllm_generation
        tok = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        eos = [*end_of_turn_ids(model.generation_config, tok), *getattr(trainer, "eos_token_ids", [])]
        if gen.mode == "colocate":
            if getattr(gen, "tensor_parallel_size", 1) > 1:
                raise ValueError("grpo: colocated vLLM with tensor parallelism is not supported for negotiation "
                                 "rollouts (turns differ per rank); use vllm_mode: server")
            fn = colocated_generate(gen.llm)
        else:
            fn = server_generate(gen.vllm_client)
        name = getattr(model, "name_or_path", "") or "policy"
        return cls(name, tok, fn, [e for e in eos if e is not None])

    def describe(self) -> dict[str, Any]:
        return {"backend": "vllm", "model": self.name}

    def _stops(self, stop_chars: str) -> set[int]:
        """Token ids whose text holds a stop character (computed once per stop string)."""
        if stop_chars not in self._stop_pieces:
            pieces = self.tokenizer.batch_decode([[i] for i in range(len(self.tokenizer))]) if stop_chars else []
            self._stop_pieces[stop_chars] = {i for i, p in enumerate(pieces) if any(c in p for c in stop_chars)}
        return self._stop_pieces[stop_chars]

    def continue_batch(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
                       stop_chars: str = "\n", generator: Any = None,
                       stop_ids: frozenset[int] = frozenset()) -> list[Sample]:
        if not seqs:
            return []
        budgets = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(seqs)
        results = self._generate([list(s.ids) for s in seqs], budgets, temperature, stop_chars)
        stops, eos = self._stops(stop_chars) | stop_ids, set(self.eos_ids)
        out = []
        for seq, budget, (ids, lps) in zip(seqs, budgets, results):
            ids, lps = list(ids)[:budget], list(lps)[:budget]
            stopped = "length"
            for j, t in enumerate(ids):  # the same rule as HFModel: the first stop or end-of-turn token ends it
                if t in eos or t in stops:
                    ids, lps, stopped = ids[: j + 1], lps[: j + 1], "eos" if t in eos else "stop"
                    break
            self.stats["calls"] += 1
            self.stats["prompt_tokens"] += len(seq.ids)
            self.stats["generated_tokens"] += len(ids)
            seq.extend(ids)
            out.append(Sample(ids=ids, logprobs=[float(x) for x in lps], stopped=stopped))
        return out


def colocated_generate(llm: Any) -> GenerateFn:
    """A ``vllm.LLM`` in this process: one ``generate`` call, one ``SamplingParams`` per row (own budget)."""

    def generate(prompts: list[list[int]], budgets: list[int], temperature: float,
                 stop_chars: str) -> list[tuple[list[int], list[float]]]:
        from vllm import SamplingParams  # here: vLLM is installed only where training runs on a GPU

        params = [SamplingParams(n=1, temperature=temperature, top_k=0, top_p=1.0, max_tokens=b, logprobs=0,
                                 stop=list(stop_chars) or None, include_stop_str_in_output=True) for b in budgets]
        outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], sampling_params=params, use_tqdm=False)
        rows = []
        for o in outputs:
            c = o.outputs[0]
            lps = [step[t].logprob for t, step in zip(c.token_ids, c.logprobs or [])]
            rows.append((list(c.token_ids), lps))
        return rows

    return generate


def server_generate(client: Any) -> GenerateFn:
    """A ``trl vllm-serve`` server through TRL's ``VLLMClient``: one request for the batch, the longest budget,
    each row cut to its own afterwards."""

    def generate(prompts: list[list[int]], budgets: list[int], temperature: float,
                 stop_chars: str) -> list[tuple[list[int], list[float]]]:
        out = client.generate(prompts=prompts, n=1, temperature=temperature, top_p=1.0, top_k=0,
                              max_tokens=max(budgets), logprobs=0,
                              generation_kwargs={"stop": list(stop_chars) or None, "include_stop_str_in_output": True})
        rows = []
        for ids, lps in zip(out["completion_ids"], out["logprobs"]):
            rows.append((list(ids), [x[0] if isinstance(x, (list, tuple)) else x for x in lps]))
        return rows

    return generate
