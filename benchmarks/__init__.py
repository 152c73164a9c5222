"""The dsh_trio benchmark suite.

Run it from the project root::

    python -m benchmarks                 # full run (a few minutes), writes benchmarks/results.json
    python -m benchmarks --quick         # smoke-sized run (seconds), writes results-quick.json
    python -m benchmarks --only W1,W4    # some workloads only
    python -m benchmarks --json out.json # write the JSON elsewhere

Workloads (see each module's docstring):

- **W1** (``w1_turns``): 1,000 sequential single-step turns of one agent, a
  20-delta scripted text reply, next to a bare-trio floor measured in the same run.
- **W1-growth** (``w1_growth``): µs/turn of turns 1-100, 901-1,000 and
  9,901-10,000, three agents grown to those points running their windows
  interleaved (so the machine's drift moves all three alike).
- **W1-shape** (``w1_shape``): the live W1 turn with 1, 20 and 80 text deltas, fitted
  as ``fixed + per_chunk · chunks`` for dsh_trio and for the floor: what the runtime
  adds per turn and per chunk.
- **W1-skeleton** (``w1_skeleton``): the live W1 turn next to a skeleton with only
  the shape the contract fixes (a task per turn under a cancel scope, an event, an
  async-generator adapter, a frame per delta): how far that shape stays from the
  floor and what the library adds to it.
- **W1-otel** (``w1_otel``): W1's turns with :func:`dsh_trio.observe.instrument` off,
  on with the OpenTelemetry API's no-op default, and on with the SDK (batch and simple
  span processors, spans dropped by the exporter), alternating in one run, as on/off
  ratios; beside them the SDK's own cost for the same spans and records, and what is
  left of the difference without it (needs the ``otel`` extra, and the SDK for its
  rows).
- **W2** (``w2_tools``): one tool call then a final answer per turn (runs once tools
  are available).
- **W3** (``w3_concurrent``): 100 agents at once, 10 follow-up turns each.
- **W4** (``w4_memory``): tracemalloc and RSS bytes per idle agent, 1,000 idle agents,
  and the trio tasks they hold.
- **W4-turns** (``w4_turns``): heap and RSS bytes a long live session (JSONL store)
  keeps per further turn and while idle, its settled past kept as lines or as values.
- **W5** (``w5_cancel``): cancel → ``when_idle()`` latency with a stream hung after
  5 chunks, median of 200 trials.
- **Ir** (``instructions``): the live W1 turn, W1 with no listener, W2, W3, a W5
  turn cancelled by its listener on the tenth text delta and the load of a
  10,000-event log (per event), counted in CPU instructions under valgrind (when
  installed; full run only), each as a ratio to the floor counted the same way: a
  figure the machine's load cannot move. ``python -m benchmarks.ir_compare
  OTHER_SRC`` counts dsh_trio's turns here and in another checkout, with the garbage
  collector off, to tell whether a change made a turn cheaper.
- **P1** (``p1_jsonl``): JSONL append throughput per durability, load+resume of a
  100,000-event session (``jsonl_append.main``).
- **S1** (``s1_derive``): ``Session.append`` / ``derive_messages()`` cost as the log
  grows (``derive_messages.main``).
- **Peers** (``peers``): the W1 and W4 workloads on pydantic-ai and openai-agents
  when installed (``pip install -e '.[bench]'``), as ratios to dsh_trio.

CPU time (``time.process_time_ns``) is the primary figure; wall time is shown too.
Each figure is the median of 5 repetitions (``--reps``), with the min-max range.
"""
