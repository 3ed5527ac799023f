"""A scripted Anthropic Messages API on loopback: the model the Claude Code CLI talks to, offline, in the tests of the
Claude Agent SDK adapter (which runs the CLI through the SDK) and of the Claude Code adapter (which runs it with the
hook command installed). Not for production.

``FakeMessagesAPI`` answers ``POST /v1/messages`` (streamed as server-sent events, as the API does, or as one JSON
body), ``count_tokens``, and ``200 {}`` for anything else (logged, so stray traffic shows). It keeps no conversation
state: ``answer`` decides from the request (``steps`` counts the responses since a prompt). ``offline_env`` is the
CLI's environment for it: ``ANTHROPIC_BASE_URL``, an isolated ``CLAUDE_CONFIG_DIR``, a dummy key and
``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` (without it the CLI also resolves api.anthropic.com).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

Reply = str | Sequence[Mapping[str, Any]]
"""One model response: a text answer, or its content blocks (``text(...)``, ``tool_use(...)``)."""
Answer = Callable[[dict[str, Any]], Reply]
"""Makes the model's response from the Messages API request the CLI sent (its JSON body)."""

MODEL = "claude-sonnet-4-5"
"""The model name ``offline_options`` asks for (the fake answers any)."""
OFFLINE_ENV: dict[str, str] = {
    "ANTHROPIC_API_KEY": "offline-dummy-key",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
}
"""The CLI's environment besides the base URL and the config dir: a dummy key, and no traffic but the model's."""


def text(value: str) -> dict[str, Any]:
    """A text block: a response of text only is the model's answer, which ends the turn."""
    return {"type": "text", "text": value}


def tool_use(name: str, arguments: Mapping[str, Any], call_id: str | None = None) -> dict[str, Any]:
    """A ``tool_use`` block. ``call_id=None``: the server gives it a fresh ``toolu_...`` id each time it sends
    it, as the API does (so one block can stand in a script for every response)."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": dict(arguments)}


def messages_text(message: Mapping[str, Any]) -> str:
    """All the text of one message of a request (its string content, or its text blocks)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(
        block.get("text", "") for block in content or [] if isinstance(block, Mapping) and block.get("type") == "text"
    )


def steps(request: Mapping[str, Any], prompt: str) -> int:
    """How many model responses the request's history holds since the user message holding ``prompt`` (the
    last one): 0 for the turn's first model call, 1 for the second, ..."""
    messages = list(request.get("messages") or [])
    start = max(
        (i for i, m in enumerate(messages) if m.get("role") == "user" and prompt in messages_text(m)), default=0
    )
    return sum(1 for message in messages[start:] if message.get("role") == "assistant")


class Served:
    """A scripted model API's HTTP server: a thread of this process on a free 127.0.0.1 port, every request kept
    (``requests``); ``start()``/``stop()``, or use it as a context manager. ``handler`` makes the request handler
    class from the API object."""

    def __init__(self, handler: Callable[[Any], type[BaseHTTPRequestHandler]], name: str) -> None:
        self.requests: list[dict[str, Any]] = []
        """Every request, oldest first: ``method``, ``path``, ``body`` (parsed JSON, where it is), and what the API
        adds to its record."""
        self._name = name
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``: the CLI's base URL for the API."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Any:
        """Serve in a daemon thread; returns the API."""
        self._thread = threading.Thread(target=self._server.serve_forever, name=self._name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def _record(self, record: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(record)


class FakeMessagesAPI(Served):
    """A scripted Anthropic Messages API on a free 127.0.0.1 port, in a thread of this process.

    ``answer`` makes each response from the request. ``delay`` seconds pass before each content block of a
    streamed response (the CLI starts a tool as soon as its block has streamed: a delay shows the later
    blocks arriving while the first calls run). Every response reports ``input_tokens`` and
    ``output_tokens`` as its usage. ``start()``/``stop()``, or use it as a context manager.
    """

    def __init__(self, answer: Answer, *, delay: float = 0.0, input_tokens: int = 50, output_tokens: int = 10) -> None:
        super().__init__(_handler, "fake-messages-api")
        self.answer = answer
        self.delay = delay
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens

    @property
    def base_url(self) -> str:
        """``ANTHROPIC_BASE_URL`` for the CLI."""
        return f"http://127.0.0.1:{self.port}"

    def model_requests(self) -> list[dict[str, Any]]:
        """The bodies of the ``POST /v1/messages`` requests: one per model call."""
        with self._lock:
            return [
                record["body"]
                for record in self.requests
                if record["path"].split("?")[0] == "/v1/messages" and isinstance(record["body"], dict)
            ]

    def start(self) -> FakeMessagesAPI:
        """Serve in a daemon thread."""
        started: FakeMessagesAPI = super().start()
        return started

    def __enter__(self) -> FakeMessagesAPI:
        return self.start()

    def _message(self, body: Mapping[str, Any]) -> dict[str, Any]:
        reply = self.answer(dict(body)) if body.get("tools") else "ok"
        blocks = [text(reply)] if isinstance(reply, str) else [dict(block) for block in reply]
        for block in blocks:
            if block.get("type") == "tool_use" and block.get("id") is None:
                block["id"] = "toolu_" + uuid.uuid4().hex[:24]
        return {
            "id": "msg_" + uuid.uuid4().hex[:24],
            "type": "message",
            "role": "assistant",
            "model": body.get("model", MODEL),
            "content": blocks,
            "stop_reason": "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
            },
        }


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _events(message: Mapping[str, Any]) -> list[bytes | None]:
    """The server-sent events of a streamed response; ``None`` where the server waits ``delay``."""
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    out: list[bytes | None] = [_sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        out.append(None)
        if block["type"] == "tool_use":
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            first = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": first}))
        out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    end: dict[str, Any] = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    out.append(None)
    out.append(
        _sse(
            "message_delta",
            {"type": "message_delta", "delta": end, "usage": {"output_tokens": message["usage"]["output_tokens"]}},
        )
    )
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def _handler(api: FakeMessagesAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the requests are kept instead
            pass

        def _reply(self, code: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(size) if size else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            path = self.path.split("?")[0]
            headers = {
                k.lower(): v for k, v in self.headers.items() if k.lower() in ("host", "user-agent", "x-api-key")
            }
            record = {"method": self.command, "path": self.path, "headers": headers, "body": body}
            api._record(record)
            if self.command == "POST" and path == "/v1/messages" and isinstance(body, dict):
                message = api._message(body)
                if body.get("stream"):
                    self._stream(message)
                else:
                    self._reply(200, json.dumps(message).encode())
                record["answered_at"] = time.monotonic()
            elif path.endswith("/count_tokens"):
                self._reply(200, json.dumps({"input_tokens": api.input_tokens}).encode())
            else:
                self._reply(200, b"{}")

        def _stream(self, message: Mapping[str, Any]) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for chunk in [*_events(message), b""]:
                if chunk is None:
                    if api.delay:
                        threading.Event().wait(api.delay)
                    continue
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

    return Handler


def offline_env(api: FakeMessagesAPI, home: str | Path) -> dict[str, str]:
    """The CLI's environment for ``api``: ``ANTHROPIC_BASE_URL``, ``CLAUDE_CONFIG_DIR`` under ``home`` (where
    the sessions' transcripts live, so ``resume`` finds them), and ``OFFLINE_ENV``."""
    return {**OFFLINE_ENV, "ANTHROPIC_BASE_URL": api.base_url, "CLAUDE_CONFIG_DIR": str(Path(home) / "claude")}
