"""Model calls: how Rewind calls a model, and how it sees, meters, records and serves the calls
a user's node makes through any client.

    chat        `rewind.llm.chat`: Rewind's own call, through the real `openai` client; the
                offline simulator when no key or base URL is set (`rewind.llm` is this module)
    metering    the meter of the running step: tokens, model calls and tool calls, per step
    http        the hook on the HTTP layer every SDK shares (httpx, httpx2): capture and serving
    providers/  what a request and its reply say, per provider (OpenAI, Anthropic, Google, any)
    capture     recording one call from its HTTP exchange: reply, raw bytes, tokens
    calls       a model call's identity (`call_key`) and answering it from a recording
    sim/        the offline model: an OpenAI-compatible chat model that needs no network
    server      the offline model served over HTTP (`python -m rewind.model.server`)
    simulator   the old name of `sim`, kept so old imports work

Nothing here imports the engine or the store: the engine opens a meter around each step and
hands it a call source (the store's cache), and reads the meter back when the step ends.
"""

from . import http  # noqa: F401  (its hook goes on when a step's meter opens)
from .metering import ModelCall, StepMeter, current_meter, record_usage

__all__ = ["ModelCall", "StepMeter", "current_meter", "record_usage"]
