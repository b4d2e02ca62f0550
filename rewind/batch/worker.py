"""A local pool worker: `python -m rewind.batch.worker`, one fork at a time over its pipes.

Frames are a 4-byte big-endian length and a pickle. The first frame is the `BatchRequest`; then
each frame is a run id (or None: stop), answered by one frame holding the row. The protocol runs
on a private copy of the original stdout; fd 1 is pointed at stderr, so whatever a node prints
cannot corrupt a frame. A worker started by hand with no parent exits at end of input.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import Any, BinaryIO, Optional

_HEADER = struct.Struct(">I")


def write_frame(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_exact(stream: BinaryIO, n: int) -> Optional[bytes]:
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> tuple:
    """(True, object), or (False, None) at end of stream (the other side is gone)."""
    head = _read_exact(stream, _HEADER.size)
    if head is None:
        return False, None
    body = _read_exact(stream, _HEADER.unpack(head)[0])
    if body is None:
        return False, None
    return True, pickle.loads(body)


def main() -> int:
    proto_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    proto_in = sys.stdin.buffer
    ok, request = read_frame(proto_in)
    if not ok:
        return 0
    from .task import close_handles, fork_one

    try:
        while True:
            ok, run_id = read_frame(proto_in)
            if not ok or run_id is None:
                return 0
            write_frame(proto_out, fork_one(request, run_id))
    except BrokenPipeError:  # the parent went away: nothing left to report to
        return 0
    finally:
        close_handles()


if __name__ == "__main__":
    sys.exit(main())
