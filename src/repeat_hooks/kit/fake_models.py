"""Scripted model APIs on loopback for the tests that run the Gemini CLI and the Codex CLI offline with the hook
command installed (the Anthropic one, for Claude Code, is ``fake_messages``). Not for production.

Both answer one request with one model response, decided from the request alone (``answer(request, step)``: its
parsed body, and how many model responses with calls the request's turn holds already: 0 for the turn's first
call), streamed as server-sent events as the real API does; a ``Reply`` is text (the model's answer) or the calls
of one response (``call(name, arguments)``; several are parallel calls). Every request is kept (``requests``,
``model_requests``), so a test reads what the model was handed; anything else is answered ``200 {}``.

- ``FakeGeminiAPI``: Gemini's ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` (the CLI's
  ``GOOGLE_GEMINI_BASE_URL``); a request offering no tools (the CLI's own side queries: the next-speaker check,
  the loop check) gets a JSON answer that says the user speaks next and nothing is wrong.
- ``FakeResponsesAPI``: OpenAI's ``POST /v1/responses`` (Codex's ``[model_providers.<name>] base_url``, with
  ``wire_api = "responses"``); a request offering no tools gets a short text answer.

``node_cli`` finds the npm-installed CLIs (``make node-clis``: ``.cache/node_cli``, or ``$REPEAT_HOOKS_NODE_CLI``).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from .fake_messages import Served

Reply = str | Sequence[Mapping[str, Any]]
"""One model response: a text answer, or its calls (``call(...)``), run in parallel when there are several."""
Answer = Callable[[dict[str, Any], int], Reply]
"""Makes the model's response from the request's parsed body and its step (responses with calls in its turn)."""


def call(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """One function call of a response: the tool's name and its arguments."""
    return {"name": name, "arguments": dict(arguments)}


class _FakeAPI(Served):
    """The HTTP server both fakes share (``fake_messages.Served``); ``respond`` makes a model call's answer."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(_handler, "fake-model-api")
        self.answer = answer

    def model_requests(self) -> list[dict[str, Any]]:
        """The bodies of the model calls that offered tools (the agent's own steps, not the CLI's side queries)."""
        with self._lock:
            return [r["body"] for r in self.requests if r.get("model") and isinstance(r["body"], dict)]

    def respond(self, path: str, body: Any, record: dict[str, Any]) -> bytes | None:
        """The SSE body for a model call at ``path`` (``None``: not one); sets ``record["model"]`` for an agent step."""
        raise NotImplementedError


class FakeGeminiAPI(_FakeAPI):
    """A scripted Gemini API (``v1beta`` ``streamGenerateContent``), as the Gemini CLI calls it."""

    def respond(self, path: str, body: Any, record: dict[str, Any]) -> bytes | None:
        if not path.endswith((":streamGenerateContent", ":generateContent")) or not isinstance(body, dict):
            return None
        if not body.get("tools"):
            side = {"reasoning": "scripted", "next_speaker": "user", "unproductive_state_analysis": "none"}
            parts: list[dict[str, Any]] = [{"text": json.dumps({**side, "unproductive_state_confidence": 0.0})}]
        else:
            record["model"] = True
            reply = self.answer(body, gemini_step(body))
            if isinstance(reply, str):
                parts = [{"text": reply}]
            else:
                parts = [{"functionCall": {"name": c["name"], "args": c["arguments"]}} for c in reply]
        chunk = {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 10, "totalTokenCount": 60},
            "modelVersion": "gemini-scripted",
        }
        if path.endswith(":generateContent"):
            return json.dumps(chunk).encode()
        return b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n"


def gemini_turn(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Gemini request's contents since its last user content that answers no call (the prompt)."""
    contents = list(body.get("contents") or [])
    start = 0
    for index, content in enumerate(contents):
        parts = content.get("parts") or []
        if content.get("role") == "user" and not any("functionResponse" in part for part in parts):
            start = index
    return contents[start:]


def gemini_step(body: Mapping[str, Any]) -> int:
    """How many model responses with calls the request's turn holds."""
    return sum(
        1
        for content in gemini_turn(body)
        if content.get("role") == "model" and any("functionCall" in part for part in content.get("parts") or [])
    )


def gemini_responses(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``functionResponse.response`` objects the model was handed in the request's turn, in order."""
    return [
        part["functionResponse"].get("response") or {}
        for content in gemini_turn(body)
        for part in content.get("parts") or []
        if "functionResponse" in part
    ]


class FakeResponsesAPI(_FakeAPI):
    """A scripted OpenAI Responses API (``POST /v1/responses``, streamed), as the Codex CLI calls it."""

    def respond(self, path: str, body: Any, record: dict[str, Any]) -> bytes | None:
        if not path.endswith("/responses") or not isinstance(body, dict):
            return None
        if body.get("tools"):
            record["model"] = True
            reply: Reply = self.answer(body, responses_step(body))
        else:
            reply = "ok"
        if isinstance(reply, str):
            content = [{"type": "output_text", "text": reply, "annotations": []}]
            items: list[dict[str, Any]] = [
                {"type": "message", "role": "assistant", "id": _id("msg"), "content": content}
            ]
        else:
            items = [
                {
                    "type": "function_call",
                    "id": _id("fc"),
                    "call_id": _id("call"),
                    "name": c["name"],
                    "arguments": json.dumps(c["arguments"]),
                }
                for c in reply
            ]
        ident = _id("resp")
        events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": ident}}]
        for index, item in enumerate(items):
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        usage = {
            "input_tokens": 50,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 60,
        }
        events.append({"type": "response.completed", "response": {"id": ident, "usage": usage}})
        return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def responses_turn(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A Responses request's input items since its last user message (the prompt)."""
    items = list(body.get("input") or [])
    start = 0
    for index, item in enumerate(items):
        if item.get("type") == "message" and item.get("role") == "user":
            start = index
    return items[start:]


def responses_step(body: Mapping[str, Any]) -> int:
    """How many model responses with calls the request's turn holds: runs of ``function_call`` items (a response's
    parallel calls come one after another, their outputs after them)."""
    step, previous = 0, None
    for item in responses_turn(body):
        kind = item.get("type")
        if kind == "function_call" and previous != "function_call":
            step += 1
        previous = kind
    return step


def responses_outputs(body: Mapping[str, Any]) -> list[str]:
    """The ``function_call_output`` texts the model was handed in the request's turn, in order."""
    return [str(item.get("output")) for item in responses_turn(body) if item.get("type") == "function_call_output"]


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def _handler(api: _FakeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the requests are kept instead
            pass

        def _handle(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(size) if size else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            record: dict[str, Any] = {"method": self.command, "path": self.path, "body": body}
            api._record(record)
            try:
                streamed = api.respond(self.path.split("?")[0], body, record) if self.command == "POST" else None
            except Exception as error:  # a script's mistake: a 500 the CLI reports, and the test sees it
                record["error"] = repr(error)
                streamed, status = json.dumps({"error": {"message": repr(error)}}).encode(), 500
            else:
                status = 200
            sse = streamed is not None and status == 200 and b"data: " in streamed[:8192]
            payload = streamed if streamed is not None else b"{}"
            self.send_response(status)
            self.send_header("content-type", "text/event-stream" if sse else "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    return Handler


NODE_CLI_ENV = "REPEAT_HOOKS_NODE_CLI"
"""Names the folder the npm CLIs are installed in (``npm install --prefix <folder>``); default: this checkout's
``.cache/node_cli``, where ``make node-clis`` (a step of ``make test``) puts them."""
NODE_CLIS = "@google/gemini-cli@0.61.0 @openai/codex@0.169.0"
"""The pinned CLIs the tests run (the Makefile's ``NODE_CLIS``)."""


def node_cli(*path: str) -> Path:
    """A file of the npm-installed CLIs: ``<folder>/node_modules/<path>`` (``NODE_CLI_ENV``; default the checkout's
    ``.cache/node_cli``, found from the working directory up)."""
    named = os.environ.get(NODE_CLI_ENV)
    if named:
        return Path(named, "node_modules", *path)
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "Makefile").exists() and (folder / "adapters").is_dir():
            return Path(folder, ".cache", "node_cli", "node_modules", *path)
    return Path(here, ".cache", "node_cli", "node_modules", *path)


def install_hint() -> str:
    """How to get the CLIs the tests run."""
    return f"make node-clis (npm install --prefix .cache/node_cli {NODE_CLIS}), or set {NODE_CLI_ENV}"
