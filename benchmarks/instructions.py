"""Ir: the live W1, W2, W3 and W5 turns and a log's load counted in CPU instructions.

Time ratios on a shared machine move with its load; instruction counts do not. Each
figure here is the instructions one turn executes, counted by valgrind's cachegrind
(``--cache-sim=no``): a child process sets up (runtime, agent, live listener,
warm-up turns) and then runs N turns; the same child with 0 turns is counted too,
and the difference divided by N is the cost of a turn. The floor (per chunk one
checkpoint and a list append, as in W1 and W2) is counted the same way, so every
row is a ratio against a floor measured by the same method.

W1-skeleton is W1 on the minimal adapter of :mod:`benchmarks.w1_skeleton` (a
checkpoint before each text delta, nothing else), counted three ways: the floor, the
*skeleton* (the shape the public contract fixes for a live turn and nothing else: a task
per turn, a cancel scope, an event, the async-generator adapter read with ``async for``
and a two-object frame handed to a listener per delta) and dsh_trio. Its two extra rows
say what the shape itself costs over the floor and what the library adds to the shape,
free of the machine's noise.

W5 counts a whole cancelled turn: the agent-scoped listener cancels it
(``agent.cancel(UserCancel())``) on the tenth text delta and the caller waits for
``when_idle()``; the interrupted reply is settled, ``step/end`` and ``turn/end``
written. Its floor streams in a cancel scope that the consumer of the tenth delta
cancels, and appends the partial reply once the scope has exited. The wall-clock W5
rows read the latency of the cancel alone, but move with the machine's state from
one run to the next; this row tells whether a change made the cancel path cheaper.

Load counts ``load_session`` of a closed 10,000-event JSONL log (the events of
``jsonl_append``), per event, next to a floor that reads the same file and parses
each line with the JSON parser in use (``parse_json_line``): what loading adds to
reading. P1's load+resume time is a figure in seconds, which moves with the machine.

An instruction ratio is a lower bound of the time ratio: Python code that touches
more objects and more code runs fewer instructions per cycle, so the CPU-time
ratios of W1 and W2 run above these. Use this row to tell whether a change made a
turn cheaper without the noise of the machine; judge the targets by W1 and W2.

Needs ``valgrind`` on ``PATH`` (skipped otherwise) and takes a few minutes; with
``--quick`` only the children run (natively, a few turns each) to show they work.
Run alone: ``python -m benchmarks --only Ir``.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import trio

import dsh_trio as dsh
from dsh_trio.events import AssistantStream
from dsh_trio.persistence import JsonlPersistence, load_session, persist_new_session
from dsh_trio.session import Session
from dsh_trio.testing import ScriptedModel, tool_calls
from dsh_trio.values import parse_json_line

from ._harness import Context, Row, skipped
from ._scenario import (
    OPTIONS,
    PROVIDER,
    LiveCounter,
    bare_cancel_turn,
    bare_text_turn,
    bare_tool_turn,
    reply_chunks,
    scripted_reply,
)
from .jsonl_append import EVENTS_PER_TURN, append_turn
from .w1_skeleton import FrameCounter, PlainModel, skeleton_turns
from .w2_tools import _lookup_tool
from .w5_cancel import partial_kept

__all__ = ["count_turns", "run"]

NAME = "Ir"
#: (workload, turns counted in a full run: per agent for W3).
CASES: tuple[tuple[str, int], ...] = (
    ("W1", 200),
    ("W1-skeleton", 200),
    ("W1-quiet", 200),
    ("W2", 100),
    ("W3", 3),
    ("W5", 100),
    ("Load", 3),
)
#: The events of the log a Load repetition reads.
LOAD_EVENTS: Final = 10_000
#: Agents turning at once (W3 is W1's live turn on 100 agents concurrently).
_AGENTS: Final = {"W3": 100}
#: What one counted repetition stands for: a turn of each agent, or the events one
#: load reads.
_UNITS: Final = {**_AGENTS, "Load": LOAD_EVENTS}
_WARM_UP: Final = {"W3": 2}
#: The workloads also counted as a skeleton (see the module).
SKELETONS: Final = ("W1-skeleton",)
#: The text delta whose listener cancels a W5 turn (as the peers' W5 does).
CANCEL_AT: Final = 10
_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


async def _each(agents: int, body: Callable[[int], Awaitable[None]]) -> None:
    """``body(k)`` for every agent ``k``: at once when there are several."""
    if agents == 1:
        await body(0)
        return
    async with trio.open_nursery() as nursery:
        for k in range(agents):
            nursery.start_soon(body, k)


def _texts(chunks: tuple[dsh.StreamChunk, ...]) -> tuple[str, ...]:
    """The text of each text delta of ``chunks``."""
    return tuple(c.text for c in chunks if isinstance(c, dsh.TextDelta))


async def _floor(
    workload: str, turns: int, chunks: tuple[dsh.StreamChunk, ...]
) -> None:
    texts = _texts(chunks)
    turn = bare_tool_turn if workload == "W2" else bare_text_turn
    warm_up = _WARM_UP.get(workload, 20)

    async def agent(k: int) -> None:
        log: list[dict[str, str]] = []
        for i in range(warm_up + turns):
            if workload == "W5":
                await bare_cancel_turn(log, f"agent {k} turn {i}", texts, CANCEL_AT)
            else:
                await turn(log, f"agent {k} turn {i}", texts)

    await _each(_AGENTS.get(workload, 1), agent)


async def _skeleton(
    workload: str, turns: int, chunks: tuple[dsh.StreamChunk, ...]
) -> None:
    """W1's live turn with the shape and nothing else (see the module)."""
    texts = _texts(chunks)
    model = PlainModel(chunks)
    counter = FrameCounter()
    async with trio.open_nursery() as nursery:
        await skeleton_turns(
            nursery, model, _WARM_UP.get(workload, 20) + turns, counter
        )
    heard = (_WARM_UP.get(workload, 20) + turns) * len(texts)
    if counter.n != heard:
        raise RuntimeError(f"{workload}: {counter.n} text chunks heard, not {heard}")


async def _runtime(
    workload: str, turns: int, chunks: tuple[dsh.StreamChunk, ...]
) -> None:
    texts = _texts(chunks)
    model: dsh.ModelAdapter
    if workload == "W2":
        model = ScriptedModel()
    elif workload in SKELETONS:
        model = PlainModel(chunks)
    else:
        model = ScriptedModel(default=scripted_reply())
    tools = [_lookup_tool()] if workload == "W2" else []
    agents, warm_up = _AGENTS.get(workload, 1), _WARM_UP.get(workload, 20)
    async with dsh.open_runtime(models={PROVIDER: model}, tools=tools) as runtime:
        handles = [await runtime.agents.create(options=OPTIONS) for _ in range(agents)]
        counter = _Canceller(handles[0].agent) if workload == "W5" else LiveCounter()
        if workload != "W1-quiet":
            for handle in handles:
                handle.agent.scope.on("agent/assistant-stream", counter)
        if isinstance(model, ScriptedModel) and workload == "W2":
            for i in range(warm_up + turns):
                model.push(
                    tool_calls((f"call-{i}", "lookup", '{"key": "k"}')),
                    scripted_reply(),
                )

        async def agent(k: int) -> None:
            a = handles[k].agent
            for i in range(warm_up + turns):
                a.followup(dsh.user_message(f"agent {k} turn {i}"))
                await a.when_idle()

        await _each(agents, agent)
        per_turn = CANCEL_AT if workload == "W5" else len(texts)
        heard = (warm_up + turns) * agents * per_turn
        if workload != "W1-quiet" and counter.n != heard:
            raise RuntimeError(
                f"{workload}: {counter.n} text chunks heard, not {heard}"
            )
        partial = "".join(texts[:CANCEL_AT])
        if workload == "W5" and not partial_kept(handles[0].agent, partial):
            raise RuntimeError(f"W5: the last reply is not the interrupted {partial!r}")
        for handle in handles:
            await handle.dispose()


class _Canceller(LiveCounter):
    """W5's live consumer: counts the text deltas and cancels the turn on the
    :data:`CANCEL_AT`-th of each turn."""

    __slots__ = ("agent",)

    def __init__(self, agent: dsh.Agent) -> None:
        super().__init__()
        self.agent = agent

    def __call__(self, payload: AssistantStream) -> None:
        heard = self.n
        super().__call__(payload)
        if self.n != heard and self.n % CANCEL_AT == 0:
            self.agent.cancel(dsh.UserCancel())


async def _loads(kind: str, loads: int) -> None:
    """Write a closed :data:`LOAD_EVENTS`-event log, then read it ``loads`` times:
    parsed line by line (``"floor"``), or loaded as a session (``"dsh_trio"``)."""
    with tempfile.TemporaryDirectory(prefix="dsh-ir-load-") as tmp:
        root = Path(tmp)
        session = Session.create("ir-load", cwd="/bench")
        for turn in range(1, LOAD_EVENTS // EVENTS_PER_TURN + 1):
            append_turn(session, turn)
        writer = await persist_new_session(JsonlPersistence(root), session)
        path = Path(JsonlPersistence(root).path_for(session.header))
        await writer.close()
        for _ in range(loads):
            if kind == "floor":
                count = _parse_log(path)
            else:
                loaded, writer = await load_session(JsonlPersistence(root), "ir-load")
                await writer.close()
                count = loaded.next_seq
            if count != LOAD_EVENTS:
                raise RuntimeError(f"Load: {count} events read, not {LOAD_EVENTS}")


def _parse_log(path: Path) -> int:
    """The Load floor: parse every line of the log at ``path``; the events read."""
    with path.open("rb") as file:
        parsed = [parse_json_line(line) for line in file]
    return len(parsed) - 1  # the header line


def count_turns(
    workload: str,
    kind: str,
    turns: int,
    valgrind: str | None,
    *,
    gc: bool = True,
    src: str | None = None,
) -> int:
    """Instructions of a child running ``turns`` turns of ``workload`` (``kind`` is
    ``"floor"``, ``"dsh_trio"`` or, for :data:`SKELETONS`, ``"skeleton"``) after its set-up and warm-up; with no
    ``valgrind``, the child runs natively and 0 is returned.

    ``gc=False`` runs the child with the cyclic garbage collector disabled (the
    code's own instructions, see :mod:`benchmarks.ir_compare`); ``src`` is a
    directory put first on the child's ``PYTHONPATH`` (another checkout's ``src``)."""
    child = [sys.executable, "-m", __name__, workload, kind, str(turns)]
    if not gc:
        child.append("--no-gc")
    # One string hash seed for every child: the counts of two runs then differ by
    # the turns alone, not by how the dicts of each process happened to hash.
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if src is not None:
        path = os.environ.get("PYTHONPATH")
        env["PYTHONPATH"] = src if not path else f"{src}{os.pathsep}{path}"
    if valgrind is None:
        subprocess.run(child, check=True, capture_output=True, env=env)
        return 0
    done = subprocess.run(
        [
            valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            *child,
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    found = _IREFS.search(done.stderr)
    if found is None:
        raise RuntimeError(
            f"no instruction count in valgrind's output: {done.stderr[-300:]}"
        )
    return int(found.group(1).replace(",", ""))


def _kinds(workload: str) -> tuple[str, ...]:
    """The ways ``workload`` is counted."""
    if workload in SKELETONS:
        return ("floor", "skeleton", "dsh_trio")
    return ("floor", "dsh_trio")


def _ratio_row(
    workload: str,
    unit: str,
    counted: tuple[str, float],
    against: tuple[str, float],
    note: str,
) -> Row:
    """The row of ``counted``'s instructions per ``unit`` over ``against``'s (each a
    ``(kind, instructions)`` pair)."""
    (name, count), (base_name, base) = counted, against
    return Row(
        workload=NAME,
        metric=f"{workload}: instructions per {unit}, {name} / {base_name}",
        unit="x",
        samples=(count / base,),
        note=note,
        detail={base_name: base, name: count},
    )


def run(ctx: Context) -> list[Row]:
    valgrind = shutil.which("valgrind")
    if ctx.quick or valgrind is None:
        for workload, _ in CASES:  # the children work (natively, a few turns)
            for kind in _kinds(workload):
                count_turns(workload, kind, 2, None)
        why = "full run only" if valgrind else "valgrind is not installed"
        return [skipped(NAME, f"skipped: instruction counts need valgrind ({why})")]
    jobs = [
        (workload, kind, n)
        for workload, turns in CASES
        for kind in _kinds(workload)
        for n in (0, turns)
    ]
    ctx.log(f"{len(jobs)} counted runs under cachegrind, two at a time")
    with ThreadPoolExecutor(max_workers=2) as pool:
        counts = list(
            pool.map(lambda job: count_turns(job[0], job[1], job[2], valgrind), jobs)
        )
    per_turn = {
        (workload, kind): (counts[k] - counts[k - 1]) / (n * _UNITS.get(workload, 1))
        for k, (workload, kind, n) in enumerate(jobs)
        if n
    }
    rows: list[Row] = []
    for workload, _ in CASES:
        floor, runtime = per_turn[workload, "floor"], per_turn[workload, "dsh_trio"]
        unit = "event" if workload == "Load" else "turn"
        rows.append(
            _ratio_row(
                workload,
                unit,
                ("dsh_trio", runtime),
                ("floor", floor),
                f"floor {floor:,.0f}, dsh_trio {runtime:,.0f} instructions per {unit}",
            )
        )
        if workload in SKELETONS:
            shape = per_turn[workload, "skeleton"]
            rows += [
                _ratio_row(
                    workload,
                    unit,
                    ("skeleton", shape),
                    ("floor", floor),
                    f"the shape alone: skeleton {shape:,.0f} instructions per turn",
                ),
                _ratio_row(
                    workload,
                    unit,
                    ("dsh_trio", runtime),
                    ("skeleton", shape),
                    f"what the library adds to the shape: {runtime - shape:,.0f} "
                    "instructions per turn",
                ),
            ]
    return rows


def _main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="one counted child run")
    parser.add_argument("workload", choices=[w for w, _ in CASES])
    parser.add_argument("kind", choices=["floor", "skeleton", "dsh_trio"])
    parser.add_argument("turns", type=int, help="turns, or loads for Load")
    parser.add_argument(
        "--no-gc", action="store_true", help="disable the cyclic garbage collector"
    )
    args = parser.parse_args(argv)
    if args.no_gc:
        gc.disable()
    if args.workload == "Load":
        trio.run(_loads, args.kind, args.turns)
        return
    if args.kind == "skeleton" and args.workload not in SKELETONS:
        parser.error(f"{args.workload} has no skeleton (only {', '.join(SKELETONS)})")
    body = {"floor": _floor, "skeleton": _skeleton, "dsh_trio": _runtime}[args.kind]
    # The reply's chunks are collected from the scripted model before the run.
    trio.run(body, args.workload, args.turns, reply_chunks())


if __name__ == "__main__":
    _main()
