"""The demo pipeline's offline corpus: Python's own language reference, searched with BM25.

The documents are `pydoc_data.topics.topics` (the text behind `help("with")`, ~79 topics,
~465 KB, shipped with every CPython). They are indexed once into an SQLite FTS5 table in a
cache file (`REWIND_CORPUS_DB`, else `$XDG_CACHE_HOME/rewind/corpus-<python version>.db`, else
`~/.cache/rewind/...`) and ranked with FTS5's `bm25()`.

The index is built in a temporary file beside the target and renamed into place, so another
process never opens a half-built index; a file whose fingerprint does not match the topics of
this Python is rebuilt the same way.

    from rewind.pipelines import corpus
    corpus.search("context managers and the with statement", k=3)
    # [{"id": "context-managers", "title": "With Statement Context Managers", "snippet": ...,
    #   "score": 12.345}, ...]
"""

from __future__ import annotations

from ..errors import CorpusError  # noqa: F401  (raised here; part of the RewindError family)

import functools
import hashlib
import os
import re
import sqlite3
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterable, Optional

__all__ = [
    "CorpusError", "db_path", "documents", "ensure_index", "fingerprint", "get_documents",
    "query_terms", "search", "topic_count", "STOPWORDS",
]

SCHEMA_VERSION = "1"
TITLE_WEIGHT = 5.0
TEXT_WEIGHT = 1.0
SNIPPET_TOKENS = 28
MAX_QUERY_TERMS = 24

# Words that carry no topic in a question ("what does the evidence say about ..."): dropped
# from queries and from coverage terms. Kept short and generic: BM25's IDF handles the rest.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing done down during each
    either few for from further had has have having he her here him his how i if in into is it
    its itself just let may me might more most must my no nor not now of off on once only or
    other our out over own same shall she should so some such than that the their them then
    there these they this those through to too under until up upon very was we were what when
    where which while who whom why will with would you your
    currently known key terms term strong strength evidence recent recently latest say says
    said precise precisely definition defined measured measure measurable effect effects
    reported report scale main risks risk limitations concerning changed last decade open
    unresolved remain remains affected practical recommendation need needs address
    question questions answer work works working use used using python happen happens
    happened mechanism mechanisms link links expert experts disagree understanding affected
    ordered background""".split()
)

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_lock = threading.Lock()
_ready: dict = {}




# ---------------------------------------------------------------------------------------------
# Documents


def _topics() -> dict:
    from pydoc_data.topics import topics

    return topics


def _split_title(key: str, raw: str) -> tuple:
    """(title, body): the first line is the title when an underline (*** / ===) follows it."""
    lines = raw.lstrip("\n").splitlines()
    if len(lines) >= 2 and lines[1].strip() and set(lines[1].strip()) <= set("*=-~^#"):
        title = lines[0].strip()
        body = "\n".join(lines[2:]).strip("\n")
    else:
        title = key.replace("-", " ").capitalize()
        body = raw.strip("\n")
    # ": " separates title from snippet in a `[doc:ID] Title: snippet` source line
    title = " ".join(title.replace(": ", " - ").split())
    return title, body


def documents() -> list:
    """Every document as {"id", "title", "text"}, in the topics' own order."""
    return [
        {"id": key, "title": title, "text": body}
        for key, raw in _topics().items()
        for title, body in [_split_title(key, raw)]
    ]


def topic_count() -> int:
    return len(_topics())


@functools.lru_cache(maxsize=1)
def fingerprint() -> str:
    """Identifies the corpus content and the index layout: a mismatch rebuilds the index."""
    h = hashlib.sha256(f"schema={SCHEMA_VERSION};python={sys.version}".encode())
    for key, raw in sorted(_topics().items()):
        h.update(key.encode("utf-8"))
        h.update(b"\0")
        h.update(raw.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Index


def db_path() -> Path:
    """Where the index lives: `REWIND_CORPUS_DB`, else the user cache folder."""
    explicit = os.environ.get("REWIND_CORPUS_DB", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base).expanduser() if base else Path.home() / ".cache"
    version = f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    return root / "rewind" / f"corpus-{version}.db"


def _index_ok(path: Path, expected: str) -> bool:
    if not path.is_file():
        return False
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = con.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
            n = con.execute("SELECT count(*) FROM docs").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return False
    return bool(row) and row[0] == expected and n > 0


def _build(path: Path, expected: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=str(path.parent))
    os.close(fd)
    try:
        con = sqlite3.connect(tmp)
        try:
            con.execute("PRAGMA journal_mode = OFF")
            con.execute("PRAGMA synchronous = OFF")
            con.execute(
                "CREATE VIRTUAL TABLE docs USING fts5("
                "id UNINDEXED, title, text, tokenize = 'porter unicode61')"
            )
            con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            con.executemany(
                "INSERT INTO docs (id, title, text) VALUES (?, ?, ?)",
                [(d["id"], d["title"], d["text"]) for d in documents()],
            )
            con.execute("INSERT INTO docs (docs) VALUES ('optimize')")
            con.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [("fingerprint", expected), ("python", sys.version), ("schema", SCHEMA_VERSION)],
            )
            con.commit()
        finally:
            con.close()
        os.replace(tmp, path)  # atomic: readers see the old file or the complete new one
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def ensure_index(path: Optional[Path] = None) -> Path:
    """Build the index if it is missing or stale; return its path. Safe across processes."""
    path = Path(path) if path is not None else db_path()
    expected = fingerprint()
    key = str(path)
    with _lock:
        if _ready.get(key) == expected and path.is_file():
            return path
        if not _index_ok(path, expected):
            try:
                _build(path, expected)
            except (OSError, sqlite3.Error) as e:
                raise CorpusError(
                    f"cannot build the corpus index at {path}: {e}; set REWIND_CORPUS_DB to a "
                    "writable file path"
                ) from e
        _ready[key] = expected
    return path


def _connect(path: Optional[Path] = None) -> sqlite3.Connection:
    p = ensure_index(path)
    return sqlite3.connect(f"file:{p}?mode=ro", uri=True)


# ---------------------------------------------------------------------------------------------
# Search


def query_terms(text: str, limit: int = MAX_QUERY_TERMS) -> list:
    """The content words of a question, lower-cased, in order, without stopwords."""
    seen, out = set(), []
    for w in _WORD.findall(text or ""):
        lw = w.lower().strip("_")
        if len(lw) < 2 or lw in STOPWORDS or lw in seen:
            continue
        seen.add(lw)
        out.append(lw)
        if len(out) >= limit:
            break
    return out


def _fts_query(terms: Iterable[str]) -> str:
    # Each term quoted: FTS5 operators (AND, NOT, NEAR, column filters) in a question are data.
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


_RULE = re.compile(r"(?:[=*~^#-]{3,}\s*)+")


def _clean(text: str) -> str:
    """One line: reST underlines (==== / ****) dropped, whitespace collapsed."""
    return " ".join(_RULE.sub(" ", text).split())


def search(query: str, k: int = 5, path: Optional[Path] = None) -> list:
    """Top-k documents for a free-text query, best first, as plain data:
    [{"id", "title", "snippet", "score"}] where score = -bm25 (higher is better), rounded."""
    k = int(k)
    if k <= 0:
        return []
    terms = query_terms(query)
    if not terms:
        return []
    con = _connect(path)
    try:
        rows = con.execute(
            "SELECT id, title, snippet(docs, 2, '', '', ' … ', ?) AS snip, "
            "bm25(docs, 0.0, ?, ?) AS rank FROM docs WHERE docs MATCH ? "
            "ORDER BY rank, id LIMIT ?",
            (SNIPPET_TOKENS, TITLE_WEIGHT, TEXT_WEIGHT, _fts_query(terms), k),
        ).fetchall()
    finally:
        con.close()
    return [
        {"id": r[0], "title": r[1], "snippet": _clean(r[2]), "score": round(-float(r[3]), 3)}
        for r in rows
    ]


def get_documents(ids: Iterable[str], path: Optional[Path] = None) -> dict:
    """{id: {"id", "title", "text"}} for the ids that exist."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return {}
    con = _connect(path)
    try:
        marks = ",".join("?" for _ in ids)
        rows = con.execute(f"SELECT id, title, text FROM docs WHERE id IN ({marks})", ids).fetchall()
    finally:
        con.close()
    return {r[0]: {"id": r[0], "title": r[1], "text": r[2]} for r in rows}
