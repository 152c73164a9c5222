"""Failures of an OpenAI-compatible server, as :class:`LlmError` values with no secret in them.

Four kinds of failure reach the adapter: an HTTP error status (:func:`http_error`), a
transport failure before or during the response (:func:`transport_error`), an error
event inside a ``200`` stream (:func:`stream_failure`), and any other exception out of
the transport or the adapter's own code (:func:`adapter_failure`, which every exception
leaving the stream passes). Each is classified into the reference's failure codes here,
and every string the server or the transport supplies (message, code, ``x-request-id``,
exception text, whatever the exception's type) passes through
:func:`~dsh_trio.llm._redact.clean` first: :func:`redact` there is the one place the
API key is kept out of error messages, logs and session files.
"""

from __future__ import annotations

import json
import math
from typing import Final

import attrs
import httpx  # noqa: ASYNC127  # the public contract takes an httpx.AsyncClient

from ..errors import LlmError
from ..values import LlmFailure
from ._error_chain import error_chain
from ._redact import REDACTED, Secret, clean, redact

__all__ = [
    "REDACTED",
    "adapter_failure",
    "as_str",
    "clean",
    "http_error",
    "redact",
    "scrub_exception",
    "stream_failure",
    "transport_error",
]

_MAX_ERROR_TEXT: Final = 500
_MAX_REQUEST_ID: Final = 200

#: Lower-case fragments of provider messages that mean "the prompt is too long".
_CONTEXT_OVERFLOW_HINTS: Final = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "reduce the length",
    "input is too long",
)


#: Appended to a refusal that asks for ``reasoning_content`` while passback is off.
_PASSBACK_OFF_HINT: Final = (
    " (the server wants the reasoning of earlier tool calls back: pass "
    "reasoning_passback=True to OpenAICompatibleAdapter, as for a proxy in front of "
    "DeepSeek)"
)
#: ... and while it is on: a tool call in the history has no reasoning to send.
_PASSBACK_ON_HINT: Final = (
    " (reasoning_passback is on, but an assistant message with tool calls in the "
    "history has no reasoning to send back: it was made with thinking off or by "
    "another model; continue with thinking off, AgentOptions(thinking=False))"
)


def as_str(value: object) -> str | None:
    """A provider JSON field read leniently: anything but a string is absent."""
    return value if isinstance(value, str) else None


def _overflows_context(lowered: str) -> bool:
    return any(h in lowered for h in _CONTEXT_OVERFLOW_HINTS)


def http_error(
    response: httpx.Response,
    url: str,
    secret: Secret,
    *,
    reasoning_passback: bool = False,
) -> LlmError:
    """Classify a non-success response (its body already read) into a failure code.

    A refused request whose message speaks of ``reasoning_content`` (DeepSeek's
    thinking mode wants the reasoning of earlier tool calls back) gets a hint naming
    the adapter's ``reasoning_passback`` option, saying what to do whether it was on
    (``reasoning_passback`` here) or off.
    """
    status = response.status_code
    message, provider_code = _error_details(response)
    message = clean(message, secret)
    if len(message) > _MAX_ERROR_TEXT:
        message = message[:_MAX_ERROR_TEXT] + "..."
    lowered = f"{message} {clean(provider_code or '', secret)}".lower()
    code = _status_code(status, lowered) or "UNKNOWN"
    if code == "INVALID_REQUEST" and "reasoning_content" in lowered:
        message += _PASSBACK_ON_HINT if reasoning_passback else _PASSBACK_OFF_HINT
    return LlmError(
        LlmFailure(
            f"HTTP {status} from {url}: {message}",
            code,
            status=status if 100 <= status <= 599 else None,
            retry_after_ms=_retry_after_ms(response.headers),
            request_id=_request_id(response.headers, secret),
        )
    )


def _status_code(status: int, lowered: str) -> str | None:
    """The failure code of an HTTP status, refined by the provider's own words.

    ``lowered`` is the (cleaned, lower-cased) message and provider code. ``None``
    for a status that says nothing (below 400).
    """
    if status in (401, 403):
        return "AUTH"
    if status == 402 or "insufficient_quota" in lowered:
        return "QUOTA"
    if status == 429:
        return "RATE_LIMIT"
    if status == 408:
        return "TIMEOUT"
    if status in (400, 413, 422) and _overflows_context(lowered):
        return "CONTEXT_WINDOW_EXCEEDED"
    if 400 <= status < 500:
        return "INVALID_REQUEST"
    if status >= 500:
        return "SERVER"
    return None


#: Provider error ``type`` / ``code`` words and the status they stand for (OpenAI,
#: Groq, DeepSeek, Mistral, OpenRouter spell them this way in error objects).
_ERROR_TYPE_STATUS: Final[dict[str, int]] = {
    "invalid_request_error": 400,
    "bad_request": 400,
    "bad_request_error": 400,
    "invalid_request": 400,
    "context_length_exceeded": 400,
    "authentication_error": 401,
    "invalid_api_key": 401,
    "permission_error": 403,
    "permission_denied": 403,
    "insufficient_quota": 402,
    "not_found_error": 404,
    "model_not_found": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "server_error": 500,
    "internal_error": 500,
    "internal_server_error": 500,
    "api_error": 500,
    "overloaded_error": 503,
    "service_unavailable": 503,
    "timeout": 408,
}


def _status_of(value: object) -> int | None:
    """An HTTP status written as a number or a numeric string, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        status = value
    elif (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and len(value) == 3 and value.isdigit()
    ):
        status = int(value)
    else:
        return None
    return status if 100 <= status <= 599 else None


def _request_id(headers: httpx.Headers, secret: Secret) -> str | None:
    raw = headers.get("x-request-id")
    if raw is None:
        return None
    return clean(raw, secret)[:_MAX_REQUEST_ID]


def transport_error(exc: httpx.RequestError, url: str, secret: Secret) -> LlmError:
    """A connection that failed or timed out (``TIMEOUT``, ``INVALID_REQUEST``, ``TRANSPORT``).

    Only the failure: :func:`adapter_failure` scrubs ``exc`` and decides whether it
    is kept as the cause.
    """
    if isinstance(exc, httpx.TimeoutException):
        return LlmError(
            LlmFailure(f"request to {url} timed out ({type(exc).__name__})", "TIMEOUT")
        )
    detail = clean(_text(exc), secret) or type(exc).__name__
    if isinstance(exc, httpx.UnsupportedProtocol):
        return LlmError(
            LlmFailure(f"cannot send to {url}: {detail}", "INVALID_REQUEST")
        )
    return LlmError(
        LlmFailure(f"transport error talking to {url}: {detail}", "TRANSPORT")
    )


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a hostile __str__
        return ""


def stream_failure(error: object, secret: Secret) -> LlmFailure:
    """An error event inside a 200 stream (vLLM, OpenRouter, Groq and others send these).

    Classified like an HTTP error: a status in the payload (``code: 400``,
    ``status``, ``status_code``, or one inside ``metadata``) or a known error
    ``type`` / ``code`` word (``invalid_request_error``, ``rate_limit_exceeded``,
    ``server_error``...) picks the code an HTTP response with that status would
    get, so a 4xx other than 408 and 429 is not retried by the default policy.
    An error that says nothing of its kind is ``SERVER``.
    """
    message: str | None = None
    words: list[str] = []
    status: int | None = None
    if isinstance(error, dict):
        message = as_str(error.get("message")) or as_str(error.get("detail"))
        metadata = error.get("metadata")
        for field in ("status", "status_code", "code", "http_status"):
            status = status or _status_of(error.get(field))
            if status is None and isinstance(metadata, dict):
                status = _status_of(metadata.get(field))
        for field in ("type", "code", "error_type"):
            word = as_str(error.get(field))
            if word and not word.isdigit():
                words.append(word)
    elif isinstance(error, str):
        message = error
    text = clean(message or "the server reported an error in the stream", secret)
    kinds = clean(" ".join(words), secret)
    lowered = f"{text} {kinds}".lower()
    if status is None:
        for word in words:
            status = _ERROR_TYPE_STATUS.get(word.lower())
            if status is not None:
                break
    code = _status_code(status, lowered) if status is not None else None
    if code is None:
        code = "CONTEXT_WINDOW_EXCEEDED" if _overflows_context(lowered) else "SERVER"
    return LlmFailure(text[:_MAX_ERROR_TEXT], code, status=status)


def scrub_exception(exc: BaseException, secret: Secret) -> bool:
    """Redact ``secret`` from ``exc`` and its causes, contexts and group members.

    The text arguments and the notes of each exception are redacted in place: an
    exception that stays attached to the adapter's error (its cause), or that goes
    on propagating, must not show the key to whoever prints a traceback. Returns
    whether every exception of the chain now renders (``str`` and ``repr``) without
    the key; one whose text does not come from its arguments (a custom
    ``__str__``) may still quote it, and is then not fit to keep. Never blocks.
    """
    if not secret:
        return True
    safe = True
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        args = current.args
        if any(isinstance(arg, str) and redact(arg, secret) is not arg for arg in args):
            current.args = tuple(
                redact(arg, secret) if isinstance(arg, str) else arg for arg in args
            )
        notes = getattr(current, "__notes__", None)
        if isinstance(notes, list):
            notes[:] = [
                redact(note, secret) if isinstance(note, str) else note
                for note in notes
            ]
        safe = safe and _renders_safely(current, secret)
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                stack.append(linked)
    return safe


def _renders_safely(exc: BaseException, secret: Secret) -> bool:
    try:
        shown = f"{exc!s} {exc!r}"
    except Exception:  # a hostile __str__: nothing a traceback prints can be trusted
        return False
    return redact(shown, secret) is shown


def adapter_failure(exc: Exception, url: str, secret: Secret) -> LlmError:
    """The :class:`LlmError` for an exception that ended a stream, key redacted.

    An ``httpx.RequestError`` is classified by :func:`transport_error`; an
    :class:`LlmError` keeps its failure; any other exception (whatever a custom
    transport, a proxy library or a bug raised) becomes an ``UNKNOWN`` failure whose
    message is its error chain (``message: cause: ...``). Every text of the result
    is redacted, and ``exc`` becomes its cause only when its whole chain renders
    without the key after :func:`scrub_exception`; the caller raises the result
    outside the ``except`` block, so ``exc`` is no hidden context either. Never
    blocks.
    """
    safe = scrub_exception(exc, secret)
    if isinstance(exc, httpx.RequestError):
        error = transport_error(exc, url, secret)
    elif isinstance(exc, LlmError):
        failure = exc.failure
        fixed = attrs.evolve(
            failure,
            message=clean(failure.message, secret),
            code=clean(failure.code, secret),
            request_id=None
            if failure.request_id is None
            else clean(failure.request_id, secret),
        )
        if fixed == failure and safe:
            return exc
        # Its ``failure`` still holds the key: not kept as the cause either.
        error, safe = LlmError(fixed), False
    else:
        error = LlmError(LlmFailure(clean(error_chain(exc), secret), "UNKNOWN"))
    error.__cause__ = exc if safe else None
    error.__suppress_context__ = True
    return error


def _error_details(response: httpx.Response) -> tuple[str, str | None]:
    """The provider's error message and code (``error.code`` or ``error.type``)."""
    try:
        text = response.text
    except (UnicodeDecodeError, LookupError):
        text = ""
    try:
        obj: object = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            message = as_str(err.get("message")) or as_str(err.get("detail"))
            code = as_str(err.get("code")) or as_str(err.get("type"))
            if message:
                return message, code
        elif isinstance(err, str) and err:
            return err, None
    return text.strip() or response.reason_phrase or "no details", None


def _retry_after_ms(headers: httpx.Headers) -> int | float | None:
    """``retry-after-ms``, else ``retry-after`` in seconds; HTTP dates are ignored."""
    for name, scale in (("retry-after-ms", 1.0), ("retry-after", 1000.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            continue
        if math.isfinite(value) and value > 0:
            return int(value) if value.is_integer() else value
    return None
