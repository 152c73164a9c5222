"""The API key leaves the adapter nowhere: whatever raised, whatever the URL, whoever logs.

The adapter is the one boundary where the key is known: every exception that ends its
stream (an ``httpx`` error, a custom transport's ``RuntimeError``, an exception whose
``__str__`` quotes the ``Authorization`` header from an attribute) leaves it as an
:class:`LlmError` whose text is redacted; the URL it names is shown without the key and
without a password; a key cut off at the end of a string is redacted too; and httpx's
and httpcore's own records pass a filter the adapter installs. Each reproduction runs a
real adapter, most of them under a runtime with a JSONL store, and looks for the key
(and its long prefixes) in the session file's bytes, ``agent/error`` events, every log
record (``caplog``, httpx's own included) and the exceptions.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import traceback
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from hypothesis import given, settings, strategies as st

import dsh_trio as dsh
from dsh_trio.errors import LlmError
from dsh_trio.events import AgentErrorEvent
from dsh_trio.llm import OpenAICompatibleAdapter
from dsh_trio.llm._log_guard import GUARDED_LOGGERS, guard_logs, redact_live_secrets
from dsh_trio.llm._redact import (
    KEY_PREFIX,
    clean,
    header_secrets,
    redact,
    secrets_of,
    shown_url,
)
from dsh_trio.llm._runtime import stream_model
from dsh_trio.llm._stream_text import StreamText
from dsh_trio.values import (
    BlockEnd,
    BlockStart,
    Finish,
    TextBlock,
    TextDelta,
)

from ..support import make_request

KEY = "sk-test-DO-NOT-LEAK-1234567890"
URL = "https://llm.test/v1"
#: Every prefix of the key that is redacted where it ends a string.
LONG_PREFIXES = [KEY[:n] for n in range(KEY_PREFIX, len(KEY) + 1)]


def leaks(text: str | bytes, key: str = KEY) -> list[str]:
    """The key, or a prefix of it of at least ``KEY_PREFIX`` characters, in ``text``."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return [p for p in [key[:n] for n in range(KEY_PREFIX, len(key) + 1)] if p in text]


def rendered(error: BaseException | None) -> str:
    """Everything an error shows: str, repr, its failure and the whole traceback."""
    if error is None:
        return ""
    parts = [str(error), repr(error), "".join(traceback.format_exception(error))]
    if isinstance(error, LlmError):
        parts.append(repr(error.failure))
    return "\n".join(parts)


def sse(*events: object) -> bytes:
    lines = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
    return b"".join([*lines, b"data: [DONE]\n\n"])


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


class Raising(httpx.AsyncBaseTransport):
    """A custom transport (a proxy library) whose exception quotes the request."""

    def __init__(self, make: Callable[[httpx.Request], BaseException]) -> None:
        self.make = make

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await trio.lowlevel.checkpoint()
        raise self.make(request)


class HeaderError(Exception):
    """Its text comes from an attribute, not from its arguments."""

    def __init__(self, header: str) -> None:
        super().__init__("refused")
        self.header = header

    def __str__(self) -> str:
        return f"proxy refused {self.header}"


def auth(request: httpx.Request) -> str:
    return request.headers["authorization"]


def chained(request: httpx.Request) -> BaseException:
    try:
        raise OSError(f"upstream said {auth(request)}")
    except OSError as exc:
        error = ValueError(f"proxy failed for {auth(request)}")
        error.__cause__ = exc
        return error


def noted(request: httpx.Request) -> BaseException:
    error = RuntimeError("proxy failed")
    error.add_note(f"while sending {auth(request)}")
    return error


#: Exceptions of every shape a transport may raise, each quoting the key.
FOREIGN: dict[str, Callable[[httpx.Request], BaseException]] = {
    "RuntimeError": lambda r: RuntimeError(f"proxy refused {auth(r)}"),
    "KeyError": lambda r: KeyError(auth(r)),
    "custom __str__": lambda r: HeaderError(auth(r)),
    "cause chain": chained,
    "note": noted,
    "group": lambda r: ExceptionGroup("proxy", [RuntimeError(auth(r)), OSError(1)]),
    "cut-off key": lambda r: RuntimeError(f"header was {auth(r)[:-1]}"),
    "LlmError": lambda r: LlmError(dsh.LlmFailure(f"bad {auth(r)}", "AUTH")),
    "httpx error": lambda r: httpx.ProxyError(f"proxy said {auth(r)}", request=r),
}


async def stream_once(
    transport: httpx.AsyncBaseTransport,
    base_url: str = URL,
    *,
    api_key: str | None = KEY,
    headers: dict[str, str] | None = None,
) -> tuple[list[Any], LlmError | None]:
    chunks: list[Any] = []
    async with httpx.AsyncClient(transport=transport) as client:
        adapter = OpenAICompatibleAdapter(
            base_url, api_key=api_key, client=client, default_headers=headers
        )
        try:
            async for chunk in adapter.stream(make_request(provider="remote")):
                chunks.append(chunk)
        except LlmError as exc:
            return chunks, exc
    return chunks, None


class Run:
    """What one turn under a runtime with a JSONL store left behind."""

    def __init__(self, stored: bytes, errors: list[AgentErrorEvent], text: str) -> None:
        self.stored, self.errors, self.text = stored, errors, text

    def error_text(self) -> str:
        return "\n".join(f"{e!r} {rendered(e.error)}" for e in self.errors)


async def run_turn(
    transport: httpx.AsyncBaseTransport,
    root: Path,
    base_url: str = URL,
    *,
    api_key: str | None = KEY,
    headers: dict[str, str] | None = None,
) -> Run:
    """One user turn of an agent whose model sits behind ``transport``."""
    errors: list[AgentErrorEvent] = []
    async with httpx.AsyncClient(transport=transport) as client:
        adapter = OpenAICompatibleAdapter(
            base_url, api_key=api_key, client=client, default_headers=headers
        )
        async with dsh.open_runtime(
            models={"remote": adapter},
            persistence=dsh.JsonlPersistence(root),
        ) as runtime:
            runtime.events.on("agent/error", errors.append)
            options = dsh.AgentOptions(provider="remote", model="m")
            async with runtime.agents.open(options=options) as agent:
                agent.followup(dsh.user_message("hello"))
                await agent.when_idle()
                text = repr(list(agent.session.events))
    stored = stored_bytes(root)
    assert stored, "the session was written"
    return Run(stored, errors, text)


def stored_bytes(root: Path) -> bytes:
    """Every byte of every file under ``root`` (the log and anything beside it)."""
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record as a handler would write it, tracebacks included."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(r) for r in caplog.records)


# ------------------------------------------------------------------ any exception type


@pytest.mark.parametrize("kind", list(FOREIGN))
async def test_an_exception_of_any_type_from_the_transport_is_redacted(
    kind: str,
) -> None:
    chunks, error = await stream_once(Raising(FOREIGN[kind]))
    assert chunks == []
    assert error is not None
    assert not leaks(rendered(error)), rendered(error)
    assert "***" in rendered(error)
    expected = {"LlmError": "AUTH", "httpx error": "TRANSPORT"}.get(kind, "UNKNOWN")
    assert error.failure.code == expected


async def test_the_cause_is_kept_only_when_it_renders_without_the_key() -> None:
    _, error = await stream_once(Raising(FOREIGN["RuntimeError"]))
    assert error is not None
    assert isinstance(error.__cause__, RuntimeError)
    assert str(error.__cause__) == "proxy refused Bearer ***"
    assert error.failure.message == "proxy refused Bearer ***"
    # An LlmError of the transport's own keeps its code, and its failure (which
    # quoted the key) is not kept as the cause.
    _, error = await stream_once(Raising(FOREIGN["LlmError"]))
    assert error is not None
    assert (error.failure.message, error.failure.code) == ("bad Bearer ***", "AUTH")
    assert error.__cause__ is None
    # A custom __str__ still quotes the key after its arguments are scrubbed: dropped,
    # and not kept as a hidden context either.
    _, error = await stream_once(Raising(FOREIGN["custom __str__"]))
    assert error is not None
    assert error.failure.message == "proxy refused Bearer ***"
    assert error.__cause__ is None
    assert error.__context__ is None


@pytest.mark.parametrize("kind", list(FOREIGN))
async def test_an_exception_of_any_type_leaves_no_trace_in_file_events_or_logs(
    kind: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    caplog.set_level(logging.DEBUG)
    run = await run_turn(Raising(FOREIGN[kind]), tmp_path)
    assert run.errors
    if kind != "note":  # a note is no part of the failure's message
        assert "***" in run.error_text()
        assert b"***" in run.stored
    assert not leaks(run.error_text())
    assert not leaks(run.stored)
    assert not leaks(run.text)
    assert caplog.records, "the failure was logged"
    assert not leaks(logged(caplog))


class Breaking(httpx.AsyncByteStream):
    """A response body that sends one event, then fails (or fails when closed)."""

    def __init__(self, header: str, *, on_close: bool) -> None:
        self.header, self.on_close = header, on_close

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"data: " + json.dumps(delta(content="hi")).encode() + b"\n\n"
        await trio.lowlevel.checkpoint()
        if not self.on_close:
            raise RuntimeError(f"connection lost, header {self.header}")
        yield b"data: " + json.dumps(delta(content=" there")).encode() + b"\n\n"

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()
        if self.on_close:
            raise RuntimeError(f"close failed, header {self.header}")


def breaking(*, on_close: bool) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=Breaking(auth(request), on_close=on_close))

    return httpx.MockTransport(handler)


async def test_an_exception_in_the_middle_of_the_body_is_redacted(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    caplog.set_level(logging.DEBUG)
    chunks, error = await stream_once(breaking(on_close=False))
    assert [c.text for c in chunks if isinstance(c, TextDelta)] == ["hi"]
    assert error is not None
    assert error.failure.message == "connection lost, header Bearer ***"
    assert not leaks(rendered(error))
    run = await run_turn(breaking(on_close=False), tmp_path)
    assert not leaks(run.error_text()) and not leaks(run.stored)
    assert not leaks(logged(caplog))


async def test_an_exception_while_closing_early_is_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(transport=breaking(on_close=True)) as client:
        adapter = OpenAICompatibleAdapter(URL, api_key=KEY, client=client)
        stream = adapter.stream(make_request(provider="remote"))
        assert isinstance(await anext(stream), BlockStart)
        with pytest.raises(LlmError) as caught:
            await stream.aclose()
    assert caught.value.failure.message == "close failed, header Bearer ***"
    assert not leaks(rendered(caught.value))
    # Through the runtime's wrapper, which logs a failing close.
    async with httpx.AsyncClient(transport=breaking(on_close=True)) as client:
        adapter = OpenAICompatibleAdapter(URL, api_key=KEY, client=client)
        async with contextlib.aclosing(
            stream_model(adapter, make_request(provider="remote"))
        ) as chunks:
            async for _ in chunks:
                break
    assert "closing the model stream" in logged(caplog)
    assert not leaks(logged(caplog))


async def test_a_base_exception_passes_as_it_is_with_its_text_scrubbed() -> None:
    raised = KeyboardInterrupt()

    def make(request: httpx.Request) -> BaseException:
        raised.args = (f"stopped at {auth(request)}",)
        return raised

    with pytest.raises(KeyboardInterrupt) as caught:
        await stream_once(Raising(make))
    assert caught.value is raised
    assert caught.value.args == ("stopped at Bearer ***",)


# ------------------------------------------------------------------ URLs


async def test_a_key_in_base_url_is_not_quoted_in_http_errors(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    caplog.set_level(logging.DEBUG)
    base = f"https://llm.test/key/{KEY}/v1"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"error": {"message": "bad key"}})

    _, error = await stream_once(httpx.MockTransport(handler), base)
    assert error is not None
    assert error.failure.message == (
        "HTTP 401 from https://llm.test/key/***/v1/chat/completions: bad key"
    )
    run = await run_turn(httpx.MockTransport(handler), tmp_path, base)
    assert not leaks(run.error_text())
    assert not leaks(run.stored)
    assert any(r.name == "httpx" for r in caplog.records)
    assert not leaks(logged(caplog))
    adapter = OpenAICompatibleAdapter(base, api_key=KEY)
    assert repr(adapter) == (
        "OpenAICompatibleAdapter(base_url='https://llm.test/key/***/v1', api_key='***')"
    )
    await adapter.aclose()


async def test_a_password_in_base_url_is_masked_in_errors_and_httpx_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    password = "hunter2-not-shown"
    base = f"https://me:{password}@llm.test/v1"

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(base, client=client)
        assert password not in repr(adapter)
        with pytest.raises(LlmError) as caught:
            async for _ in adapter.stream(make_request(provider="remote")):
                pass
    assert caught.value.failure.message == (
        "transport error talking to https://me:***@llm.test/v1/chat/completions: refused"
    )

    def ok(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=sse(delta(content="hi"), delta("stop")))

    async with httpx.AsyncClient(transport=httpx.MockTransport(ok)) as client:
        adapter = OpenAICompatibleAdapter(base, client=client)
        async for _ in adapter.stream(make_request(provider="remote")):
            pass
    assert any(r.name == "httpx" for r in caplog.records)
    assert password not in logged(caplog)


def test_shown_url() -> None:
    assert shown_url("https://llm.test/v1", KEY) == "https://llm.test/v1"
    assert shown_url(f"https://h/{KEY}/v1", KEY) == "https://h/***/v1"
    assert (
        shown_url("https://me:p@ss:w@h:1/v1?x=@", None) == "https://me:***@h:1/v1?x=@"
    )
    assert shown_url("https://me@h/v1", None) == "https://me@h/v1"
    assert shown_url("not a url: @", None) == "not a url: @"


# ------------------------------------------------------------------ httpx's own records


async def test_a_key_in_the_reason_phrase_is_redacted_in_httpx_records(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    caplog.set_level(logging.INFO)

    def handler(request: httpx.Request) -> httpx.Response:
        phrase = f"Unauthorized {auth(request)}".encode()
        return httpx.Response(401, extensions={"reason_phrase": phrase})

    _, error = await stream_once(httpx.MockTransport(handler))
    assert error is not None
    assert error.failure.message.endswith(": Unauthorized Bearer ***")
    (record,) = [r for r in caplog.records if r.name == "httpx"]
    assert record.levelno == logging.INFO
    assert record.getMessage().endswith('"HTTP/1.1 401 Unauthorized Bearer ***"')
    run = await run_turn(httpx.MockTransport(handler), tmp_path)
    assert not leaks(run.error_text())
    assert not leaks(run.stored)
    assert not leaks(logged(caplog))
    assert not leaks(caplog.text)


async def test_httpcore_records_of_a_real_connection_are_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A real server on loopback: httpcore logs the status line and headers at DEBUG."""
    caplog.set_level(logging.DEBUG)

    async def serve(stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            data = await stream.receive_some()
            if not data:
                return
            received += data
        await stream.send_all(
            b"HTTP/1.1 401 Unauthorized " + KEY.encode() + b"\r\n"
            b"x-echo: Bearer " + KEY.encode() + b"\r\n"
            b"content-length: 0\r\n\r\n"
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, serve, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        async with OpenAICompatibleAdapter(
            f"http://127.0.0.1:{port}/v1", api_key=KEY
        ) as adapter:
            with pytest.raises(LlmError) as caught:
                async for _ in adapter.stream(make_request(provider="remote")):
                    pass
        nursery.cancel_scope.cancel()
    assert caught.value.failure.code == "AUTH"
    names = {r.name for r in caplog.records}
    assert {"httpx", "httpcore.http11"} <= names, names
    text = logged(caplog)
    assert "Unauthorized ***" in text
    assert not leaks(text)


def test_the_log_filter_is_installed_once_and_lives_with_its_adapters() -> None:
    secret = "zz-secret-of-a-dropped-adapter"
    first = OpenAICompatibleAdapter(URL, api_key=secret)
    second = OpenAICompatibleAdapter(URL, api_key=secret)
    for name in GUARDED_LOGGERS:
        filters = logging.getLogger(name).filters
        assert len([f for f in filters if type(f).__name__ == "_SecretFilter"]) == 1
    logger = logging.getLogger("httpcore.http11")  # a child: filtered on its own

    def shown() -> str:
        record = logger.makeRecord(
            logger.name, logging.DEBUG, "f", 1, "%s", (secret,), None
        )
        logger.filter(record)
        return record.getMessage()

    assert shown() == "***"
    del first
    gc.collect()
    assert shown() == "***"  # the second adapter still guards it
    del second
    gc.collect()
    assert shown() == secret  # no adapter holds the key any more: nothing to hide
    assert guard_logs(None, "") is None


async def test_a_stream_keeps_the_secrets_of_its_dropped_adapter_guarded() -> None:
    secret = "zz-secret-of-a-streaming-adapter"
    body = sse(delta(content="hi"), delta(finish="stop"))
    transport = httpx.MockTransport(lambda _: httpx.Response(200, content=body))
    async with httpx.AsyncClient(transport=transport) as client:
        adapter = OpenAICompatibleAdapter(URL, api_key=secret, client=client)
        stream = adapter.stream(make_request())
        del adapter  # only the stream is left to send the request
        gc.collect()
        async with contextlib.aclosing(stream):
            first = await anext(stream)
            gc.collect()
            # httpx logs the request while the stream reads it: still guarded.
            assert redact_live_secrets(f"k={secret}") == "k=***"
            chunks = [first, *[chunk async for chunk in stream]]
        assert isinstance(chunks[-1], Finish)
        del stream
        gc.collect()
        assert redact_live_secrets(f"k={secret}") == f"k={secret}"


def test_live_secrets_follow_each_guard_from_creation_to_death() -> None:
    first, second = "zz-first-live-secret-0001", "zz-second-live-secret-002"
    text = f"{first} {second}"
    assert redact_live_secrets(text) == text  # read (and kept) with neither live
    guard = guard_logs(first)
    assert redact_live_secrets(text) == f"*** {second}"  # a new guard is seen at once
    other = guard_logs(second)
    assert redact_live_secrets(text) == "*** ***"
    del guard
    gc.collect()
    assert redact_live_secrets(text) == f"{first} ***"  # a dead one is forgotten
    del other
    gc.collect()
    assert redact_live_secrets(text) == text


def test_the_filter_redacts_tracebacks_stacks_and_unformattable_records() -> None:
    guard = guard_logs(KEY)
    logger = logging.getLogger("httpx")
    try:
        raise RuntimeError(f"failed with {KEY}")
    except RuntimeError:
        record = logger.makeRecord(
            "httpx", logging.ERROR, "f", 1, "boom", (), __import__("sys").exc_info()
        )
    record.stack_info = f"stack {KEY}"
    logger.filter(record)
    assert not leaks(logging.Formatter().format(record))
    broken = logger.makeRecord("httpx", logging.INFO, "f", 1, "%d %s", (KEY,), None)
    logger.filter(broken)
    assert broken.getMessage() == "%d %s (arguments not shown)"
    del guard


# ------------------------------------------------------------------ cut-off keys


def test_a_cut_off_key_at_the_end_of_a_string_is_redacted() -> None:
    for prefix in LONG_PREFIXES:
        assert redact(f"key {prefix}", KEY) == "key ***"
        assert redact(f"{KEY} and {prefix}", KEY) == "*** and ***"
    short = KEY[: KEY_PREFIX - 1]
    assert redact(f"key {short}", KEY) == f"key {short}"  # too short to tell
    assert redact(f"{KEY[:-1]}.", KEY) == f"{KEY[:-1]}."  # not at the end
    # Overlaps are cut as ``str.replace`` cuts them: left to right.
    assert redact("a" * 17, "a" * 9) == "******"
    assert redact("a" * 10, "a" * 9) == "***a"


async def test_a_stream_that_ends_with_a_cut_off_key_shows_it_redacted(
    tmp_path: Path,
) -> None:
    body = sse(
        delta(content="your key is "),
        delta(content=KEY[:12]),
        delta(content=KEY[12:-1]),
        delta("stop"),
    )
    chunks, error = await stream_once(
        httpx.MockTransport(lambda r: httpx.Response(200, content=body))
    )
    assert error is None
    shown = "".join(c.text for c in chunks if isinstance(c, TextDelta))
    assert shown == "your key is ***"
    (end,) = [c for c in chunks if isinstance(c, BlockEnd)]
    assert end.block == TextBlock("your key is ***")
    assert isinstance(chunks[-1], Finish)
    run = await run_turn(
        httpx.MockTransport(lambda r: httpx.Response(200, content=body)), tmp_path
    )
    assert not leaks(run.stored)
    assert b"your key is ***" in run.stored


@pytest.mark.parametrize(
    "where", ["http body", "stream error", "reason phrase", "request id"]
)
async def test_a_cut_off_key_ending_a_server_string_is_redacted(where: str) -> None:
    cut = f"Bearer {KEY[:-3]}"

    def handler(request: httpx.Request) -> httpx.Response:
        if where == "http body":
            return httpx.Response(400, json={"error": {"message": f"bad {cut}"}})
        if where == "stream error":
            return httpx.Response(200, content=sse({"error": {"message": cut}}))
        if where == "reason phrase":
            return httpx.Response(401, extensions={"reason_phrase": cut.encode()})
        return httpx.Response(503, headers={"x-request-id": cut})

    _, error = await stream_once(httpx.MockTransport(handler))
    assert error is not None
    assert not leaks(rendered(error))
    assert "Bearer ***" in f"{error.failure.message} {error.failure.request_id}"


@settings(max_examples=300, deadline=None)
@given(
    st.text("ab-x ", max_size=12),
    st.integers(0, 12),
    st.lists(st.integers(0, 30), max_size=4),
)
def test_streamed_text_ending_in_a_cut_off_key_is_redacted_as_a_whole(
    before: str, missing: int, splits: list[int]
) -> None:
    secret = "ab-ab-ab-abx-ab"
    text = before + secret[: len(secret) - missing]
    points = sorted({min(s, len(text)) for s in splits})
    fragments = [
        text[i:j] for i, j in zip([0, *points], [*points, len(text)], strict=True)
    ]
    stream = StreamText(secret)
    shown = "".join(stream.push(f) for f in fragments) + stream.flush()
    assert shown == clean(text, secret)
    if len(secret) - missing >= KEY_PREFIX:
        assert shown.endswith("***")
        assert not leaks(shown, secret)


# ------------------------------------------------------------------ secrets in default_headers

#: A key sent in a header of the caller's choosing, not as ``api_key``.
HEADER_KEY = "hdr-key-DO-NOT-LEAK-0987654321"

#: Header shapes that carry a secret, each with what a transport echoes of it.
SECRET_HEADERS: dict[str, tuple[dict[str, str], Callable[[httpx.Request], str]]] = {
    "X-Api-Key": (
        {"X-Api-Key": HEADER_KEY},
        lambda r: r.headers["x-api-key"],
    ),
    "Authorization, credentials alone": (
        {"Authorization": f"Bearer {HEADER_KEY}"},
        lambda r: r.headers["authorization"].split()[1],
    ),
    "Proxy-Authorization, whole value": (
        {"Proxy-Authorization": f"Basic {HEADER_KEY}"},
        lambda r: r.headers["proxy-authorization"],
    ),
    "X-Auth-Token": (
        {"X-Auth-Token": HEADER_KEY},
        lambda r: r.headers["x-auth-token"],
    ),
    "Cookie, one value": (
        {"Cookie": f"theme=dark; sid={HEADER_KEY}"},
        lambda r: r.headers["cookie"].split("sid=")[1],
    ),
    "X-Client-Secret": (
        {"X-Client-Secret": HEADER_KEY},
        lambda r: r.headers["x-client-secret"],
    ),
}


def echoing(kind: str) -> Raising:
    """A transport whose exception quotes the header of ``kind``."""
    echo = SECRET_HEADERS[kind][1]
    return Raising(lambda r: RuntimeError(f"proxy refused {echo(r)}"))


@pytest.mark.parametrize("kind", list(SECRET_HEADERS))
async def test_a_secret_header_echoed_by_the_transport_is_redacted(kind: str) -> None:
    headers = SECRET_HEADERS[kind][0]
    _, error = await stream_once(echoing(kind), api_key=None, headers=headers)
    assert error is not None
    assert error.failure.code == "UNKNOWN"
    assert not leaks(rendered(error), HEADER_KEY), rendered(error)
    assert error.failure.message.endswith("***")
    # With an api_key too, both are redacted.
    _, error = await stream_once(echoing(kind), headers=headers)
    assert error is not None
    assert not leaks(rendered(error), HEADER_KEY)


@pytest.mark.parametrize("kind", list(SECRET_HEADERS))
async def test_a_secret_header_leaves_no_trace_in_file_events_or_logs(
    kind: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    autojump_clock: trio.testing.MockClock,
) -> None:
    caplog.set_level(logging.DEBUG)
    run = await run_turn(
        echoing(kind), tmp_path, api_key=None, headers=SECRET_HEADERS[kind][0]
    )
    assert run.errors
    assert "proxy refused ***" in run.error_text()
    assert b"proxy refused ***" in run.stored
    assert not leaks(run.error_text(), HEADER_KEY)
    assert not leaks(run.stored, HEADER_KEY)
    assert not leaks(run.text, HEADER_KEY)
    assert caplog.records, "the failure was logged"
    assert not leaks(logged(caplog), HEADER_KEY)


async def test_a_secret_header_in_the_reason_phrase_is_redacted_in_httpx_records(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)

    def handler(request: httpx.Request) -> httpx.Response:
        phrase = f"Unauthorized {request.headers['x-api-key']}".encode()
        return httpx.Response(401, extensions={"reason_phrase": phrase})

    headers = {"X-Api-Key": HEADER_KEY}
    _, error = await stream_once(
        httpx.MockTransport(handler), api_key=None, headers=headers
    )
    assert error is not None
    assert error.failure.message.endswith(": Unauthorized ***")
    (record,) = [r for r in caplog.records if r.name == "httpx"]
    assert record.getMessage().endswith('"HTTP/1.1 401 Unauthorized ***"')
    assert not leaks(caplog.text, HEADER_KEY)


async def test_a_secret_header_repeated_by_the_model_is_redacted_in_its_text() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        # The key and the header's value, each split across two events.
        return httpx.Response(
            200,
            content=sse(
                delta(content=f"a {KEY[:5]}"),
                delta(content=f"{KEY[5:]} b {HEADER_KEY[:9]}"),
                delta(content=f"{HEADER_KEY[9:]} c"),
                delta("stop"),
            ),
        )

    chunks, error = await stream_once(
        httpx.MockTransport(handler), headers={"X-Api-Key": HEADER_KEY}
    )
    assert error is None
    assert "".join(c.text for c in chunks if isinstance(c, TextDelta)) == (
        "a *** b *** c"
    )


async def test_the_repr_and_urls_hide_a_secret_header_value() -> None:
    adapter = OpenAICompatibleAdapter(
        f"https://llm.test/{HEADER_KEY}/v1", default_headers={"X-Api-Key": HEADER_KEY}
    )
    assert HEADER_KEY not in repr(adapter)
    await adapter.aclose()


def test_header_secrets_takes_the_values_of_secret_looking_names_only() -> None:
    headers = {
        "Accept": "text/event-stream",
        "User-Agent": "my-app/1.0",
        "X-Request-Source": "batch-jobs-2024",
        "X-Api-Key": " k-live-12345 ",
        "X-Auth-Retry": "1",  # too short to be a secret
        "Authorization": "Bearer t-0123456789",
        "Cookie": "a=1; sid=s-0123456789",
        "X-Password": "hunter22",
        "X-Credential": "c-abcdefgh",
        "X-Signature": "sig-abcdefgh",
    }
    assert header_secrets(headers) == (
        "k-live-12345",
        "Bearer t-0123456789",
        "t-0123456789",
        "a=1; sid=s-0123456789",
        "s-0123456789",
        "hunter22",
        "c-abcdefgh",
        "sig-abcdefgh",
    )
    assert secrets_of(KEY, None, "", *header_secrets({"X-Api-Key": KEY})) == KEY
    assert secrets_of("ab", "abcd") == ("abcd", "ab")
    assert secrets_of(None, "") is None


@settings(max_examples=200, deadline=None)
@given(
    st.text("ab-xy ", max_size=30),
    st.lists(st.integers(0, 30), max_size=5),
)
def test_streamed_text_with_several_secrets_is_redacted_as_a_whole(
    text: str, splits: list[int]
) -> None:
    secrets = secrets_of("ab-ab-ab-abx", "xy-xy-xy-x", "ab")
    points = sorted({min(s, len(text)) for s in splits})
    fragments = [
        text[i:j] for i, j in zip([0, *points], [*points, len(text)], strict=True)
    ]
    stream = StreamText(secrets)
    shown = "".join(stream.push(f) for f in fragments) + stream.flush()
    assert shown == clean(text, secrets)
