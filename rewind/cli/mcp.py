"""`rewind mcp`: serve the store to a coding agent over the Model Context Protocol, on stdio
(what Claude Code, Cursor and VS Code start) or with `--http` as streamable HTTP on 127.0.0.1.

Read-only unless `--allow-writes` (then `fork` and `blame` may add runs; side effects are still
dry-run). `--owner EMAIL` scopes it to one owner's runs, as the dashboard scopes a signed-in user.
The `mcp` SDK is imported here only when the command runs: without it, one line says what to
install and the exit code is 2.
"""

from __future__ import annotations

from ..errors import InvalidRequest, UserError
from .parser import int_in

EXIT_OK = 0
INSTALL = "pip install 'rewind[mcp]'"


def _owner(text):
    if text is None:
        return None
    email = text.strip().lower()  # the dashboard keys runs by the normalised email
    if not email or "@" not in email:
        raise InvalidRequest(f"--owner {text[:80]!r}: expected an email address, the owner the "
                             "dashboard records runs under", field="--owner")
    return email


def cmd_mcp(args, out) -> int:
    owner = _owner(args.owner)  # every flag is checked before the store opens
    if args.port is not None and not args.http:
        raise InvalidRequest("--port is for --http (stdio has no port)", field="--port")
    try:
        from ..mcp import server as mcp_server
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ("mcp", "mcp_types", "pydantic"):
            raise
        raise UserError(f"rewind mcp needs the MCP SDK ({e.name} is not installed): "
                        f"{INSTALL}") from None
    from ..api import Rewind

    try:
        rw = Rewind(args.db, owner=owner)
    except InvalidRequest as e:
        if e.field != "url":
            raise
        raise InvalidRequest(f"--db: {e}", field="--db") from None
    with rw:
        server = mcp_server.build_server(rw, allow_writes=args.allow_writes)
        if args.http:
            mcp_server.serve_http(server, args.port if args.port is not None
                                  else mcp_server.DEFAULT_PORT)
        else:
            mcp_server.serve_stdio(server)
    return EXIT_OK


def add_commands(add) -> None:
    sp = add("mcp", cmd_mcp, "serve runs to a coding agent over MCP (stdio, or --http)")
    sp.add_argument("--http", action="store_true",
                    help="serve streamable HTTP on 127.0.0.1 (at /mcp) instead of stdio")
    sp.add_argument("--port", type=int_in(0, 65535), default=None, metavar="N",
                    help="with --http: the port (default 8765; 0 picks a free one, printed on "
                         "stderr)")
    sp.add_argument("--allow-writes", action="store_true",
                    help="let the agent fork runs and blame them (side effects are still "
                         "dry-run); read-only without it")
    sp.add_argument("--owner", default=None, metavar="EMAIL",
                    help="only this owner's runs, as the dashboard shows a signed-in user; forks "
                         "are recorded as theirs")
