"""Server-sent events, as model providers stream them: reading a body's frames, writing one."""

from __future__ import annotations

import json
from typing import Any, Optional

SSE = "text/event-stream"


def sse_events(body: bytes) -> list:
    """The (event, data) frames of a server-sent-events body."""
    out = []
    text = body.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    for frame in text.split("\n\n"):
        event, data = None, []
        for line in frame.split("\n"):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:][1:] if line[5:6] == " " else line[5:])
        if data:
            out.append((event, "\n".join(data)))
    return out


def json_events(body: bytes) -> list:
    """The JSON data of each frame ([DONE] and frames that are not JSON left out)."""
    out = []
    for _, data in sse_events(body):
        if data.strip() == "[DONE]":
            continue
        try:
            out.append(json.loads(data))
        except ValueError:
            continue
    return out


def frame(data: Any, event: Optional[str] = None) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "").encode() + b"data: " + text.encode("utf-8") + b"\n\n"
