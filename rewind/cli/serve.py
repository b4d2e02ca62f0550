"""`serve-llm`: the offline model simulator as an OpenAI-compatible HTTP server."""

from __future__ import annotations

from ..errors import OperationError
from .parser import int_in, number_in


def cmd_serve_llm(args, out) -> int:
    from ..model import server as llm_server

    try:
        llm_server.serve(args.host, args.port, latency_ms=args.latency_ms, verbose=args.verbose)
    except OSError as e:
        raise OperationError(f"serve-llm: cannot listen on {args.host}:{args.port} "
                             f"({e.strerror or e}); pick another --port", field="--port") from None
    return 0


def add_commands(add) -> None:
    sp = add("serve-llm", cmd_serve_llm, "serve the offline model simulator over HTTP")
    sp.add_argument("--host", default="127.0.0.1",
                    help="the address to listen on (default 127.0.0.1: this machine only)")
    sp.add_argument("--port", type=int_in(0, 65535), default=8000,
                    help="the port to listen on (default 8000)")
    sp.add_argument("--latency-ms", type=number_in(0, 600_000), default=None, metavar="MS",
                    help="sleep this long in every request, as a real provider would (default: "
                         "none)")
    sp.add_argument("--verbose", action="store_true", help="log every request on stderr")
