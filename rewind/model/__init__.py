"""Model calls: how Rewind calls a model, and how it sees, meters, records and serves the calls
a user's node makes through any client.

    chat        `rewind.llm.chat`: Rewind's own call, through the real `openai` client; the
                offline simulator when no key or base URL is set (`rewind.llm` is this module)
    metering    the meter of the running step: tokens, model calls and tool calls, per step
    capture     the capture of a client's requests and replies inside a step
    calls       a model call's identity (`call_key`) and the cache that serves a repeat of it
    sim/        the offline model: an OpenAI-compatible chat model that needs no network
    server      the offline model served over HTTP (`python -m rewind.model.server`)
    simulator   the old name of `sim`, kept so old imports work

Nothing here imports the engine or the store: the engine opens a meter around each step and
hands it a call source (the store's cache), and reads the meter back when the step ends.
"""

from .metering import ModelCall, StepMeter, current_meter, record_usage

__all__ = ["ModelCall", "StepMeter", "current_meter", "record_usage"]
