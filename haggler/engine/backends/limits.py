"""Request and token budgets of one endpoint, shared by every client (every model) that calls it.

A ``TokenBucket`` refills continuously at its per-minute rate and holds at most ``burst`` units. Taking
from it is a reservation: the units are taken at once (the level may go below zero) and the caller is told
how long to wait before its slot comes. Reservations need no lock across an ``await`` (nothing awaits
between reading and updating the level), so callers on one event loop queue in arrival order; a threading
lock keeps it correct when several loops or threads share an endpoint.

The request bucket holds one request (``burst=1``): requests are paced evenly at the limit, never sent in
a burst, which providers that enforce a per-minute limit over shorter windows would refuse. The token
bucket holds one second's worth of tokens; a request is charged an estimate of its tokens before it is sent
(its prompt and its reply budget) and settled with the tokens its reply reports. A 429 pauses the whole
endpoint for its ``Retry-After``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


class TokenBucket:
    def __init__(self, per_minute: float, burst: float | None = None,
                 clock: Any = time.monotonic) -> None:
        if per_minute <= 0:
            raise ValueError(f"a rate limit must be positive, got {per_minute}")
        self.rate = per_minute / 60.0  # units per second
        self.burst = burst if burst is not None else max(1.0, self.rate)
        self.clock = clock
        self.level = self.burst
        self.stamp = clock()
        self.lock = threading.Lock()

    def _refill(self, now: float) -> None:
        self.level = min(self.burst, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def reserve(self, cost: float, not_before: float = 0.0) -> float:
        """Take ``cost`` units now; the seconds to wait before using them (0: at once). A cost above the
        burst waits for a full bucket and leaves it in debt, so the long-run rate still holds."""
        with self.lock:
            now = self.clock()
            self._refill(now)
            need = min(cost, self.burst)
            wait = max(0.0, (need - self.level) / self.rate, not_before - now)
            self.level -= cost
            return wait

    def settle(self, charged: float, used: float) -> None:
        """Correct a reservation of ``charged`` units that turned out to use ``used``."""
        with self.lock:
            self._refill(self.clock())
            self.level = min(self.burst, self.level + charged - used)


@dataclass
class EndpointLimits:
    """The budgets of one endpoint, and what they did: one object per endpoint, whatever the clients."""

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    requests: TokenBucket | None = None
    tokens: TokenBucket | None = None
    paused_until: float = 0.0  # monotonic time; a 429's Retry-After pauses every client of the endpoint
    stats: dict[str, float] = field(default_factory=lambda: {"waited_s": 0.0, "rate_limited": 0})

    def __post_init__(self) -> None:
        if self.requests_per_minute:
            self.requests = TokenBucket(self.requests_per_minute, burst=1.0)
        if self.tokens_per_minute:
            self.tokens = TokenBucket(self.tokens_per_minute)

    def reserve(self, tokens: float) -> float:
        """Reserve one request of about ``tokens`` tokens: the seconds to wait before sending it."""
        wait = max(0.0, self.paused_until - time.monotonic())
        if self.requests is not None:
            wait = max(wait, self.requests.reserve(1.0, self.paused_until))
        if self.tokens is not None:
            wait = max(wait, self.tokens.reserve(tokens, self.paused_until))
        self.stats["waited_s"] += wait
        return wait

    def settle(self, charged: float, used: float) -> None:
        if self.tokens is not None:
            self.tokens.settle(charged, used)

    def pause(self, seconds: float) -> None:
        """The server said 429: nobody on this endpoint sends before ``seconds`` from now."""
        self.stats["rate_limited"] += 1
        self.paused_until = max(self.paused_until, time.monotonic() + seconds)


_REGISTRY: dict[Any, EndpointLimits] = {}
_REGISTRY_LOCK = threading.Lock()


def limits_for(endpoint: Any) -> EndpointLimits:
    """The one ``EndpointLimits`` of an endpoint (an ``Endpoint``: frozen, so its name and settings are the
    key), shared by every client that calls it in this process."""
    with _REGISTRY_LOCK:
        if endpoint not in _REGISTRY:
            _REGISTRY[endpoint] = EndpointLimits(endpoint.requests_per_minute, endpoint.tokens_per_minute)
        return _REGISTRY[endpoint]
