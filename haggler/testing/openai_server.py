"""A loopback OpenAI-compatible chat server for tests and benchmarks: fixed delays, scripted failures.

Serves ``POST /v1/chat/completions`` on 127.0.0.1 only, from a thread, and stops with its context
manager. ``fail(n)`` decides the fate of the n-th request (from 0): None answers normally; ``("429",
seconds)`` answers 429 with that Retry-After; ``("500",)`` answers 500; ``("hang", seconds)`` sleeps
that long before answering (past a client's timeout).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Fate = tuple | None


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a hung request never keeps the process alive
    request_queue_size = 256  # a benchmark opens dozens of connections at once


class FakeChatServer:
    def __init__(self, content: Callable[[list[dict[str, str]]], str] | None = None, delay_s: float = 0.0,
                 fail: Callable[[int], Fate] | None = None, model: str = "fake-model-v1") -> None:
        self.content = content or (lambda messages: "Message: That works for me.\nAction: accept")
        self.delay_s = delay_s
        self.fail = fail or (lambda n: None)
        self.model = model
        self.requests = 0
        self.answered = 0
        self.not_found = 0
        self.lock = threading.Lock()
        self.auth_headers: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

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
                with outer.lock:
                    n = outer.requests
                    outer.requests += 1
                    outer.auth_headers.append(self.headers.get("Authorization", ""))
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
                text = outer.content(request.get("messages", []))
                with outer.lock:
                    outer.answered += 1
                self._send(200, {
                    "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                    "model": outer.model,
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                })

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
    """``python -m haggler.testing.openai_server --port P --delay S``: serve until killed (for benchmarks)."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay", type=float, default=0.0)
    args = p.parse_args()
    server = FakeChatServer(delay_s=args.delay).bind(args.port)
    print(f"serving on {server.base_url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
