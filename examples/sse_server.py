"""A trio web server that streams an agent's turn to the browser over server-sent events.

    python examples/sse_server.py        # then open http://127.0.0.1:8000/

``GET /`` serves a page whose ``EventSource`` reads ``GET /chat?q=...``. Each chat
request opens an agent, listens to its ``agent/assistant-stream`` frames and forwards
every text delta as one SSE ``data:`` line the moment the model sends it; an attempt the
runtime does not keep (a failed attempt, retried) is announced as ``event: discard``
so the page drops its partial text; the end of the turn is ``event: done``. The HTTP side is h11 on
a trio socket stream, one request per connection. A client that goes away cancels
the handler, and leaving the agent's ``async with`` block cancels its turn.
"""

from __future__ import annotations

import json
import math
from urllib.parse import parse_qs, urlsplit

import h11
import trio

import dsh_trio as dsh

#: The runtime's default retry policy for the model.
DEFAULT_RETRY = dsh.RetryPolicy()

PAGE = b"""<!doctype html>
<meta charset="utf-8"><title>dsh_trio</title>
<form id="f"><input id="q" autofocus><button>Ask</button></form><pre id="out"></pre>
<script>
document.getElementById("f").onsubmit = (e) => {
  e.preventDefault();
  const out = document.getElementById("out");
  out.textContent = "";
  const es = new EventSource("/chat?q=" + encodeURIComponent(document.getElementById("q").value));
  es.onmessage = (m) => { out.textContent += JSON.parse(m.data); };
  es.addEventListener("discard", () => { out.textContent = ""; });
  es.addEventListener("done", () => es.close());
};
</script>
"""


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event whose data is ``data`` as JSON."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


def kept(outcome: dsh.Committed | dsh.Abandoned) -> bool:
    """Whether an attempt's text became an assistant message (a failed attempt is
    recorded as ``assistant/attempt``; an abandoned one is not recorded at all)."""
    return (
        isinstance(outcome, dsh.Committed) and outcome.event_type == "assistant/message"
    )


async def stream_turn(
    runtime: dsh.Runtime, question: str, send: trio.MemorySendChannel[bytes]
) -> None:
    """Run one turn on a fresh agent, sending its text deltas as SSE events."""
    options = dsh.AgentOptions(provider="model", model="demo")
    async with send, runtime.agents.open(options=options) as agent:

        def forward(event: dsh.AssistantStream) -> None:
            # An emit listener: plain, synchronous, never blocks (the channel is unbounded).
            frame = event.frame
            if isinstance(frame, dsh.StreamChunkFrame) and isinstance(
                frame.chunk, dsh.TextDelta
            ):
                send.send_nowait(sse(frame.chunk.text))
            elif isinstance(frame, dsh.StreamEndFrame) and not kept(frame.outcome):
                send.send_nowait(sse({}, "discard"))

        agent.scope.on("agent/assistant-stream", forward)
        agent.followup(dsh.user_message(question))
        await agent.when_idle()
        send.send_nowait(sse({}, "done"))


async def handle(stream: trio.SocketStream, runtime: dsh.Runtime) -> None:
    """Serve one HTTP/1.1 request on ``stream``, then close it."""
    conn = h11.Connection(h11.SERVER)
    request: h11.Request | None = None
    while request is None:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Request):
            request = event
        else:  # the client closed the connection
            return
    url = urlsplit(request.target.decode())

    async def respond(status: int, content_type: str, body: bytes = b"") -> None:
        headers = [("content-type", content_type), ("connection", "close")]
        if content_type != "text/event-stream":
            headers.append(("content-length", str(len(body))))
        else:
            headers.append(("cache-control", "no-cache"))
        await stream.send_all(
            conn.send(h11.Response(status_code=status, headers=headers))
        )
        if body:
            await stream.send_all(conn.send(h11.Data(data=body)))

    async with stream:
        if url.path == "/":
            await respond(200, "text/html; charset=utf-8", PAGE)
        elif url.path == "/chat":
            question = parse_qs(url.query).get("q", [""])[0]
            await respond(200, "text/event-stream")
            send, receive = trio.open_memory_channel[bytes](math.inf)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream_turn, runtime, question, send)
                async with receive:
                    async for chunk in receive:
                        await stream.send_all(conn.send(h11.Data(data=chunk)))
        else:
            await respond(404, "text/plain", b"not found\n")
        await stream.send_all(conn.send(h11.EndOfMessage()))


async def serve(
    model: dsh.ModelAdapter,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    retry_policy: dsh.RetryPolicy = DEFAULT_RETRY,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started`` receives the bound port."""
    async with dsh.open_runtime(system_prompt="Be brief.") as runtime:
        runtime.models.register("model", model, retry_policy=retry_policy)
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners[0].socket.getsockname()[1])

        async def handler(stream: trio.SocketStream) -> None:
            await handle(stream, runtime)

        await trio.serve_listeners(handler, listeners)


if __name__ == "__main__":
    from dsh_trio.testing import ScriptedModel, reply

    demo = ScriptedModel(
        default=reply("Hello from a trio server, one character at a time.")
    )
    trio.run(serve, demo)
