"""The offline demo model: a deterministic adapter so ``dsh-trio chat`` runs anywhere.

It needs no network and no key. It reads the user's last message and streams a
short canned reply that says what it understood and how to connect a real model. Asked
for typed output (a request that offers the ``final_result`` tool), it calls that tool
with placeholder arguments that match the tool's schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Final

import attrs
import trio

from ..llm import ModelRequest
from ..values import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    JsonValue,
    Message,
    StreamChunk,
    TextBlock,
    TextDelta,
    ToolCallBlock,
    ToolCallDelta,
    ToolSource,
    Usage,
    UserMessage,
    UserSource,
)

__all__ = [
    "OFFLINE_MODEL",
    "OFFLINE_PROVIDER",
    "OfflineModel",
    "offline_arguments",
    "offline_reply",
]

#: The provider name the chat registers the offline model under.
OFFLINE_PROVIDER: Final = "offline"
#: The model name requests to the offline model carry.
OFFLINE_MODEL: Final = "offline-demo"

_QUOTE_LIMIT: Final = 160
_WORDS_PER_CHUNK: Final = 3
_GREETINGS: Final = frozenset(
    {"hello", "hi", "hey", "hallo", "hola", "bonjour", "moin", "servus"}
)
_TOKEN: Final = re.compile(r"\S+\s*|\s+")

_HOW_TO_CONNECT: Final = (
    "I am the offline demo model built into dsh-trio: I run without network or API "
    "key, so all I can do is repeat what I understood. To talk to a real model, "
    "start the chat with one, for example:\n"
    "  dsh-trio chat --provider deepseek   (deepseek-flash; reads DEEPSEEK_API_KEY)\n"
    "  dsh-trio chat --base-url http://localhost:11434/v1 --model llama3.2   (any OpenAI-compatible server)"
)
_REMINDER: Final = "(Offline demo model: /help shows how to connect a real one.)"
#: The tool a turn asked for typed output offers (``Agent.run(output_type=...)``).
_FINAL_RESULT: Final = "final_result"


def _text_of(message: Message) -> str:
    return "".join(
        block.text for block in message.content if isinstance(block, TextBlock)
    )


def _user_texts(messages: Sequence[Message]) -> list[str]:
    return [
        _text_of(m)
        for m in messages
        if isinstance(m, UserMessage) and isinstance(m.source, UserSource)
    ]


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _QUOTE_LIMIT:
        flat = flat[: _QUOTE_LIMIT - 3].rstrip() + "..."
    return flat


def offline_reply(messages: Sequence[Message]) -> str:
    """The offline model's answer to a conversation (pure and deterministic).

    The reply quotes the user's last message, counts the user's messages so far
    (which shows that the history reached the model), and explains how to configure a
    real model on the first message only.

    Example::

        >>> from dsh_trio import user_message
        >>> offline_reply([user_message("hello")]).splitlines()[0]
        'Hello! You said: "hello" (your message #1 in this conversation).'
    """
    said = _user_texts(messages)
    number = len(said)
    last = _quote(said[-1]) if said else ""
    if not last:
        first = "I did not receive any text."
    else:
        words = last.lower().split()
        greeting = "Hello! " if words and words[0].strip("!,.?") in _GREETINGS else ""
        kind = ", a question" if last.endswith("?") else ""
        first = f'{greeting}You said: "{last}" (your message #{number} in this conversation{kind}).'
    tail = _HOW_TO_CONNECT if number <= 1 else _REMINDER
    return f"{first}\n\n{tail}"


def _placeholder(schema: object, text: str) -> JsonValue:
    """A value that matches ``schema`` (the subset typed output writes)."""
    if not isinstance(schema, Mapping):
        return None
    alternatives = schema.get("anyOf")
    if isinstance(alternatives, list) and alternatives:
        return _placeholder(alternatives[0], text)
    allowed = schema.get("enum")
    if isinstance(allowed, list) and allowed:
        first: JsonValue = allowed[0]
        return first
    kind = schema.get("type")
    if kind == "string":
        return text
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        properties = schema.get("properties")
        required = schema.get("required")
        if not isinstance(properties, Mapping) or not isinstance(required, list):
            return {}
        return {
            key: _placeholder(properties.get(key), text)
            for key in required
            if isinstance(key, str)
        }
    return None


def offline_arguments(parameters: object, messages: Sequence[Message]) -> str:
    """The offline model's arguments for a ``final_result`` call (pure, deterministic).

    Every required key gets a placeholder of its schema's kind: the user's last
    message (quoted as in :func:`offline_reply`) for a string, ``0`` for a number,
    ``false``, ``[]``, the first value of an enum, an object's required keys in turn.

    Example::

        >>> from dsh_trio import user_message
        >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}},
        ...           "required": ["n"]}
        >>> offline_arguments(schema, [user_message("hi")])
        '{"n": 0}'
    """
    said = _user_texts(messages)
    text = _quote(said[-1]) if said else ""
    return json.dumps(_placeholder(parameters, text), ensure_ascii=False)


def _final_result_call(request: ModelRequest) -> ToolCallBlock | None:
    """The ``final_result`` call to answer ``request`` with, if it asks for one.

    The tool must be offered, and the last message must not be a tool result (the
    model answers a result of its own call with text, so it never loops).
    """
    messages = request.messages
    if messages:
        last = messages[-1]
        if isinstance(last, UserMessage) and isinstance(last.source, ToolSource):
            return None
    for tool in request.tools:
        if isinstance(tool, Mapping) and tool.get("name") == _FINAL_RESULT:
            arguments = offline_arguments(tool.get("parameters"), messages)
            call_id = f"offline-{_FINAL_RESULT}-{len(messages)}"
            return ToolCallBlock(call_id, _FINAL_RESULT, arguments)
    return None


def _chunks(text: str) -> list[str]:
    tokens = _TOKEN.findall(text)
    return [
        "".join(tokens[i : i + _WORDS_PER_CHUNK])
        for i in range(0, len(tokens), _WORDS_PER_CHUNK)
    ]


@attrs.define(eq=False)
class OfflineModel:
    """A :class:`~dsh_trio.llm.ModelAdapter` that needs no network: the chat's default.

    Each request is answered with :func:`offline_reply` of its messages, streamed as
    one text block in several deltas, then ``Usage`` (word counts) and
    ``Finish(stop)``. A request that offers the ``final_result`` tool of typed output
    (and does not end with a tool result) is answered with one call of that tool
    instead, its arguments from :func:`offline_arguments`, and ``Finish(tool-calls)``. The stream checkpoints before every chunk, so cancellation takes
    effect at once; with ``chunk_delay`` (seconds, meant for an interactive terminal
    only) it also sleeps between chunks to look like a live model.

    Example::

        async with dsh.open_runtime(models={"offline": OfflineModel()}) as runtime:
            ...

    Args:
        chunk_delay: seconds to wait between chunks (``0`` waits for nothing).

    Raises:
        ValueError: ``chunk_delay`` is negative.
    """

    chunk_delay: float = attrs.field(default=0.0, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not self.chunk_delay >= 0:
            raise ValueError(
                f"OfflineModel chunk_delay must be >= 0 seconds, got {self.chunk_delay!r}"
            )

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        """Stream the canned reply to ``request``.

        Checkpoints before each chunk (and sleeps ``chunk_delay`` between text deltas);
        cancellation stops the stream there.
        """
        words_in = sum(len(_text_of(m).split()) for m in request.messages)
        out: list[StreamChunk]
        call = _final_result_call(request)
        if call is not None:
            out = [
                BlockStart(0, "tool-call"),
                ToolCallDelta(0, call.id, call.name, call.arguments),
                BlockEnd(0, call),
                Usage(words_in, len(call.arguments.split())),
                Finish(FinishReason("tool-calls")),
            ]
        else:
            text = offline_reply(request.messages)
            out = [BlockStart(0, "text")]
            out.extend(TextDelta(0, part) for part in _chunks(text))
            out.append(BlockEnd(0, TextBlock(text)))
            out.append(Usage(words_in, len(text.split())))
            out.append(Finish(FinishReason("stop")))
        for chunk in out:
            if self.chunk_delay and isinstance(chunk, TextDelta):
                await trio.sleep(self.chunk_delay)
            else:
                await trio.lowlevel.checkpoint()
            yield chunk
        await trio.lowlevel.checkpoint()
