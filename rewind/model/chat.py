"""`rewind.llm`: the one way Rewind's pipelines call a model, and the provider settings.

Owns `chat` (through the real `openai` client, metering tokens into the running step),
`client()` (the cached `openai.OpenAI` for the current configuration), `warm_up()` (the
one-time start-up cost, paid before the first step rather than inside it), `configure` /
`provider_info` / `reset` for the settings page and tests. With no `OPENAI_API_KEY` and no
`OPENAI_BASE_URL` the provider is `rewind.model.sim`, mounted in-process under the same
client through an httpx2 MockTransport, so the SDK's request building, retries and response
parsing are exercised exactly as they would be against a real endpoint.

The API key is only ever read from the environment and never appears in a message, a repr or
`provider_info()`.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import re
import threading
import time
from collections.abc import Iterable
from typing import Any, Iterator, Optional

from . import sim
from ..errors import ProviderError
from ..redaction import redact, redact_url
from .metering import current_meter, record_usage  # record_usage: part of the public contract

__all__ = [
    "chat",
    "client",
    "warm_up",
    "configure",
    "provider_info",
    "record_usage",
    "reset",
    "reset_client", "session_settings", "endpoint_identity",
    "SIMULATOR",
    "OPENAI",
]

SIMULATOR = "simulator"
OPENAI = "openai"
SIMULATOR_BASE_URL = "http://simulator.rewind.invalid/v1"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_SIM_MODEL = sim.DEFAULT_MODEL
DEFAULT_REAL_MODEL = "gpt-4o-mini"
# Sent when only a base URL is set: local OpenAI-compatible servers ignore the key, but the
# SDK refuses to build a client without one.
PLACEHOLDER_KEY = "not-needed"
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_RETRIES = 2

_lock = threading.RLock()
_overrides: dict = {"provider": None, "base_url": None, "model": None}
_clients: dict = {}
_warm: set = set()  # client cache keys whose one-time initialisation is done


# ---------------------------------------------------------------------------------------------
# Settings


def _env(name: str) -> Optional[str]:
    value = os.environ.get(name)
    return value.strip() if value and value.strip() else None


def checked_base_url(base_url: Optional[str]) -> Optional[str]:
    """A model base URL as given (None for none), or `ProviderError` saying what is wrong."""
    url = (base_url or "").strip()
    if url and not re.match(r"^https?://", url, re.I):
        raise ProviderError(f"base_url must start with http:// or https://, got {_redact_url(url)!r}")
    if re.search(r"\s", url):
        raise ProviderError(f"base_url must be one URL with no spaces, got {_redact_url(url)!r}")
    return url or None


def configure(
    provider: Optional[str] = None,
    base_url: Optional[str] = None,
    model: Optional[str] = None,
    simulator_latency_ms: Optional[float] = None,
    fail_next: Optional[Iterable[int]] = None,
) -> dict:
    """Change provider settings for this process; returns `provider_info()`.

    An argument left as None keeps its current value. `provider` is "simulator", "openai" or
    "auto" (back to choosing from the environment); `base_url=""` / `model=""` clear an
    override. A configured base URL selects the OpenAI-compatible provider unless the
    provider is forced to "simulator". The API key is never configurable here: it comes from
    `OPENAI_API_KEY` only, so it cannot leak into settings pages or saved state.
    `simulator_latency_ms` and `fail_next` (HTTP statuses the next requests fail with) drive
    the simulator.
    """
    with _lock:
        if provider is not None:
            p = provider.strip().lower()
            if p not in (SIMULATOR, OPENAI, "auto", ""):
                raise ProviderError(
                    f"unknown provider {provider!r}: use 'simulator', 'openai' or 'auto'"
                )
            _overrides["provider"] = None if p in ("auto", "") else p
        if base_url is not None:
            _overrides["base_url"] = checked_base_url(base_url)
        if model is not None:
            _overrides["model"] = model.strip() or None
        _clients_for_gc = None
        if provider is not None or base_url is not None:
            _clients_for_gc = _drop_clients()
    if _clients_for_gc:
        _close_all(_clients_for_gc)
    if simulator_latency_ms is not None:
        sim.set_latency(simulator_latency_ms)
    if fail_next is not None:
        sim.inject_errors(fail_next)
    return provider_info()


# Model settings chosen for one browser session (the dashboard): they apply to the model calls
# made inside `session_settings`, in this thread and in threads that copy its context, and to
# nobody else.
_session: contextvars.ContextVar = contextvars.ContextVar("rewind_llm_session", default=None)


@contextlib.contextmanager
def session_settings(*, provider: Optional[str] = None, base_url: Optional[str] = None,
                     api_key: Optional[str] = None, model: Optional[str] = None) -> Iterator[dict]:
    """Use these model settings for the calls made inside the block (one user's session).

    `provider` is "simulator", "openai" or "auto"/None (the server's choice). A `base_url`
    chosen here never receives the server's `OPENAI_API_KEY`: it gets `api_key` (the user's
    own, never stored) or none. With no `base_url`, calls go to the server's endpoint with
    `api_key` if given, else the server's key. Yields `provider_info()` (never a key)."""
    p = (provider or "").strip().lower() or None
    if p == "auto":
        p = None
    if p not in (None, SIMULATOR, OPENAI):
        raise ProviderError(f"unknown provider {provider!r}: use 'simulator', 'openai' or 'auto'")
    url = checked_base_url(base_url)
    token = _session.set({"provider": p, "base_url": url, "model": (model or "").strip() or None,
                          "api_key": (api_key or "").strip() or None})
    try:
        yield provider_info()
    finally:
        _session.reset(token)


def _resolve() -> dict:
    """The settings in force now: a session's, else configure() overrides, then the
    environment, then defaults. The server's key goes only to the server's own endpoint."""
    env_key = _env("OPENAI_API_KEY")
    env_url = _env("OPENAI_BASE_URL")
    env_provider = (_env("REWIND_PROVIDER") or "").lower() or None
    session = _session.get()
    if session is not None:
        forced, conf_url, conf_model, own_key = (session["provider"], session["base_url"],
                                                 session["model"], session["api_key"])
    else:
        with _lock:
            forced = _overrides["provider"]
            conf_url = _overrides["base_url"]
            conf_model = _overrides["model"]
        own_key = None
    provider = forced or (env_provider if env_provider in (SIMULATOR, OPENAI) else None)
    if provider is None:
        provider = OPENAI if (conf_url or own_key or env_key or env_url) else SIMULATOR
    if provider == SIMULATOR:
        base_url = SIMULATOR_BASE_URL
        key = None
        default_model = DEFAULT_SIM_MODEL
    else:
        server_url = env_url or OPENAI_DEFAULT_BASE_URL
        base_url = conf_url or server_url
        same_server = base_url.rstrip("/") == server_url.rstrip("/")
        key = own_key or (env_key if same_server else None)
        default_model = DEFAULT_REAL_MODEL
    chosen = conf_model or _env("REWIND_MODEL")
    if provider == OPENAI and _is_sim_model(chosen):
        chosen = None  # a simulator model name chosen for the simulator means nothing here
    return {"provider": provider, "base_url": base_url, "model": chosen or default_model,
            "model_chosen": bool(chosen), "key": key,
            # whose key a 401 is about (its hint names where to fix it)
            "key_source": "session" if own_key else ("server" if key else
                                                     ("withheld" if env_key else None))}


def _is_sim_model(name: Optional[str]) -> bool:
    return bool(name) and name.startswith("sim-")


def _effective_model(requested: Optional[str], cfg: dict) -> str:
    """The model name to send.

    Nodes of the demo pipeline default to model="sim-small". On a real endpoint that name is
    replaced by the model chosen in settings (configure(model=) / REWIND_MODEL) and, on
    api.openai.com, by the default real model. On any other base URL with no model chosen it
    is sent as is: that URL may be `serve-llm`, which knows it and answers exactly as the
    in-process simulator does.
    """
    if not requested:
        return cfg["model"]
    if cfg["provider"] == OPENAI and _is_sim_model(requested):
        if cfg["model_chosen"] or cfg["base_url"].rstrip("/") == OPENAI_DEFAULT_BASE_URL:
            return cfg["model"]
    return requested


def _redact_url(url: str) -> str:
    """The URL without its user part, password or secret-named query values."""
    return redact_url(url, hide_user=True)


def endpoint_identity() -> str:
    """Which model endpoint `chat` would call now (provider, base URL and the model chosen in
    settings, which a call naming no model gets; never the key), as a hash: a step's model
    calls made against one endpoint or model are not an answer for another."""
    cfg = _resolve()
    # a model chosen in settings joins the identity; none chosen keeps the identity entries
    # recorded before the model was part of it
    key = (cfg["provider"], cfg["base_url"]) + ((cfg["model"],) if cfg["model_chosen"] else ())
    got = _IDENTITIES.get(key)
    if got is None:
        if len(_IDENTITIES) >= 256:  # sessions may each name their own base URL
            _IDENTITIES.clear()
        got = _IDENTITIES[key] = hashlib.sha256("|".join(key).encode()).hexdigest()[:16]
    return got


_IDENTITIES: dict = {}  # (provider, base URL[, model]) -> endpoint_identity (a few per process)


def provider_info() -> dict:
    """What the settings page shows: provider, base_url, model, key_present; never the key."""
    cfg = _resolve()
    with _lock:
        overridden = {k: v is not None for k, v in _overrides.items()}
    return {
        "provider": cfg["provider"],
        "base_url": _redact_url(cfg["base_url"]),
        "model": cfg["model"],
        "key_present": bool(cfg["key"]),
        "configured": overridden,
        "simulator_latency_ms": sim.latency_ms(),
    }


# ---------------------------------------------------------------------------------------------
# Client


def _cache_key(cfg: dict) -> tuple:
    # The key enters the cache key only as a digest, so no structure of ours holds it in clear
    # besides the SDK client itself.
    key_digest = hashlib.sha256(cfg["key"].encode()).hexdigest() if cfg["key"] else ""
    return (cfg["provider"], cfg["base_url"], key_digest)


def _build_client(cfg: dict):
    import httpx2
    import openai

    max_retries = _int_env("REWIND_LLM_MAX_RETRIES", DEFAULT_MAX_RETRIES)
    if cfg["provider"] == SIMULATOR:
        return openai.OpenAI(
            api_key="sim",
            base_url=SIMULATOR_BASE_URL,
            max_retries=max_retries,
            http_client=httpx2.Client(transport=httpx2.MockTransport(sim.handle_request)),
        )
    key = cfg["key"]
    if not key:
        if cfg["base_url"] == OPENAI_DEFAULT_BASE_URL:
            raise ProviderError(
                "the OpenAI provider is selected but OPENAI_API_KEY is not set; set it, point "
                "OPENAI_BASE_URL at an OpenAI-compatible server, or use the simulator "
                "(unset both, or configure(provider='simulator'))"
            )
        key = PLACEHOLDER_KEY
    timeout = float(_env("REWIND_LLM_TIMEOUT") or DEFAULT_TIMEOUT_S)
    return openai.OpenAI(api_key=key, base_url=cfg["base_url"], max_retries=max_retries, timeout=timeout)


def _int_env(name: str, default: int) -> int:
    try:
        return max(0, int(_env(name) or default))
    except ValueError:
        return default


def client():
    """The `openai.OpenAI` client for the current settings, built once per configuration.

    Settings are re-read on every call (environment included), so a test that monkeypatches
    `OPENAI_BASE_URL` gets a client for the new endpoint without any reset.
    """
    cfg = _resolve()
    ck = _cache_key(cfg)
    with _lock:
        c = _clients.get(ck)
        if c is None:
            c = _build_client(cfg)
            _clients[ck] = c
        return c


def warm_up() -> float:
    """Do now, once, what the first model call of a process would otherwise pay for (~1 s): load
    the o200k tokenizer, import the openai SDK, build the client for the current settings and
    the SDK's response models. Sends no request. Returns the seconds spent (0.0 when already warm
    for these settings), so a caller can show a spinner or keep the time out of a latency.
    """
    cfg = _resolve()
    ck = _cache_key(cfg)
    if ck in _warm:
        return 0.0
    started = time.perf_counter()
    with _lock:
        if ck in _warm:  # another thread warmed it while this one waited
            return 0.0
        sim.warm()
        from . import http

        http.install()  # the capture of model calls at the HTTP layer (imports httpx)
        c = client()
        c.chat.completions  # the SDK imports its resources lazily, on first attribute access
        c.platform_headers()  # computed once per process, by running `uname`-like probes
        _build_response_models()
        _warm.add(ck)
    return time.perf_counter() - started


def _build_response_models() -> None:
    # The SDK builds its pydantic schemas on the first response it parses (~30 ms): build them
    # from a sample instead. Private API of openai, hence best effort: a miss costs only time.
    try:
        from openai._models import construct_type
        from openai.types.chat import ChatCompletion

        construct_type(type_=ChatCompletion, value={
            "id": "warm", "object": "chat.completion", "created": 0, "model": "warm",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ""}}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        })
    except Exception:  # noqa: BLE001 - an optimisation must never break a model call
        pass


def _drop_clients() -> list:
    with _lock:
        old = list(_clients.values())
        _clients.clear()
        _warm.clear()
    return old


def _close_all(clients: list) -> None:
    for c in clients:
        try:
            c.close()
        except Exception:  # closing is best effort: a half-dead client must not block a reset
            pass


def reset_client() -> None:
    """Close and forget cached clients (the next `client()` builds a fresh one)."""
    _close_all(_drop_clients())


def reset() -> None:
    """Back to defaults: no configure() overrides, no cached clients, simulator state cleared."""
    with _lock:
        for k in _overrides:
            _overrides[k] = None
    reset_client()
    sim.reset()


# ---------------------------------------------------------------------------------------------
# Calls


def _unauthorized_hint(source: Optional[str]) -> str:
    return {
        "session": "check the API key given for this session on the Settings page",
        "server": "check OPENAI_API_KEY",
        "withheld": "no API key was sent: the server's OPENAI_API_KEY goes only to its own "
                    "OPENAI_BASE_URL; give a key of your own for this base URL",
    }.get(source, "no API key was sent: set OPENAI_API_KEY")


def _provider_error(exc: Exception, cfg: dict, model: str) -> ProviderError:
    import openai

    where = f"{cfg['provider']} at {_redact_url(cfg['base_url'])}"
    status = getattr(exc, "status_code", None)
    if isinstance(exc, openai.APIStatusError):
        body = getattr(exc, "body", None)
        detail = body.get("message") if isinstance(body, dict) else None
        detail = detail or getattr(exc, "message", "") or str(exc)
        hint = {
            401: _unauthorized_hint(cfg.get("key_source")),
            403: "the key has no access to this model or endpoint",
            404: f"the endpoint does not know model {model!r} or the URL path; "
                 "choose a model with REWIND_MODEL or configure(model=...)",
            429: "rate limited even after the SDK's retries",
        }.get(status, "failed after the SDK's retries" if status and status >= 500 else "")
        msg = f"model call to {where} failed with HTTP {status} for model {model!r}: {detail}"
        if hint:
            msg += f" ({hint})"
    elif isinstance(exc, openai.APITimeoutError):
        msg = f"model call to {where} timed out for model {model!r} after the SDK's retries"
    elif isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        msg = f"could not connect to {where} for model {model!r} after the SDK's retries"
        if cause is not None:
            msg += f": {type(cause).__name__}: {cause}"
    else:
        msg = f"model call to {where} failed for model {model!r}: {type(exc).__name__}: {exc}"
    err = ProviderError(redact(msg, cfg["key"]))
    err.status_code = status
    err.provider = cfg["provider"]
    return err


def chat(
    messages: Any,
    *,
    model: Optional[str] = None,
    temperature: float = 0.0,
    seed: Optional[int] = None,
    max_tokens: Optional[int] = None,
) -> str:
    """Send a chat completion; return the assistant's text and meter its tokens.

    Tokens and the call's record go to the running step through the hook on the HTTP layer
    (`rewind.model.http`), the same path that meters a user's own clients (nothing is recorded
    outside a step).
    Any failure after the SDK's own retries is a `ProviderError` saying which endpoint, which
    model and what went wrong, without the API key.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        raise ProviderError("chat() takes a list of messages like [{'role': 'user', 'content': '...'}]")
    if isinstance(model, str) and not model.strip():  # else the default would answer, unsaid
        raise ProviderError("chat(model=...) is empty: name a model (for example 'gpt-4o-mini') "
                            "or leave it out for the configured default")
    msgs = [dict(m) if isinstance(m, dict) else m for m in messages]
    init_s = warm_up()
    if init_s:  # one-time start-up work is not this step's latency: the engine subtracts it
        meter = current_meter()
        if meter is not None:
            meter.init_ms += init_s * 1000
    import openai  # after warm_up, which paid for its first import outside the step's latency

    cfg = _resolve()
    name = _effective_model(model, cfg)
    kwargs: dict = {"model": name, "messages": msgs}
    if temperature is not None:  # None: the provider's own default (1.0 on OpenAI)
        kwargs["temperature"] = float(temperature)
    if seed is not None:
        kwargs["seed"] = int(seed)
    if max_tokens is not None:
        kwargs["max_tokens"] = int(max_tokens)
    try:
        response = client().chat.completions.create(**kwargs)
    except ProviderError:
        raise
    except openai.OpenAIError as exc:
        raise _provider_error(exc, cfg, name) from None
    if not response.choices:
        raise ProviderError(f"{cfg['provider']} returned no choices for model {name!r}")
    message = response.choices[0].message
    text = message.content
    if text is None:
        refusal = getattr(message, "refusal", None)
        if refusal:
            raise ProviderError(f"model {name!r} refused: {redact(refusal, cfg['key'])}")
        text = ""
    return text
