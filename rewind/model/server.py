"""`rewind.model.server`: the simulator as an OpenAI-compatible HTTP server.

Owns `serve` (used by `python -m rewind serve-llm`) and `start_in_thread` (for tests). It adds
no behaviour of its own: every request goes to `rewind.model.sim.dispatch`, the same code the
in-process MockTransport uses, so HTTP and in-process answers are byte-identical.

    POST /v1/chat/completions   (stream=true with stream_options.include_usage supported)
    GET  /v1/models, /v1/models/{id}
    POST /_simulator/errors {"statuses": [429, 500]}   GET /_simulator/stats

A request body above `MAX_BODY` (32 MiB, `sim.MAX_BODY`: the in-process limit too) is answered
with an OpenAI 413 error object and the connection is closed. The body is read and thrown away
first, up to `DRAIN_LIMIT`, so that a client still sending it sees the 413 rather than a reset.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from . import sim

MAX_BODY = sim.MAX_BODY
# A refused body up to this size is drained (read in pieces, not kept); past it the connection
# is closed at once, since reading gigabytes to refuse them costs more than the client's retry.
DRAIN_LIMIT = 4 * MAX_BODY
_PIECE = 1 << 20
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 so the openai client keeps its connection alive between calls.
    protocol_version = "HTTP/1.1"
    server_version = "RewindSimulator/1"
    # Buffered writes: status line, headers and body leave in one segment (flushed below).
    wbufsize = 64 * 1024
    quiet = True

    def setup(self) -> None:
        super().setup()
        # Without TCP_NODELAY a small response waits on the client's delayed ACK: ~40 ms a call.
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        if not self.quiet:
            super().log_message(format, *args)

    def _drain(self, length: int) -> None:
        while length > 0:
            got = self.rfile.read(min(length, _PIECE))
            if not got:
                return
            length -= len(got)

    def _read_body(self):
        """The body, or a `SimResponse` refusing it (then the connection closes after it)."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            total = 0
            while True:
                try:
                    size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                except ValueError:
                    self.close_connection = True
                    return sim.wire.error_response(400, "malformed chunked request body")
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                total += size
                if total > MAX_BODY:
                    chunks.clear()  # what was kept so far is not kept while refusing
                    self.close_connection = True
                    if total <= DRAIN_LIMIT:
                        self._drain(size)
                    return sim.wire.too_large(total)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            return sim.wire.error_response(400, "the Content-Length header is not a number")
        if length > MAX_BODY:
            self.close_connection = True
            if length <= DRAIN_LIMIT:
                self._drain(length)
            return sim.wire.too_large(length)
        return self.rfile.read(length) if length > 0 else b""

    def _serve(self) -> None:
        body = self._read_body() if self.command == "POST" else b""
        refused = isinstance(body, sim.SimResponse)
        res = body if refused else sim.dispatch(self.command, self.path, body)
        self.send_response(res.status)
        for name, value in res.headers.items():
            self.send_header(name, value)
        if refused:  # the rest of a refused body may still be on its way: no keep-alive
            self.send_header("Connection", "close")
        if res.chunks is None:
            self.send_header("Content-Length", str(len(res.body)))
            self.end_headers()
            self.wfile.write(res.body)
            self.wfile.flush()
            return
        # Server-sent events: one HTTP chunk per event, flushed as it is produced.
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in res.chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    do_GET = _serve
    do_POST = _serve


class SimulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        if host in WILDCARD_HOSTS:
            host = "127.0.0.1"
        return f"http://{host}:{port}/v1"

    def handle_error(self, request, client_address) -> None:
        # A client that hangs up (process exit, closed keep-alive) is normal, not a traceback.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)

    def stop(self) -> None:
        """Stop serve_forever (if running) and close the listening socket."""
        self.shutdown()
        self.server_close()


def make_server(host: str = "127.0.0.1", port: int = 8000, *, verbose: bool = False) -> SimulatorServer:
    handler = type("Handler", (_Handler,), {"quiet": not verbose})
    return SimulatorServer((host, port), handler)


def listening_message(server: SimulatorServer) -> str:
    """What `serve` prints: a wildcard host is said to be every interface, since base_url (for
    clients on this machine) names loopback and would hide that the port is open to others."""
    host, port = server.server_address[:2]
    if host in WILDCARD_HOSTS:
        return (f"Rewind LLM simulator listening on {host or '0.0.0.0'}:{port} (all interfaces); "
                f"clients on this machine use {server.base_url}  "
                f"(export OPENAI_BASE_URL={server.base_url})")
    return (f"Rewind LLM simulator listening on {server.base_url}  "
            f"(export OPENAI_BASE_URL={server.base_url})")


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    ready_event: Optional[threading.Event] = None,
    *,
    latency_ms: Optional[float] = None,
    verbose: bool = False,
) -> None:
    """Serve the simulator until interrupted (Ctrl-C returns cleanly)."""
    if latency_ms is not None:
        sim.set_latency(latency_ms)
    server = make_server(host, port, verbose=verbose)
    sim.warm()  # load the tokenizer before the first request, not during it
    print(listening_message(server), file=sys.stderr, flush=True)
    if ready_event is not None:
        ready_event.set()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def start_in_thread(port: int = 0, host: str = "127.0.0.1") -> tuple:
    """Start a server on a daemon thread; returns (server, base_url). Stop it with server.stop()."""
    server = make_server(host, port)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name=f"rewind-llm-server:{server.server_address[1]}", daemon=True)
    thread.start()
    server.thread = thread
    return server, server.base_url


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rewind.model.server",
                                     description="The Rewind simulator as an OpenAI-compatible server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--latency-ms", type=float, default=None)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    serve(args.host, args.port, latency_ms=args.latency_ms, verbose=args.verbose)
    return 0


if __name__ == "__main__":
    sys.exit(main())
