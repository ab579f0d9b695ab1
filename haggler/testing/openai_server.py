"""A loopback OpenAI-compatible chat server for tests and benchmarks: fixed delays, scripted failures,
scripted tool calls, reported usage and a requests-per-minute limit.

Serves ``POST /v1/chat/completions`` on 127.0.0.1 only, from a thread, and stops with its context
manager. ``fail(n)`` decides the fate of the n-th request (from 0): None answers normally; ``("429",
seconds)`` answers 429 with that Retry-After; ``("500",)`` answers 500; ``("hang", seconds)`` sleeps
that long before answering (past a client's timeout).

What a request is answered with: ``reply(request)`` (the whole request body) when given, else
``content(messages)``. Either returns the reply's text, or a dict ``{"content": TEXT, "tool_calls":
[{"name": ..., "arguments": STR_OR_DICT}, ...]}`` (arguments given as a string are sent as they are, so
a test can send malformed JSON). Usage is reported as the characters of the request and the reply over 4;
a request after the first of a conversation reports its system message as cached. ``usage`` sums what was
reported. With ``rpm`` the server refuses (429, with Retry-After) a request that its token bucket (``rpm``
per minute, holding ``rpm * window_s / 60``, full at the start) cannot take; ``refuse_required`` answers
400 to ``tool_choice: required``, as servers that cannot force a call do.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from haggler.testing.fake_negotiator import negotiator

Fate = tuple | None


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a hung request never keeps the process alive
    request_queue_size = 256  # a benchmark opens dozens of connections at once


class _Bucket:
    """The server's own rate limit: a token bucket, checked when a request arrives."""

    def __init__(self, per_minute: float, window_s: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, per_minute * window_s / 60.0)
        self.level = self.capacity
        self.stamp = time.monotonic()

    def take(self) -> float:
        """0 when the request may pass, else the seconds until it could."""
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.level >= 1.0:
            self.level -= 1.0
            return 0.0
        return (1.0 - self.level) / self.rate


def _tokens(value: Any) -> int:
    return len(value if isinstance(value, str) else json.dumps(value)) // 4


def _message(answer: str | dict, n: int) -> tuple[dict[str, Any], str]:
    """The chat message of a reply, and its finish reason."""
    if isinstance(answer, str):
        return {"role": "assistant", "content": answer}, "stop"
    calls = [{"id": c.get("id", f"call_{n}_{i}"), "type": "function",
              "function": {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                           else json.dumps(c["arguments"])}}
             for i, c in enumerate(answer.get("tool_calls") or [])]
    message = {"role": "assistant", "content": answer.get("content")}
    if calls:
        message["tool_calls"] = calls
    return message, "tool_calls" if calls else "stop"


def _usage(request: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    messages = request.get("messages", [])
    prompt = _tokens(messages) + _tokens(request["tools"]) if request.get("tools") else _tokens(messages)
    completion = _tokens(message.get("content") or "") + sum(_tokens(c["function"]["arguments"])
                                                            for c in message.get("tool_calls", []))
    cached = _tokens(messages[0]) if len(messages) > 2 else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


class FakeChatServer:
    def __init__(self, content: Callable[[list[dict[str, str]]], str] | None = None, delay_s: float = 0.0,
                 fail: Callable[[int], Fate] | None = None, model: str = "fake-model-v1",
                 reply: Callable[[dict[str, Any]], str | dict] | None = None, rpm: float | None = None,
                 window_s: float = 60.0, refuse_required: bool = False) -> None:
        self.content = content or (lambda messages: "Message: That works for me.\nAction: accept")
        self.reply = reply or (lambda request: self.content(request.get("messages", [])))
        self.delay_s = delay_s
        self.fail = fail or (lambda n: None)
        self.model = model
        self.refuse_required = refuse_required
        self.bucket = _Bucket(rpm, window_s) if rpm else None
        self.requests = 0
        self.answered = 0
        self.not_found = 0
        self.rate_limited = 0
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0}
        self.tool_choices: list[Any] = []  # what each request asked for (None: no tools)
        self.seeds: list[Any] = []  # each request's seed parameter (None: not sent)
        self.lock = threading.Lock()
        self.auth_headers: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _admit(self, request: dict[str, Any], auth: str) -> tuple[int, tuple | None]:
        """Count a request; (its number, a refusal (code, message, headers) or None)."""
        with self.lock:
            n = self.requests
            self.requests += 1
            self.auth_headers.append(auth)
            self.tool_choices.append(request.get("tool_choice") if request.get("tools") else None)
            self.seeds.append(request.get("seed"))
            wait = self.bucket.take() if self.bucket is not None else 0.0
            if wait > 0:
                self.rate_limited += 1
                return n, (429, "rate limit reached for requests", {"Retry-After": str(math.ceil(wait)),
                                                                  "retry-after-ms": str(math.ceil(wait * 1000))})
        if self.refuse_required and request.get("tools") and request.get("tool_choice") == "required":
            return n, (400, "tool_choice 'required' is not supported by this server", {})
        return n, None

    def _answer(self, request: dict[str, Any], n: int) -> dict[str, Any]:
        message, finish = _message(self.reply(request), n)
        usage = _usage(request, message)
        with self.lock:
            self.answered += 1
            for key in ("prompt_tokens", "completion_tokens"):
                self.usage[key] += usage[key]
            self.usage["cached_tokens"] += usage["prompt_tokens_details"]["cached_tokens"]
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": self.model,
                "choices": [{"index": 0, "finish_reason": finish, "message": message}], "usage": usage}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, code: int, body: dict, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length) or b"{}")
                if self.path.rstrip("/") != "/v1/chat/completions":
                    with outer.lock:
                        outer.not_found += 1
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                n, refusal = outer._admit(request, self.headers.get("Authorization", ""))
                if refusal is not None:
                    code, text, headers = refusal
                    self._send(code, {"error": {"message": text, "type": "rate_limit" if code == 429 else
                                                "invalid_request_error"}}, headers)
                    return
                fate = outer.fail(n)
                if fate is not None and fate[0] == "429":
                    self._send(429, {"error": {"message": "slow down", "type": "rate_limit"}},
                               {"Retry-After": str(fate[1])})
                    return
                if fate is not None and fate[0] == "500":
                    self._send(500, {"error": {"message": "internal error", "type": "server_error"}})
                    return
                if fate is not None and fate[0] == "hang":
                    time.sleep(fate[1])
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                try:
                    answer = outer._answer(request, n)
                except Exception as err:  # noqa: BLE001 - a broken script is the test's bug: say so, fast
                    self._send(500, {"error": {"message": f"reply script failed: {err!r}", "type": "server_error"}})
                    return
                self._send(200, answer)

        return Handler

    def bind(self, port: int = 0) -> FakeChatServer:
        """Listen on 127.0.0.1 (port 0: any free port); ``serve_forever`` or ``with`` then serves."""
        self._server = _Server(("127.0.0.1", port), self._handler())
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def __enter__(self) -> FakeChatServer:
        if self._server is None:
            self.bind()
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def main() -> None:
    """``python -m haggler.testing.openai_server --port P --delay S [--rpm R --window W] [--negotiate]``: serve
    until killed (for benchmarks and demos). At exit (SIGTERM) it prints one JSON line of what it counted."""
    import argparse
    import signal
    import sys

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--rpm", type=float, default=None, help="refuse requests beyond this many per minute")
    p.add_argument("--window", type=float, default=60.0, help="seconds of requests the limit lets through at once")
    p.add_argument("--negotiate", action="store_true",
                   help="answer as testing/fake_negotiator.py does (text or tool calls), not with a bare accept")
    args = p.parse_args()
    server = FakeChatServer(delay_s=args.delay, rpm=args.rpm, window_s=args.window,
                            reply=negotiator if args.negotiate else None).bind(args.port)

    def stop(*_: Any) -> None:
        print(json.dumps({"requests": server.requests, "answered": server.answered,
                          "rate_limited": server.rate_limited}), flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"serving on {server.base_url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
