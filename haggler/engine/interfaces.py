"""What the engine plays with, declared: agents, the requests their turns make, and the samplers that
answer local requests. The rollout driver dispatches on these (``isinstance``), never on attribute probes.

Data every sampler and every model-backed agent share live here too (``Sequence``, ``Sample``,
``SampleRequest``), so that an agent can be built and typed without importing torch or transformers.
This module imports nothing heavy: ``haggler.core`` types only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from haggler.core.protocol import Negotiation
from haggler.core.types import Reply


@dataclass
class Sequence:
    """A growing token sequence (a negotiator's view of its negotiation) and the cache of its read prefix."""

    ids: list[int]
    cache: list[tuple[Any, Any]] | None = None  # per layer (keys, values) for ids[:cached]
    cached: int = 0
    # A random stream of its own (a torch.Generator): what this sequence samples then does not depend on
    # which other sequences share its batch, so the same negotiations play alike batched or alone.
    generator: Any = None

    def extend(self, ids: list[int]) -> None:
        self.ids.extend(ids)


@dataclass(frozen=True)
class Sample:
    ids: list[int]
    logprobs: list[float]
    stopped: str  # "stop" (a stop character), "eos", or "length"


@runtime_checkable
class Sampler(Protocol):
    """A model that continues token sequences: every sequence gets one continuation, appended to it. A
    continuation stops after a token whose text holds one of ``stop_chars``, at one of ``stop_ids`` (a thought's
    closing token), at an end of turn, or at its budget. Callers pass ``stop_ids`` only when they have some."""

    tokenizer: Any

    def continue_batch(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
                       stop_chars: str = "\n", generator: Any = None,
                       stop_ids: frozenset[int] = frozenset()) -> list[Sample]: ...

    def describe(self) -> dict[str, Any]: ...


@runtime_checkable
class BatchingSampler(Sampler, Protocol):
    """A sampler that batches continuously: ``submit`` returns at once, one future per sequence, each
    resolved as soon as its sequence is done (sequences submitted later join the running batch)."""

    def submit(self, seqs: list[Sequence], max_new_tokens: int | list[int], temperature: float,
               stop_chars: str = "\n", stop_ids: frozenset[int] = frozenset()) -> list[Future]: ...


@dataclass(frozen=True)
class SampleRequest:
    """What a model-backed agent asks of a local model: continue this sequence (the driver batches these)."""

    model: Sampler
    sequence: Sequence
    max_new_tokens: int
    temperature: float
    stop_chars: str
    stop_ids: frozenset[int] = frozenset()

    def stops(self) -> dict[str, Any]:
        """The keyword arguments that say where this request stops beyond ``stop_chars`` (none when it has none,
        so samplers that never stop on ids need not take them)."""
        return {"stop_ids": self.stop_ids} if self.stop_ids else {}


@runtime_checkable
class AsyncRequest(Protocol):
    """A request the driver runs concurrently on its event loop (an API call): ``run()`` gives the answer."""

    def run(self) -> Awaitable[Any]: ...


Request = SampleRequest | AsyncRequest


@runtime_checkable
class RespondingAgent(Protocol):
    """An agent that answers at once (scripted, NegMAS, human)."""

    def respond(self, negotiation: Negotiation) -> Reply: ...


@runtime_checkable
class TurnTakingAgent(Protocol):
    """An agent whose turn is a generator: it yields requests, is sent their answers, and returns its reply.
    The driver prefers this to ``respond`` when an agent has both, so that its requests can be batched."""

    def turn(self, negotiation: Negotiation) -> Generator[Request, Any, Reply]: ...


Agent = RespondingAgent | TurnTakingAgent


@runtime_checkable
class Describable(Protocol):
    """An agent that says what plays it (backend, model, sampling settings), for the run's records."""

    def describe(self) -> dict[str, Any]: ...


@runtime_checkable
class Releasable(Protocol):
    """An agent holding something large that a finished negotiation no longer needs (a key-value cache)."""

    def release(self) -> None: ...
