"""Any OpenAI-compatible chat endpoint (vLLM, ``transformers serve``, frontier providers) through the
``openai`` SDK's async client.

One ``Endpoint`` per server: a base URL, the name of the environment variable that holds its key (the
key itself is never stored, logged or written), a concurrency limit, optional requests-per-minute and
tokens-per-minute budgets (shared by every client of the endpoint, see ``limits.py``), a per-request
timeout, and retries with exponential backoff that honour ``Retry-After`` on 429, 5xx, timeouts and
connection errors. The SDK's own retries are off, so retries do not multiply. When retries run out the
request raises ``EndpointError``; the rollout records the negotiation as an error, never as an outcome.

An endpoint also says how its agents act (``action_format``: the text format, or the ``tools`` of function
calling) and, optionally, its prices per million tokens, which the cost tables use.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from haggler.engine.backends.limits import EndpointLimits, limits_for

DEFAULT_ENDPOINT = "default"
ACTION_FORMATS = ("text", "tools")
TOOL_CHOICES = ("required", "auto")
CHARS_PER_TOKEN = 4  # a request's tokens are estimated from its characters before it is sent


class EndpointError(RuntimeError):
    """A request that failed for good (retries exhausted, or an error that retrying cannot fix)."""


@dataclass(frozen=True)
class Endpoint:
    name: str = DEFAULT_ENDPOINT
    base_url: str | None = None  # None: OPENAI_BASE_URL, else the SDK's default
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 16
    timeout_s: float = 60.0
    max_retries: int = 5
    backoff_s: float = 1.0  # first delay; doubles each retry, with jitter
    max_backoff_s: float = 60.0
    requests_per_minute: float | None = None  # None: no limit of haggler's own
    tokens_per_minute: float | None = None  # prompt and completion tokens together
    action_format: str = "text"  # "text": haggler's reply format; "tools": function calling
    tool_choice: str = "required"  # with tools; "auto" for servers that refuse "required"
    price_in_per_mtok: float | None = None  # prices per million tokens, for cost tables (none: not priced)
    price_out_per_mtok: float | None = None
    price_cached_in_per_mtok: float | None = None  # none: cached prompt tokens cost price_in_per_mtok
    send_seed: bool = True  # send each request's seed (false for a server that rejects the parameter)

    def __post_init__(self) -> None:
        if self.action_format not in ACTION_FORMATS:
            raise ValueError(f"endpoint {self.name!r}: action_format must be one of {ACTION_FORMATS}, "
                             f"got {self.action_format!r}")
        if self.tool_choice not in TOOL_CHOICES:
            raise ValueError(f"endpoint {self.name!r}: tool_choice must be one of {TOOL_CHOICES}, "
                             f"got {self.tool_choice!r}")
        for key in ("requests_per_minute", "tokens_per_minute", "price_in_per_mtok", "price_out_per_mtok",
                    "price_cached_in_per_mtok"):
            value = getattr(self, key)
            if value is not None and not (isinstance(value, (int, float)) and value >= 0
                                          and (value > 0 or key.startswith("price"))):
                raise ValueError(f"endpoint {self.name!r}: {key} must be a positive number, got {value!r}")
        if self.max_concurrency < 1:
            raise ValueError(f"endpoint {self.name!r}: max_concurrency must be at least 1")

    def api_key(self) -> str:
        # Local servers take any key; a missing variable is only an error for servers that check it.
        return os.environ.get(self.api_key_env) or "EMPTY"

    def prices(self) -> dict[str, float] | None:
        """Prices per million tokens (in, out, cached in), or None when the endpoint gives none."""
        if self.price_in_per_mtok is None and self.price_out_per_mtok is None:
            return None
        price_in = self.price_in_per_mtok or 0.0
        cached = self.price_cached_in_per_mtok
        return {"in": price_in, "out": self.price_out_per_mtok or 0.0,
                "cached_in": price_in if cached is None else cached}


def load_endpoints(path: str | Path) -> dict[str, Endpoint]:
    """A YAML file: ``endpoints: {NAME: {base_url, api_key_env, max_concurrency, requests_per_minute, ...}}``
    (every field of ``Endpoint`` but its name)."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: cannot read the endpoints file ({err})") from None
    table = data.get("endpoints") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError(f"{path}: expected a mapping under 'endpoints'")
    known = set(Endpoint.__dataclass_fields__) - {"name"}
    out = {}
    for name, fields in table.items():
        if not isinstance(fields, dict):
            raise ValueError(f"{path}: endpoint {name!r} must be a mapping")
        if "api_key" in fields:
            raise ValueError(f"{path}: endpoint {name!r}: keys come from the environment (api_key_env), never a file")
        unknown = set(fields) - known
        if unknown:
            raise ValueError(f"{path}: endpoint {name!r} has unknown keys {sorted(unknown)}; known: {sorted(known)}")
        try:
            out[str(name)] = Endpoint(name=str(name), **fields)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
    return out


def redact(text: str, endpoint: Endpoint) -> str:
    key = os.environ.get(endpoint.api_key_env)
    return text.replace(key, "***") if key and len(key) >= 4 else text


def _retry_after(err: Exception) -> float | None:
    response = getattr(err, "response", None)
    headers = getattr(response, "headers", None)
    if not headers:
        return None
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, parsed.timestamp() - time.time()) if parsed else None


@dataclass(frozen=True)
class Usage:
    """Tokens as a server reports them; ``cached_tokens`` are part of ``prompt_tokens``."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @classmethod
    def of(cls, usage: Any) -> Usage:
        if usage is None:
            return cls()
        details = getattr(usage, "prompt_tokens_details", None)
        return cls(int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0),
                   int(getattr(details, "cached_tokens", 0) or 0))


@dataclass(frozen=True)
class ChatReply:
    """One completion: its text, its tool calls (as the chat messages hold them) and its usage."""

    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = Usage()


def estimate_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, max_tokens: int) -> int:
    """What a request may cost before it is sent: its characters as tokens, and its whole reply budget."""
    chars = len(json.dumps(messages, ensure_ascii=False)) + (len(json.dumps(tools)) if tools else 0)
    return chars // CHARS_PER_TOKEN + max_tokens


def _tool_calls(message: Any) -> list[dict[str, Any]]:
    return [{"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in (getattr(message, "tool_calls", None) or []) if getattr(c, "function", None) is not None]


def _refuses_tool_choice(err: Any) -> bool:
    return err.status_code in (400, 422) and "tool_choice" in str(err.message)


@dataclass
class ChatClient:
    """One model behind one endpoint. Safe to share across negotiations within one event loop; its
    endpoint's budgets (``limits``) are shared with every other client of that endpoint."""

    endpoint: Endpoint
    model: str
    reported_model: str | None = None  # the model name as the server reports it
    stats: dict[str, int] = field(default_factory=lambda: {"requests": 0, "retries": 0, "failures": 0,
                                                           "rate_limited": 0})
    tool_choice: str | None = None  # with tools: the endpoint's, or "auto" once the server refused "required"
    _client: Any = None
    _semaphore: asyncio.Semaphore | None = None
    _loop: Any = None

    @property
    def limits(self) -> EndpointLimits:
        return limits_for(self.endpoint)

    def _ensure(self) -> None:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            from openai import AsyncOpenAI  # here: the SDK is an optional extra (haggler[llm])

            base_url = self.endpoint.base_url or os.environ.get("OPENAI_BASE_URL") or None
            self._client = AsyncOpenAI(base_url=base_url, api_key=self.endpoint.api_key(), max_retries=0,
                                       timeout=self.endpoint.timeout_s)
            self._semaphore = asyncio.Semaphore(self.endpoint.max_concurrency)
            self._loop = loop

    async def _send(self, messages: list[dict[str, Any]], temperature: float, max_tokens: int,
                    tools: list[dict[str, Any]] | None, tool_choice: str, seed: int | None = None) -> ChatReply:
        """One request, within the concurrency limit and the endpoint's budgets."""
        extra: dict[str, Any] = {"tools": tools, "tool_choice": tool_choice} if tools else {}
        if seed is not None and self.endpoint.send_seed:  # providers sample best-effort reproducibly with it
            extra["seed"] = seed
        charged = estimate_tokens(messages, tools, max_tokens)
        async with self._semaphore:
            wait = self.limits.reserve(charged)
            if wait > 0:
                await asyncio.sleep(wait)
            self.stats["requests"] += 1
            try:
                response = await self._client.chat.completions.create(
                    model=self.model, messages=messages, temperature=temperature, max_tokens=max_tokens, **extra)
            except BaseException:
                self.limits.settle(charged, 0)  # nothing was generated (a 429 or a 5xx is not billed)
                raise
        usage = Usage.of(response.usage)
        self.limits.settle(charged, usage.prompt_tokens + usage.completion_tokens)
        self.reported_model = response.model or self.reported_model
        if not response.choices:
            raise EndpointError("the server answered with no choices")
        message = response.choices[0].message
        return ChatReply(message.content or "", _tool_calls(message), usage)

    async def chat(self, messages: list[dict[str, Any]], temperature: float, max_tokens: int,
                   tools: list[dict[str, Any]] | None = None, seed: int | None = None) -> ChatReply:
        import openai  # see _ensure

        self._ensure()
        retryable = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                     openai.APIConnectionError)
        last: Exception | None = None
        attempt = 0
        while attempt <= self.endpoint.max_retries:
            choice = self.tool_choice or self.endpoint.tool_choice
            try:
                return await self._send(messages, temperature, max_tokens, tools, choice, seed)
            except retryable as err:
                last = err
            except openai.APIStatusError as err:
                if tools and choice == "required" and _refuses_tool_choice(err):
                    self.tool_choice = "auto"  # the server cannot force a call: ask, and read what comes
                    continue
                if err.status_code >= 500:
                    last = err
                else:  # 4xx other than 429: retrying the same request cannot help
                    self.stats["failures"] += 1
                    raise EndpointError(redact(f"HTTP {err.status_code} from {self.model}: {err.message}",
                                               self.endpoint)) from None
            if attempt == self.endpoint.max_retries:
                break
            await self._back_off(last, attempt)
            attempt += 1
        self.stats["failures"] += 1
        raise EndpointError(redact(
            f"{self.model} at endpoint {self.endpoint.name!r} failed after {self.endpoint.max_retries + 1} attempts:"
            f" {type(last).__name__}: {last}", self.endpoint))

    async def _back_off(self, err: Exception | None, attempt: int) -> None:
        import openai  # see _ensure

        self.stats["retries"] += 1
        delay = _retry_after(err)
        if delay is None:
            delay = min(self.endpoint.max_backoff_s, self.endpoint.backoff_s * 2**attempt)
            delay *= random.uniform(0.5, 1.0)
        delay = min(delay, self.endpoint.max_backoff_s)
        if isinstance(err, openai.RateLimitError):
            self.stats["rate_limited"] += 1
            self.limits.pause(delay)  # the budget is the endpoint's: every client of it waits
        await asyncio.sleep(delay)

    def describe(self) -> dict[str, Any]:
        out = {"backend": "openai", "model": self.model, "reported_model": self.reported_model,
               "endpoint": self.endpoint.name,
               "base_url": self.endpoint.base_url or os.environ.get("OPENAI_BASE_URL") or "(SDK default)"}
        prices = self.endpoint.prices()
        if prices is not None:
            out["price_per_mtok"] = prices
        return out
