"""`rewind` / `python -m rewind`: a thin command line over the `Rewind` API.

    rewind demo [--question Q]
    rewind run --pipeline mod:attr --state JSON|@file
    rewind runs [--pipeline P] [--status S] [--search T] [--limit N] [--offset N]
    rewind show RUN [--json] [--outputs]
    rewind fork RUN --at NODE [--occurrence N] [--edit field=JSON ...]
                    [--param name=JSON ...] [--allow-side-effects] [--plan] [--yes]
    rewind diff A B [--noise-samples K] [--changes]
    rewind audit RUN --repeats K
    rewind resume RUN
    rewind gc --older-than-days N [--dry-run]
    rewind export RUN > run.json
    rewind import run.json
    rewind pipelines
    rewind serve-llm [--host 127.0.0.1] [--port 8000]
    rewind batch --at NODE [--pipeline P] [--runs ID,...] [--edit f=JSON] [--param k=JSON]
                 [--limit N] [--noise-samples K] [--executor local|ray] [--workers K] [--plan]
    rewind snapshot RUN --to tests/rewind/NAME.json [--repeats K]
    rewind replay tests/rewind/NAME.json [--record none|new|all]

RUN (and A, B, --runs) is a run id or any unique prefix of one of at least 4 characters, as git
takes a commit: an ambiguous prefix is refused, naming the runs it matches.

Global: `--db URL` (default: `REWIND_DB`, else ./rewind.db). `REWIND_PIPELINES="pkg.mod:attr,..."`
registers more pipelines; the research demo is always registered.

Exit codes: 0 success; 1 a run that failed, or an operation the system could not carry out
(`OperationError`); 2 bad input (`UserError`: an unknown run, node or field, bad JSON or a number
out of range in a flag). Errors are one line on stderr; a traceback only with `REWIND_DEBUG=1`.

Modules: `main` (entry point, exit codes), `parser` (flags and their checked types), `inputs`
(JSON flag values and files), `output` (tables, JSON, progress), and one module per group of
commands: `runs`, `compare` (fork, diff, audit), `maintenance` (gc, export, import), `serve`,
`snapshot` (snapshot, replay).
"""

from .main import main

__all__ = ["main"]
