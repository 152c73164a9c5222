"""The API key never leaves the adapter: not in errors, logs, session files or CLI output.

Every string a server or its transport supplies reaches the runtime through one
redaction function (``llm/_redact.py``). The three paths that once leaked (the text of
a malformed SSE event, an unknown ``finish_reason`` and the ``x-request-id`` header)
and a fuzzed set of server strings embedding the key are run through the whole stack:
the adapter against ``httpx.MockTransport``, the chat's code path (``run_chat``) with
a ``JsonlPersistence`` session directory, and the ``dsh_trio`` logger at DEBUG.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings, strategies as st

from dsh_trio.cli._chat_run import run_chat
from dsh_trio.cli._config import ModelChoice
from dsh_trio.errors import LlmError
from dsh_trio.llm import OpenAICompatibleAdapter
from dsh_trio.llm._redact import REDACTED, clean, redact, repair_unicode
from dsh_trio.llm._stream_text import StreamText
from dsh_trio.values import (
    Finish,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
)

from ..support import make_request

Handler = Callable[[httpx.Request], httpx.Response]

SECRET = "sk-test-DO-NOT-LEAK-1234567890"
URL = "https://llm.test/v1"


# ------------------------------------------------------------------ the function


def test_a_long_key_is_replaced_wherever_it_occurs() -> None:
    assert redact(f"a{SECRET}b {SECRET}", SECRET) == "a***b ***"
    assert redact("nothing here", SECRET) == "nothing here"
    assert redact("anything", None) == "anything"
    # A cut-off key is no key in the middle of a string, and is one at its end.
    assert redact(f"x{SECRET[:-1]} y", SECRET) == f"x{SECRET[:-1]} y"
    assert redact(f"x{SECRET[:-1]}", SECRET) == "x***"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("abc", "***"),
        ("key abc.", "key ***."),
        ("Bearer abc, then", "Bearer ***, then"),
        ('"abc"', '"***"'),
        ("abcdef", "abcdef"),  # a longer word
        ("xabc", "xabc"),
        ("abc_1 abc-2 1-abc", "abc_1 abc-2 1-abc"),  # a longer token
        ("ABC", "ABC"),  # case-sensitive: ordinary words stay
        ("fabcabc abc abc", "fabcabc *** ***"),
    ],
)
def test_a_short_key_is_replaced_only_as_a_whole_token(
    text: str, expected: str
) -> None:
    assert redact(text, "abc") == expected


def test_seven_and_eight_character_keys() -> None:
    assert redact("xabcdefgx", "abcdefg") == "xabcdefgx"  # 7: whole tokens only
    assert redact("x abcdefg x", "abcdefg") == "x *** x"
    assert redact("xabcdefghx", "abcdefgh") == "x***x"  # 8: anywhere


def test_repair_unicode() -> None:
    assert repair_unicode("plain") == "plain"
    text = "h\u00e9llo"
    assert repair_unicode(text) is text
    assert repair_unicode("a\ud800b") == "a\ufffdb"
    assert repair_unicode("\ud83d\ude00") == "\U0001f600"  # a pair decoded apart
    assert repair_unicode("\ude00\ud83d") == "\ufffd\ufffd"
    assert clean(f"\ud800{SECRET}", SECRET) == "\ufffd***"


fragment_alphabet = st.sampled_from(list("ab-_ x.\u00e9\ud83d\ude00"))
fragment_keys = st.sampled_from(
    [
        None,
        "ab",
        "a-b",
        "aba",
        "ab-ab",
        "abababab",
        "ab-ab-abx",
        "aaaaaaaaa",
        "ab-ab-ab-abx",
        "abababababa",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text(fragment_alphabet, max_size=6), max_size=8), fragment_keys)
def test_streamed_text_is_made_safe_as_if_it_had_come_whole(
    fragments: list[str], secret: str | None
) -> None:
    stream = StreamText(secret)
    shown = [stream.push(f) for f in fragments] + [stream.flush()]
    assert "".join(shown) == clean("".join(fragments), secret)
    if secret is not None and len(secret) >= 8:
        # What was shown at any moment never ends in a complete key either.
        so_far = ""
        for piece in shown:
            so_far += piece
            assert secret not in so_far


# ------------------------------------------------------------------ helpers


def sse(*events: object, done: bool = True) -> bytes:
    out = [
        b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n"
        for e in events
    ]
    if done:
        out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def delta(finish: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields, "finish_reason": finish}]}


def serve(
    body: bytes = b"", *, status: int = 200, headers: dict[str, str] | None = None
) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers or {}, content=body)

    return handler


async def collect(
    handler: Handler, secret: str
) -> tuple[list[StreamChunk], LlmError | None]:
    chunks: list[StreamChunk] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        adapter = OpenAICompatibleAdapter(URL, api_key=secret, client=client)
        try:
            async for chunk in adapter.stream(make_request(provider="remote")):
                chunks.append(chunk)
        except LlmError as exc:
            return chunks, exc
    return chunks, None


def rendered(error: BaseException | None) -> str:
    """Everything an error can show: str, repr, failure and the whole traceback."""
    if error is None:
        return ""
    parts = [str(error), repr(error), "".join(traceback.format_exception(error))]
    if isinstance(error, LlmError):
        parts.append(repr(error.failure))
    return "\n".join(parts)


@contextlib.contextmanager
def captured_logs() -> Iterator[list[str]]:
    """The ``dsh_trio`` logger at DEBUG, records formatted with their tracebacks."""
    lines: list[str] = []
    formatter = logging.Formatter("%(levelname)s %(name)s %(message)s")

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(formatter.format(record))

    logger = logging.getLogger("dsh_trio")
    handler = Collect(logging.DEBUG)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


class Outputs:
    """What one chat run left behind: CLI output, every stored byte, the log."""

    def __init__(self, out: str, err: str, stored: bytes, logs: list[str]) -> None:
        self.out, self.err, self.stored, self.logs = out, err, stored, logs

    def assert_no_trace_of(self, secret: str) -> None:
        assert secret not in self.out
        assert secret not in self.err
        assert secret.encode() not in self.stored
        assert secret not in "\n".join(self.logs)


def stored_bytes(root: Path) -> bytes:
    """Every byte of every file under ``root`` (the log and anything beside it)."""
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


async def run_chat_against(
    handler: Handler, secret: str, session_dir: Path, line: str = "hello"
) -> Outputs:
    """The chat's code path (``run_chat``) against ``handler``, one input line."""
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    adapter = OpenAICompatibleAdapter(URL, api_key=secret, client=client)
    choice = ModelChoice(provider="remote", model="m", adapter=adapter, label="m")
    out, err = io.StringIO(), io.StringIO()
    with captured_logs() as logs:
        try:
            await run_chat(
                choice,
                session_dir=str(session_dir),
                stdin=io.StringIO(f"{line}\n"),
                stdout=out,
                stderr=err,
            )
        finally:
            await client.aclose()
    stored = stored_bytes(session_dir)
    assert stored, "the session was written"
    return Outputs(out.getvalue(), err.getvalue(), stored, logs)


# ------------------------------------------------------------------ the three leak paths

# Each handler quotes the key where the server controls the text.
LEAK_PATHS: dict[str, Handler] = {
    "malformed SSE event": serve(
        sse(delta(content="hi"), f"not json; auth was Bearer {SECRET}".encode())
    ),
    "unknown finish_reason": serve(
        sse(delta(content="hi"), delta(f"bad_key_{SECRET}"))
    ),
    "x-request-id": serve(
        b'{"error": {"message": "bad request"}}',
        status=400,
        headers={"x-request-id": f"req-{SECRET}"},
    ),
}


@pytest.mark.parametrize("path", list(LEAK_PATHS))
async def test_leak_path_adapter_error(path: str) -> None:
    chunks, error = await collect(LEAK_PATHS[path], SECRET)
    # A failure: raised, or (an unknown finish reason) in the Finish chunk.
    assert error is not None or isinstance(chunks[-1], Finish)
    assert SECRET not in rendered(error)
    assert SECRET not in repr(chunks)
    assert REDACTED in rendered(error) + repr(chunks)


async def test_unknown_finish_reason_is_redacted_before_it_is_upper_cased() -> None:
    chunks, error = await collect(LEAK_PATHS["unknown finish_reason"], SECRET)
    assert error is None
    finish = chunks[-1]
    assert isinstance(finish, Finish)
    failure = finish.reason.failure
    assert failure is not None
    assert (failure.message, failure.code) == (
        "model stopped: bad_key_***",
        "BAD_KEY_***",
    )
    assert SECRET.upper() not in repr(chunks)


async def test_request_id_keeps_what_is_not_the_key() -> None:
    _, error = await collect(LEAK_PATHS["x-request-id"], SECRET)
    assert error is not None
    assert error.failure.request_id == "req-***"


@pytest.mark.parametrize("path", list(LEAK_PATHS))
async def test_leak_path_through_the_chat(
    path: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    outputs = await run_chat_against(LEAK_PATHS[path], SECRET, tmp_path)
    outputs.assert_no_trace_of(SECRET)
    assert "***" in outputs.stored.decode()
    # Each channel did carry the failure: the chat's stderr and the DEBUG log.
    assert "error:" in outputs.err
    assert any("failed" in line for line in outputs.logs), outputs.logs


async def test_a_short_key_does_not_mangle_words_through_the_chat(
    tmp_path: Path,
) -> None:
    body = sse(delta(content="the key: abc; abcdef and xabc stay"), delta("stop"))
    outputs = await run_chat_against(serve(body), "abc", tmp_path)
    assert outputs.out == "the key: ***; abcdef and xabc stay\n"


async def test_a_key_split_across_events_is_redacted_in_the_live_text_too(
    tmp_path: Path,
) -> None:
    half = len(SECRET) // 2
    body = sse(
        delta(content=f"your key is {SECRET[:half]}"),
        delta(content=f"{SECRET[half:]}, keep it"),
        delta("stop"),
    )
    outputs = await run_chat_against(serve(body), SECRET, tmp_path)
    assert outputs.out == "your key is ***, keep it\n"
    outputs.assert_no_trace_of(SECRET)


async def test_a_transport_error_chain_is_scrubbed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        try:
            raise OSError(f"proxy refused {SECRET}")
        except OSError as exc:
            raise httpx.ConnectError(f"proxy said {SECRET}", request=request) from exc

    _, error = await collect(handler, SECRET)
    assert error is not None
    assert error.failure.code == "TRANSPORT"
    assert isinstance(error.__cause__, httpx.ConnectError)
    assert "proxy said ***" in str(error.__cause__)
    assert SECRET not in rendered(error)


# ------------------------------------------------------------------ fuzzed server strings

# The key is "sk-" and lowercase letters or digits: no fixed text of the runtime holds
# it, and upper-casing other text cannot produce it.
keys = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=5, max_size=30).map(
    lambda tail: f"sk-{tail}"
)
surroundings = st.text(max_size=20) | st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20
)
header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=20
)
PATHS = [
    "malformed",
    "finish_reason",
    "request_id",
    "http_message",
    "stream_error",
    "text",
    "reasoning",
    "tool_arguments",
    "tool_identity",
    "transport",
]


def fault(path: str, text: str, split: int) -> Handler:
    """A server that puts ``text`` (which embeds the key) where ``path`` says, in its
    first answer; later requests (a retry, the step after a tool call) get a reply."""
    first = _fault(path, text, split)
    later = serve(sse(delta(content="ok"), delta("stop")))
    requests = itertools.count()

    def handler(request: httpx.Request) -> httpx.Response:
        return (first if next(requests) == 0 else later)(request)

    return handler


def _fault(path: str, text: str, split: int) -> Handler:
    if path == "malformed":
        raw = ("not json " + text).replace("\r", " ").replace("\n", " ")
        return serve(sse(b"data: " + raw.encode("utf-8", "surrogatepass")))
    if path == "finish_reason":
        return serve(sse(delta(content="x"), delta(text)))
    if path == "request_id":
        return serve(b"{}", status=503, headers={"x-request-id": text})
    if path == "http_message":
        body = {"error": {"message": text, "code": text, "type": text}}
        return serve(json.dumps(body).encode(), status=400)
    if path == "stream_error":
        return serve(
            sse(delta(content="x"), {"error": {"message": text, "code": text}})
        )
    if path in ("text", "reasoning"):
        field = "content" if path == "text" else "reasoning_content"
        first, second = text[:split], text[split:]
        return serve(
            sse(delta(**{field: first}), delta(**{field: second}), delta("stop"))
        )
    if path == "tool_arguments":
        calls = [
            {
                "index": 0,
                "id": "c1",
                "function": {"name": "f", "arguments": text[:split]},
            },
            {"index": 0, "function": {"arguments": text[split:]}},
        ]
        return serve(
            sse(
                delta(tool_calls=calls[:1]),
                delta(tool_calls=calls[1:]),
                delta("tool_calls"),
            )
        )
    if path == "tool_identity":
        call = {"index": 0, "id": text, "function": {"name": text, "arguments": "{}"}}
        return serve(sse(delta(tool_calls=[call]), delta("tool_calls")))
    assert path == "transport"

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(text, request=request)

    return handler


@st.composite
def server_strings(draw: st.DrawFn) -> tuple[str, str, str, int]:
    key = draw(keys)
    path = draw(st.sampled_from(PATHS))
    around = header_text if path == "request_id" else surroundings
    text = draw(around) + key + draw(around)
    split = draw(st.integers(0, len(text)))
    return key, path, text, split


@settings(max_examples=300, deadline=None)
@given(server_strings())
def test_fuzzed_server_strings_leave_no_trace_in_the_adapter_output(
    case: tuple[str, str, str, int],
) -> None:
    key, path, text, split = case

    async def main() -> None:
        with captured_logs() as logs:
            chunks, error = await collect(fault(path, text, split), key)
        assert key not in rendered(error)
        assert key not in repr(chunks)
        assert key not in "\n".join(logs)
        # Whatever came out is valid Unicode and can be stored.
        json.dumps(repr(chunks) + rendered(error), ensure_ascii=False).encode()

    trio.run(main)


_runs = itertools.count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(server_strings())
def test_fuzzed_server_strings_leave_no_trace_through_the_chat(
    tmp_path: Path, case: tuple[str, str, str, int]
) -> None:
    key, path, text, split = case
    session_dir = tmp_path / f"run-{next(_runs)}"

    async def main() -> Outputs:
        return await run_chat_against(fault(path, text, split), key, session_dir)

    outputs = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    outputs.assert_no_trace_of(key)


async def test_tool_calls_are_redacted_in_chunks_and_blocks() -> None:
    calls = [
        {
            "index": 0,
            "id": f"call-{SECRET}",
            "function": {"name": "f", "arguments": '{"k": "' + SECRET[:5]},
        },
        {"index": 0, "function": {"arguments": SECRET[5:] + '"}'}},
    ]
    body = sse(delta(tool_calls=calls[:1]), delta(tool_calls=calls[1:]), delta("stop"))
    chunks, error = await collect(serve(body), SECRET)
    assert error is None
    assert SECRET not in repr(chunks)
    deltas = [c for c in chunks if isinstance(c, ToolCallDelta)]
    assert "".join(d.arguments_delta for d in deltas) == '{"k": "***"}'
    assert {d.id for d in deltas} == {"call-***"}
    assert not any(isinstance(c, TextDelta) for c in chunks)
