"""A stand-in for Mistral's Workflows API, so that stock ``agents run-worker`` processes run offline.

**A test stand-in, not a server to deploy.** mistralai-agents 1.1.0rc11 has no self-hosted mode: a
worker asks the Workflows API at ``SERVER_URL`` where its Temporal server is (``/workers/whoami``),
registers its workflow, heartbeats, and posts the session's events there. This answers exactly those
calls, each with the smallest valid body, and points the workers at a local Temporal dev server.
Everything else gets 404, so a new call in a later SDK shows up in the log instead of passing silently.

Posted events are appended, one JSON object a line, to ``--events`` (for inspection).

Usage: ``python workflows_api_standin.py --port 8233 --temporal 127.0.0.1:7233 --events events.jsonl``
"""

from __future__ import annotations

import argparse
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

NAMESPACE = "mistral-workflows"
"""The Temporal namespace rc11 workers use."""


class WorkflowsApiStandIn(ThreadingHTTPServer):
    """The HTTP server: knows the Temporal address to hand out and where to write events."""

    daemon_threads = True

    def __init__(self, port: int, temporal_address: str, namespace: str, events: Path) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.temporal_address = temporal_address
        self.namespace = namespace
        self.events = events
        self.events_lock = threading.Lock()

    def record(self, events: list[Any]) -> None:
        """Append ``events`` to the events file, one JSON line each."""
        with self.events_lock, self.events.open("a", encoding="utf-8") as out:
            for event in events:
                out.write(json.dumps(event) + "\n")


class _Handler(BaseHTTPRequestHandler):
    server: WorkflowsApiStandIn

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per unknown path only (see ``_answer``)."""

    def _body(self) -> Any:
        size = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(size) if size else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def _send(self, body: Any, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self) -> None:
        body = self._body()
        path = self.path.split("?", 1)[0]
        fields = body if isinstance(body, dict) else {}
        if path.endswith("/workers/whoami"):
            scheduler = {"scheduler_url": self.server.temporal_address, "namespace": self.server.namespace}
            return self._send({**scheduler, "tls": False, "features": {"upload_graph": False}})
        if path == "/v1/workflows/register":
            ids = [str(uuid.uuid4()) for _ in fields.get("definitions", [])]
            refs = [
                {"workflow_id": str(uuid.uuid4()), "workflow_registration_id": i, "workflow_version_id": i} for i in ids
            ]
            return self._send(
                {
                    "has_conflicts": False,
                    "workflow_registration_ids": ids,
                    "workflow_registration_refs": refs,
                    "warnings": [],
                }
            )
        if path.endswith("/workers/heartbeat"):
            return self._send({"all_active": True})
        if path.endswith("/executions/register"):
            return self._send({"execution_id": fields.get("execution_id") or str(uuid.uuid4()), "created": True})
        if "/executions/search_keys/" in path:
            return self._send({})
        if path.endswith("/workers/event-route-token"):
            return self._send({"route_token": "offline-stand-in", "expires_in_seconds": 3600})
        if path in ("/v1/workflows/events", "/v2/workflows/events"):
            self.server.record([fields.get("event", body)])
            return self._send({"status": "success"})
        if path in ("/v1/workflows/events/batch", "/v2/workflows/events/batch"):
            events = fields.get("events", [])
            self.server.record(events)
            return self._send({"status": "success", "events_received": len(events)})
        print(f"workflows API stand-in: no answer for {self.command} {path}", flush=True)
        return self._send({"detail": f"not in the stand-in: {self.command} {path}"}, 404)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True, help="port to listen on (127.0.0.1)")
    parser.add_argument("--temporal", required=True, help="the Temporal frontend the workers use, host:port")
    parser.add_argument("--namespace", default=NAMESPACE, help=f"Temporal namespace (default {NAMESPACE})")
    parser.add_argument("--events", type=Path, required=True, help="JSONL file the posted events are appended to")
    options = parser.parse_args()
    server = WorkflowsApiStandIn(options.port, options.temporal, options.namespace, options.events)
    print(f"workflows API stand-in on http://127.0.0.1:{options.port} -> Temporal {options.temporal}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
