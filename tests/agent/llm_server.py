"""A scripted LLM server on 127.0.0.1 speaking the OpenAI chat-completions and Anthropic
messages wire formats, so the tests drive the real SDK code paths (HTTP, parsing, errors).

Each request pops the next action of the script: ("reply", text), ("status", code,
headers), ("stall", seconds) (hold the connection, then answer 500). When the script is
empty the server answers `default` (a reply text) or 500 if there is none."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedLLM:
    def __init__(self, script: list[tuple] | None = None, default: str | None = None):
        self.script = list(script or [])
        self.default = default
        self.requests: list[dict] = []       # {"path", "headers", "body", "t"}
        self.lock = threading.Lock()
        self.stop_stalls = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                with outer.lock:
                    outer.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                           "t": time.monotonic()})
                    action = outer.script.pop(0) if outer.script else (
                        ("reply", outer.default) if outer.default is not None else ("status", 500, {}))
                kind = action[0]
                if kind == "stall":
                    outer.stop_stalls.wait(action[1])
                    action = ("status", 500, {})
                    kind = "status"
                if kind == "status":
                    payload = json.dumps({"error": {"type": "server_error", "message": f"scripted {action[1]}"},
                                          "type": "error"}).encode()
                    self.send_response(action[1])
                    for k, v in action[2].items():
                        self.send_header(k, v)
                else:
                    payload = json.dumps(outer._reply(self.path, body, action[1])).encode()
                    self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except OSError:
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @staticmethod
    def _reply(path: str, body: dict, text: str) -> dict:
        if path.endswith("/messages"):
            return {"id": "msg_1", "type": "message", "role": "assistant", "model": body.get("model", "m"),
                    "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                    "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 50}}
        return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}}

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "ScriptedLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_stalls.set()
        self.httpd.shutdown()
        self.httpd.server_close()
