"""``dsh-trio`` for the terminal tests, with a fake OpenAI-compatible server.

Run as a script: the arguments are ``dsh-trio``'s. ``--base-url`` routes reach a
fake adapter that replies ``reply from MODEL via URL``, so no network is used. With
``DSH_TEST_FAIL_ONCE`` set, the first request streams ``Alpha `` and then fails
(retryable); the retry replies ``Alpha beta gamma``. With ``DSH_TEST_GATE`` naming a
FIFO, the first request streams ``Alpha `` and waits until the test writes a line to
the FIFO, then streams ``omega``: the reply is still streaming for as long as the
test wants, without any clock. With ``DSH_TEST_FAIL_AUTH`` set, every request fails
at once with an error that is not retried (``AUTH``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncGenerator

import trio

from dsh_trio.cli import _config, main
from dsh_trio.errors import LlmError
from dsh_trio.llm import ModelRequest
from dsh_trio.values import (
    BlockEnd,
    BlockStart,
    Finish,
    FinishReason,
    LlmFailure,
    StreamChunk,
    TextBlock,
    TextDelta,
    Usage,
)


class FakeServer:
    requests = 0

    def __init__(self, url: str, *, api_key: str | None = None) -> None:
        self.url = url

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamChunk, None]:
        FakeServer.requests += 1
        await trio.lowlevel.checkpoint()
        gate = os.environ.get("DSH_TEST_GATE")
        if os.environ.get("DSH_TEST_FAIL_AUTH"):
            raise LlmError(LlmFailure("the key was refused", "AUTH"))
        if gate and FakeServer.requests == 1:
            yield BlockStart(0, "text")
            yield TextDelta(0, "Alpha ")
            await trio.to_thread.run_sync(
                _wait_for_a_line, gate, abandon_on_cancel=True
            )
            yield TextDelta(0, "omega")
            text = "Alpha omega"
        elif os.environ.get("DSH_TEST_FAIL_ONCE"):
            yield BlockStart(0, "text")
            yield TextDelta(0, "Alpha ")
            if FakeServer.requests == 1:
                raise LlmError(LlmFailure("connection reset", "SERVER"))
            yield TextDelta(0, "beta gamma")
            text = "Alpha beta gamma"
        else:
            text = f"reply from {request.model} via {self.url}"
            yield BlockStart(0, "text")
            yield TextDelta(0, text)
        yield BlockEnd(0, TextBlock(text))
        yield Usage(3, 4)
        yield Finish(FinishReason("stop"))


def _wait_for_a_line(fifo: str) -> None:
    with open(fifo, encoding="utf-8") as f:
        f.readline()


setattr(_config, "OpenAICompatibleAdapter", FakeServer)  # noqa: B010

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
