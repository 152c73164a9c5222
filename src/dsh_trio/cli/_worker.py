"""``dsh-trio worker``: one worker process of a fleet serving the sessions of a shared store.

``dsh-trio worker --store URL [--config FILE] [--max-active N] [--passivate-after S]
[--lease S]`` runs ``runtime.serve`` until interrupted (Ctrl-C or SIGTERM). ``--lease``
is the store's ``PostgresPersistence(lease_s=...)``, not a parameter of ``serve``:
how long the leases of this worker outlive its last heartbeat. The agents' model is
the config's ``default_model`` (a known provider, its key from the environment),
else the offline demo model. Once the worker listens for mail it prints one line
on stderr: ``dsh-trio worker: serving ...``.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from typing import Any

import trio

from ..composition import load_runtime_config
from ..nursery import open_runtime
from ..persistence.postgres import PostgresPersistence
from ..values import AgentOptions
from ._config import ModelChoice, UsageError, offline_choice, resolve_model
from ._flags import Commands
from ._store import STORE_ENV, store_of

__all__ = ["add_worker_command", "run_worker"]

_DESCRIPTION = """\
Serve the sessions of a shared PostgreSQL store as one worker of a fleet: take
sessions that have mail (runtime.sessions.followup / steer / cancel from any
process) and whose lease is free or expired, resume them (a turn a dead worker
left open is closed as interrupted), deliver their mail and run their turns. An
agent idle for --passivate-after seconds is written, disposed and its lease
released; its next mail activates it again, here or on another worker. Run as
many workers as you like; stop one with Ctrl-C or SIGTERM (or lose it: its
sessions move to the others once its leases expire, after --lease seconds)."""


def add_worker_command(commands: Commands) -> None:
    """Add the ``worker`` subcommand."""
    worker = commands.add_parser(
        "worker",
        help="serve the sessions of a shared PostgreSQL store (one worker of a fleet)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    worker.add_argument(
        "--store",
        metavar="URL",
        help=f"the shared PostgreSQL store, postgresql://... (default: ${STORE_ENV})",
    )
    worker.add_argument(
        "--config",
        metavar="FILE",
        help="a runtime config (YAML: presets, default_model); its default_model "
        "is the agents' model (default: the offline demo model)",
    )
    worker.add_argument(
        "--max-active",
        metavar="N",
        type=_positive_int,
        default=1000,
        help="the most agents this worker holds at once (default: 1000)",
    )
    worker.add_argument(
        "--passivate-after",
        metavar="S",
        type=_seconds,
        default=300.0,
        help="passivate an agent idle this many seconds (default: 300)",
    )
    worker.add_argument(
        "--lease",
        metavar="S",
        type=_lease_seconds,
        default=30.0,
        help="how long the session leases of this worker outlive its last heartbeat "
        "(renewed every S/3): a worker that dies hands its sessions over after at "
        "most S seconds (default: 30)",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"N must be a positive integer, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(
            f"S must be a number of seconds >= 0, got {text!r}"
        )
    return value


def _lease_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"S must be a positive, finite number of seconds, got {text!r}"
        )
    return value


def _choice(config: str | None) -> ModelChoice:
    if config is None:
        return offline_choice()
    loaded = load_runtime_config(config)
    model = loaded.default_model
    if model is None or model.provider in (None, "offline"):
        return offline_choice()
    return resolve_model(
        provider=model.provider,
        model=model.model,
        base_url=None,
        api_key_env=None,
        environ=os.environ,
    )


def run_worker(args: argparse.Namespace) -> int:
    """The ``worker`` command: serve until interrupted; returns the exit status."""
    dsn = store_of(args)
    if dsn is None:
        raise UsageError(f"name the shared store with --store URL or ${STORE_ENV}")
    choice = _choice(args.config)
    options = AgentOptions(provider=choice.provider, model=choice.model)

    async def serve() -> int:
        store = PostgresPersistence(dsn, lease_s=args.lease)
        try:
            async with open_runtime(
                models={choice.provider: choice.adapter},
                persistence=store,
                config=args.config,
            ) as runtime:
                with trio.open_signal_receiver(signal.SIGTERM) as signals:
                    async with trio.open_nursery() as nursery:

                        async def stop() -> None:
                            async for _ in signals:
                                nursery.cancel_scope.cancel()

                        nursery.start_soon(stop)
                        await nursery.start(_serve, runtime, options, args, store)
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()
        return 0

    return trio.run(serve)


async def _serve(  # noqa: ASYNC114  # started with nursery.start only here
    runtime: Any,
    options: AgentOptions,
    args: argparse.Namespace,
    store: PostgresPersistence,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: runtime.serve(
                options=options,
                max_active=args.max_active,
                passivate_after_s=args.passivate_after,
                task_status=task_status,
            )
        )
        print(
            f"dsh-trio worker: serving {store.location} with {options.provider}/"
            f"{options.model} (pid {os.getpid()}, max-active {args.max_active}, "
            f"passivate after {args.passivate_after:g} s, lease {args.lease:g} s)",
            file=sys.stderr,
            flush=True,
        )
        task_status.started()
