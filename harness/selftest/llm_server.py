"""A hostile OpenAI-compatible chat server on 127.0.0.1 for the LLM-fault and secrets
sections: each request takes the next mode of a script (the last mode repeats).

Modes: reply:<text> | status:<code> | stall:<seconds> | truncated (content-length larger
than the body, then close) | garbled (200 with invalid JSON) | big:<bytes> (a valid reply
that large) | slow_drip:<seconds> (headers, then one byte a second)."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def chat_json(text: str, model: str = "m") -> bytes:
    return json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": model,
                       "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}).encode()


class FaultyLLM:
    def __init__(self, script: list[str]):
        self.script = list(script)
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length", 0))
                self.rfile.read(n)
                with outer.lock:
                    outer.requests.append({"t": time.monotonic(), "headers": dict(self.headers)})
                    mode = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                kind, _, arg = mode.partition(":")
                try:
                    self._serve(kind, arg)
                except OSError:
                    pass

            def _send(self, code: int, body: bytes, length: int | None = None) -> None:
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body) if length is None else length))
                self.end_headers()
                self.wfile.write(body)

            def _serve(self, kind: str, arg: str) -> None:
                if kind == "reply":
                    self._send(200, chat_json(arg))
                elif kind == "status":
                    self._send(int(arg), json.dumps({"error": {"message": f"selftest {arg}"}}).encode())
                elif kind == "stall":
                    outer.release.wait(float(arg))
                    self._send(500, b"{}")
                elif kind == "truncated":
                    body = chat_json("x" * 1000)
                    self._send(200, body[: len(body) // 2], length=len(body))
                    self.close_connection = True
                elif kind == "garbled":
                    self._send(200, b'{"id": "c1", "choices": [{"message": {"content": "\xff\xfe garbage')
                elif kind == "big":
                    self._send(200, chat_json("y" * int(arg)))
                elif kind == "slow_drip":
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", "100000")
                    self.end_headers()
                    t_end = time.monotonic() + float(arg)
                    while time.monotonic() < t_end and not outer.release.is_set():
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        time.sleep(0.5)
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> "FaultyLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
