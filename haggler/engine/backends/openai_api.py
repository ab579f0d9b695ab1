"""Any OpenAI-compatible chat endpoint (vLLM, ``transformers serve``, frontier providers) through the
``openai`` SDK's async client.

One ``Endpoint`` per server: a base URL, the name of the environment variable that holds its key (the
key itself is never stored, logged or written), a concurrency limit, a per-request timeout, and
retries with exponential backoff that honour ``Retry-After`` on 429, 5xx, timeouts and connection
errors. The SDK's own retries are off, so retries do not multiply. When retries run out the request
raises ``EndpointError``; the rollout records the negotiation as an error, never as an outcome.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_ENDPOINT = "default"


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

    def api_key(self) -> str:
        # Local servers take any key; a missing variable is only an error for servers that check it.
        return os.environ.get(self.api_key_env) or "EMPTY"


def load_endpoints(path: str | Path) -> dict[str, Endpoint]:
    """A YAML file: ``endpoints: {NAME: {base_url, api_key_env, max_concurrency, timeout_s, max_retries}}``."""
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
        unknown = set(fields) - known
        if unknown:
            raise ValueError(f"{path}: endpoint {name!r} has unknown keys {sorted(unknown)}; known: {sorted(known)}")
        if "api_key" in fields:
            raise ValueError(f"{path}: endpoint {name!r}: keys come from the environment (api_key_env), never a file")
        out[str(name)] = Endpoint(name=str(name), **fields)
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


@dataclass
class ChatClient:
    """One model behind one endpoint. Safe to share across negotiations within one event loop."""

    endpoint: Endpoint
    model: str
    reported_model: str | None = None  # the model name as the server reports it
    stats: dict[str, int] = field(default_factory=lambda: {"requests": 0, "retries": 0, "failures": 0})
    _client: Any = None
    _semaphore: asyncio.Semaphore | None = None
    _loop: Any = None

    def _ensure(self) -> None:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            from openai import AsyncOpenAI  # here: the SDK is an optional extra (haggler[llm])

            base_url = self.endpoint.base_url or os.environ.get("OPENAI_BASE_URL") or None
            self._client = AsyncOpenAI(base_url=base_url, api_key=self.endpoint.api_key(), max_retries=0,
                                       timeout=self.endpoint.timeout_s)
            self._semaphore = asyncio.Semaphore(self.endpoint.max_concurrency)
            self._loop = loop

    async def chat(self, messages: list[dict[str, str]], temperature: float, max_tokens: int) -> str:
        import openai  # see _ensure

        self._ensure()
        retryable = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError,
                     openai.APIConnectionError)
        last: Exception | None = None
        for attempt in range(self.endpoint.max_retries + 1):
            try:
                async with self._semaphore:
                    self.stats["requests"] += 1
                    response = await self._client.chat.completions.create(
                        model=self.model, messages=messages, temperature=temperature, max_tokens=max_tokens,
                    )
                self.reported_model = response.model or self.reported_model
                if not response.choices:
                    raise EndpointError("the server answered with no choices")
                return response.choices[0].message.content or ""
            except retryable as err:
                last = err
            except openai.APIStatusError as err:
                if err.status_code >= 500:
                    last = err
                else:  # 4xx other than 429: retrying the same request cannot help
                    self.stats["failures"] += 1
                    raise EndpointError(redact(f"HTTP {err.status_code} from {self.model}: {err.message}",
                                               self.endpoint)) from None
            if attempt == self.endpoint.max_retries:
                break
            self.stats["retries"] += 1
            delay = _retry_after(last)
            if delay is None:
                delay = min(self.endpoint.max_backoff_s, self.endpoint.backoff_s * 2**attempt)
                delay *= random.uniform(0.5, 1.0)
            await asyncio.sleep(min(delay, self.endpoint.max_backoff_s))
        self.stats["failures"] += 1
        raise EndpointError(redact(
            f"{self.model} at endpoint {self.endpoint.name!r} failed after {self.endpoint.max_retries + 1} attempts:"
            f" {type(last).__name__}: {last}", self.endpoint))

    def describe(self) -> dict[str, Any]:
        return {"backend": "openai", "model": self.model, "reported_model": self.reported_model,
                "endpoint": self.endpoint.name,
                "base_url": self.endpoint.base_url or os.environ.get("OPENAI_BASE_URL") or "(SDK default)"}
