"""A loopback OpenAI-compatible chat server over local transformers models.

    platonic serve-chat --model DIR [--model DIR2] --port 8000 [--fail-every N] [--delay-every N]
    python -m platonic.flows.serve_chat --model DIR --port 8000

POST /v1/chat/completions and GET /v1/models, as `vllm serve` answers them, so the openai
backend can be run end to end without a GPU: the tests start it on a tiny model built from
configs. Each model is served under the name it was given (like vLLM: the path as typed).
Failure injection, by a request counter (1-based, over all POSTs):
  --fail-every N     every N-th request answers HTTP `--fail-status` (default 500)
  --delay-every N    every N-th request sleeps `--delay-s` before answering (client timeouts)
  --refuse-every N   every N-th request answers a refusal (`message.refusal`)
Standard library only (http.server); not a production server.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Faults:
    fail_every: int = 0
    fail_status: int = 500
    delay_every: int = 0
    delay_s: float = 5.0
    refuse_every: int = 0
    latency_s: float = 0.0  # every request waits this long first (tests: a slow server)


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr, models: dict, faults: Faults):
        super().__init__(addr, _Handler)
        self.models = models  # served name -> ChatModel
        self.faults = faults
        self.count = 0
        self.lock = threading.Lock()  # one generate at a time (torch CPU threads are shared)
        self.count_lock = threading.Lock()
        self.log: list[dict] = []  # per request: n, model, has_image, outcome (tests read it)
        self.open_connections = 0  # accepted and not yet closed (one request each: HTTP/1.0)

    def get_request(self):
        with self.count_lock:  # accepted and counted in one step: `idle` never sees one without the other
            request = super().get_request()
            self.open_connections += 1
            return request

    def shutdown_request(self, request) -> None:  # every accepted connection ends here, handled or not
        super().shutdown_request(request)
        with self.count_lock:
            self.open_connections -= 1

    def idle(self) -> bool:
        """No request in flight and none waiting to be accepted: every request a client sent
        has been logged (tests wait for this after killing a client, instead of sleeping)."""
        import select

        with self.count_lock:
            return self.open_connections == 0 and not select.select([self.socket], [], [], 0)[0]

    def next_n(self) -> int:
        with self.count_lock:
            self.count += 1
            return self.count


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, fmt, *args):  # quiet: the request log is in server.log
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(
                200,
                {
                    "object": "list",
                    "data": [{"id": m, "object": "model", "owned_by": "platonic"} for m in self.server.models],
                },
            )
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._send(404, {"error": {"message": f"no route {self.path}"}})
        s, f = self.server, self.server.faults
        n = s.next_n()
        try:
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        except ValueError:
            return self._send(400, {"error": {"message": "body is not JSON"}})
        has_image = any(
            isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
            for m in req.get("messages", [])
        )
        entry = {"n": n, "model": req.get("model"), "has_image": has_image, "outcome": "ok"}
        s.log.append(entry)
        if f.latency_s:
            time.sleep(f.latency_s)
        if f.fail_every and n % f.fail_every == 0:
            entry["outcome"] = f"http_{f.fail_status}"
            return self._send(f.fail_status, {"error": {"message": f"injected failure (request {n})"}})
        if f.delay_every and n % f.delay_every == 0:
            entry["outcome"] = "delayed"
            time.sleep(f.delay_s)
        model = s.models.get(req.get("model"))
        if model is None:
            entry["outcome"] = "http_404"
            return self._send(
                404,
                {"error": {"message": f"model {req.get('model')!r} is not served here; served: {sorted(s.models)}"}},
            )
        refuse = bool(f.refuse_every and n % f.refuse_every == 0)
        if refuse:
            text, usage = None, (0, 0)
            entry["outcome"] = "refusal"
        else:
            try:
                with s.lock:
                    c = model.chat(
                        [req["messages"]],
                        float(req.get("temperature", 1.0)),
                        float(req.get("top_p", 1.0)),
                        int(req.get("max_tokens") or 16),
                        int(req.get("seed") or 0),
                    )[0]
            except Exception as e:  # a request the model cannot take (an image for a text model, ...)
                entry["outcome"] = "http_400"
                return self._send(400, {"error": {"message": f"{type(e).__name__}: {e}"}})
            text, usage = c.text, (c.prompt_tokens, c.completion_tokens)
        self._send(
            200,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {
                            "role": "assistant",
                            "content": text,
                            "refusal": "I can't help with that (injected)." if refuse else None,
                        },
                    }
                ],
                "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
            },
        )


def make_server(
    models: list[str],
    host: str = "127.0.0.1",
    port: int = 0,
    faults: Faults | None = None,
    trust_remote_code: bool = False,
) -> ChatServer:
    """Load the models and bind (port 0: any free port, see `server.server_address`)."""
    from platonic.core.positives.transformers_backend import ChatModel

    loaded = {m: ChatModel(m, trust_remote_code=trust_remote_code) for m in models}
    return ChatServer((host, port), loaded, faults or Faults())


def serve(models: list[str], host: str, port: int, faults: Faults, trust_remote_code: bool = False) -> None:
    srv = make_server(models, host, port, faults, trust_remote_code)
    h, p = srv.server_address[:2]
    print(f"serving {', '.join(models)} on http://{h}:{p}/v1 (chat completions)", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", action="append", required=True, help="a local model folder (repeatable)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--fail-every", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=500)
    ap.add_argument("--delay-every", type=int, default=0)
    ap.add_argument("--delay-s", type=float, default=5.0)
    ap.add_argument("--refuse-every", type=int, default=0)
    ap.add_argument("--trust-remote-code", action="store_true")
    a = ap.parse_args(argv)
    serve(
        a.model,
        a.host,
        a.port,
        Faults(a.fail_every, a.fail_status, a.delay_every, a.delay_s, a.refuse_every),
        a.trust_remote_code,
    )


if __name__ == "__main__":
    main()
