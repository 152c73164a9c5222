"""The runtime: the nursery that owns every agent, and what its agents share."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, NoReturn

import trio

from ..composition import (
    CompositionSections,
    CompositionTools,
    DefaultModel,
    PresetDefinition,
    PresetRegistry,
    RuntimeConfig,
    load_runtime_config,
)
from ..events import AgentCreated, EventBus
from ..llm import ModelAdapter, ModelRegistry, RetryPolicy
from ..loop import AgentServices, SystemPrompt
from ..persistence import SessionPersistence
from ..persistence.postgres import PostgresPersistence
from ..session import Session
from ..tools import Tool, ToolRegistry
from ..values import AgentOptions, SessionId
from ._collector import RuntimeCollector
from ._fleet import serve
from ._registry import AgentRegistry
from ._retry import install_retry_listener
from ._sessions import SessionStore

__all__ = ["Runtime", "open_runtime"]


class Runtime:
    """Everything agents share: registry, event bus, models, tools, prompt, sessions.

    Obtained from :func:`open_runtime`; no public constructor.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        persistence: SessionPersistence | None,
        system_prompt: str | None,
        tools: ToolRegistry,
        max_parallel_tool_calls: int,
        profile: str | os.PathLike[str] | None = None,
        collector: RuntimeCollector | None = None,
    ) -> None:
        self._nursery = nursery
        self.default_model = DefaultModel(profile)
        self.persistence = persistence
        self.events = EventBus(parent_of=self._scope_parent)
        # The scope parents are an agent's owner (the agent registry reports each
        # change) and a bound root agent's generation (the preset registry reports
        # each change of a binding), so the bus may count changes instead of walking.
        self.events._track_owners()
        self.models = ModelRegistry()
        self.prompt = SystemPrompt(system_prompt)
        sessions: dict[SessionId, Session] = {}  # the agent registry's to change
        self.sessions = SessionStore(sessions, self)
        self.max_parallel_tool_calls = max_parallel_tool_calls
        self.tools = tools
        self.presets = PresetRegistry(
            bus=self.events,
            tools=tools,
            spawn=self._spawn,
            is_published=lambda agent: (
                self.agents.published_handle(agent.id) is not None
            ),
        )
        self._services = AgentServices(
            bus=self.events,
            models=self.models,
            prompt=self.prompt,
            spawn=self._spawn,
            tools=CompositionTools(tools, self.presets),
            composition=CompositionSections(self.presets),
        )
        self.agents = AgentRegistry(
            self._services, persistence, self.presets, sessions, collector
        )
        if isinstance(persistence, PostgresPersistence):
            # Whoever holds a session delivers its mail, serving or not.
            self.events.on("agent/created", self._deliver_mail)

    async def _deliver_mail(self, created: AgentCreated) -> None:  # noqa: ASYNC910  # a listener inside creation: it must not reschedule it
        """Start the mail courier once an agent is live here (``agent/created``)."""
        self.sessions._mail("mail delivery").start_courier(self._spawn)

    async def serve(  # noqa: ASYNC128  # the fleet's loop calls task_status.started()
        self,
        *,
        options: AgentOptions | None = None,
        max_active: int = 1000,
        passivate_after_s: float = 300.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> NoReturn:
        """Serve the sessions of the PostgreSQL store as one worker of a fleet; runs until cancelled.

        Claims sessions with mail whose lease is free or expired (the oldest mail
        first; workers claiming at once get different sessions), activates each
        (``agents.resume``, which closes a turn a dead worker left open, or
        ``agents.create(session_id, options=options)`` for a session not stored
        yet) and emits ``agent/activated``; delivers its mail and lets its turns
        run. A claimed turn that a crash cut off before it recorded its message is
        queued again, and input still pending in a resumed inbox starts its turn.
        An agent idle for ``passivate_after_s`` seconds with nothing pending is
        flushed and disposed, which releases its lease, and ``agent/passivated``
        is emitted; its next mail activates it again, on whichever worker claims
        it. At most ``max_active`` agents are activated by this call at once
        (agents the application created itself are not counted, and they receive
        their mail too). ``task_status.started()`` is called once the worker
        listens for mail. When cancelled, the agents it activated stay live until
        the runtime closes (which disposes them).

        Example::

            store = PostgresPersistence("postgresql:///agents")
            async with dsh.open_runtime(persistence=store, models=models) as runtime:
                await runtime.serve(options=dsh.AgentOptions(provider="p", model="m"))

        Raises:
            PersistenceNotConfiguredError: the store is not the PostgreSQL one.
            ValueError: ``max_active`` is not a positive int, or
                ``passivate_after_s`` is negative or not a number.
        """
        room = self.sessions._mail("runtime.serve()")
        given: object = max_active
        if not isinstance(given, int) or isinstance(given, bool) or max_active < 1:
            raise ValueError(f"max_active must be a positive int, got {max_active!r}")
        after: object = passivate_after_s
        if (
            not isinstance(after, (int, float))
            or isinstance(after, bool)
            or not passivate_after_s >= 0
        ):
            raise ValueError(
                f"passivate_after_s must be a number >= 0, got {passivate_after_s!r}"
            )
        room.serving += 1
        try:
            await serve(
                self,
                room,
                options=options,
                max_active=max_active,
                passivate_after_s=float(passivate_after_s),
                task_status=task_status,
            )
        finally:
            room.serving -= 1
            room.nudge()  # the courier delivers again

    def _scope_parent(self, scope: object) -> object | None:
        """An event scope's parent: an agent's owner, else its preset generation."""
        owner = self.agents.owner_of(scope)
        return owner if owner is not None else self.presets.scope_parent(scope)

    def _spawn(
        self,
        fn: Callable[..., Awaitable[object]],
        *args: object,
        name: str | None = None,
    ) -> None:
        """Start ``fn(*args)`` in the runtime nursery (drivers, writers, teardowns).

        ``name`` names the task; ``None`` lets trio derive it from ``fn``.
        """
        self._nursery.start_soon(fn, *args, name=name)


async def _compose(
    runtime: Runtime,
    presets: Sequence[PresetDefinition],
    default_preset: str | None,
    loaded: RuntimeConfig | None,
) -> None:
    """Register the presets (the config's first), then start its declared agents."""
    for definition in (*(loaded.presets if loaded else ()), *presets):
        await runtime.presets.register(definition)
    if default_preset is None and loaded is not None:
        default_preset = loaded.default_preset
    runtime.presets.default = default_preset
    if loaded is not None:
        runtime.agents.start_declared(loaded.agents, loaded.default_model)
    await trio.lowlevel.checkpoint()


async def _aclose(runtime: Runtime) -> None:
    """Dispose every live agent; blocks until all are gone (see ``open_runtime``).

    Declared agents still starting are stopped first; preset generations are
    torn down last.
    """
    errors: list[Exception] = []
    try:
        await runtime.agents.aclose()
    except ExceptionGroup as group:
        errors += group.exceptions
    errors += await runtime.presets.aclose()
    if errors:
        raise ExceptionGroup("disposing the runtime's agents failed", errors)


async def _close_after(runtime: Runtime, exc: BaseException) -> None:
    """Dispose every agent after the runtime block raised ``exc``; never mask ``exc``.

    Runs inside the caller's shielded scope. If disposal fails too, the block's own
    exception and the disposal failures are raised together in one group, so
    ``except*`` on either matches.
    """
    try:
        await _aclose(runtime)
    except Exception as failed:
        if isinstance(exc, GeneratorExit):
            raise
        failures = (
            list(failed.exceptions) if isinstance(failed, ExceptionGroup) else [failed]
        )
        raise BaseExceptionGroup(  # noqa: ASYNC104  # exc (Cancelled too) is re-raised inside the group
            "the runtime block raised, and disposing its agents failed",
            [exc, *failures],
        ) from None


@asynccontextmanager
async def open_runtime(
    *,
    models: Mapping[str, ModelAdapter] | None = None,
    tools: Sequence[Tool] = (),
    persistence: SessionPersistence | None = None,
    system_prompt: str | None = None,
    max_parallel_tool_calls: int = 10,
    presets: Sequence[PresetDefinition] = (),
    default_preset: str | None = None,
    config: str | os.PathLike[str] | None = None,
    profile: str | os.PathLike[str] | None = None,
) -> AsyncIterator[Runtime]:
    """Open a runtime whose nursery owns every agent created through it.

    Leaving the block disposes every live agent (children before parents) and
    waits for every drain, also when the block raised; nothing keeps running. When
    the block raised and a disposal failed too, both are raised together in one
    exception group (``except*`` on the block's exception matches); disposal
    failures alone are raised as an :class:`ExceptionGroup`.

    While the runtime holds 1,000 live agents or more, it raises the generation
    thresholds of CPython's collector (``gc.set_threshold``) to at least
    ``(10_000, 20, 100)``: the short-lived objects of thousands of turns in flight
    then stop triggering full walks of every agent. It puts back the thresholds it
    found once it holds fewer than 500, and when the block is left or starts
    disposing its agents (also when it raised or was cancelled). It only ever
    raises them: an application's higher setting, or a first threshold of 0, is
    kept, and thresholds the application sets while they are raised stay when the
    runtime lets go. Several runtimes in one process share the setting (the last to
    let go restores it). Nothing is frozen: while the thresholds are raised, once
    the agents disposed since the last full collection reach a quarter of the live
    ones, the runtime runs a full collection (``gc.collect()``) itself, so disposed
    agents are freed about as soon as CPython's own setting would free them.
    Freezing the agents as well is the opt-in
    :func:`~dsh_trio.nursery.agent_collector`.

    Example::

        async with dsh.open_runtime(models={"scripted": ScriptedModel(reply("hi"))}) as rt:
            async with rt.agents.open(options=dsh.AgentOptions(provider="scripted", model="m")) as agent:
                agent.followup(dsh.user_message("hello"))
                await agent.when_idle()

    Args:
        models: provider name → adapter, registered with the default retry policy.
        tools: tool definitions (``@dsh.tool`` functions) to register.
        persistence: where sessions are stored (e.g. ``JsonlPersistence(root)``).
        system_prompt: the persona section of the system prompt.
        max_parallel_tool_calls: the bound of the parallel tool pool.
        presets: preset definitions to register (``runtime.presets``).
        default_preset: the preset a root agent binds to when none is named.
        config: a runtime config file (YAML: ``presets``, ``default_preset``,
            ``default_model``, ``agents``; see the presets guide).
        profile: the TOML file that holds the saved default model
            (``runtime.default_model``; ``~`` is expanded; it need not exist yet).

    Raises:
        PresetError: a preset or the config is malformed, or an id is registered twice.
    """
    executor = _make_tool_executor(tools, max_parallel_tool_calls)  # checks the bound
    loaded = await _load_config(config)
    block = _runtime_block(
        models or {},
        presets,
        default_preset,
        loaded,
        persistence=persistence,
        system_prompt=system_prompt,
        tools=executor,
        max_parallel_tool_calls=max_parallel_tool_calls,
        profile=profile,
    )
    async with block as runtime:
        yield runtime


async def _load_config(config: str | os.PathLike[str] | None) -> RuntimeConfig | None:
    """Read the runtime config in a worker thread (``None`` without one)."""
    if config is None:
        await trio.lowlevel.checkpoint()
        return None
    return await trio.to_thread.run_sync(load_runtime_config, config)


@asynccontextmanager
async def _runtime_block(
    models: Mapping[str, ModelAdapter],
    presets: Sequence[PresetDefinition],
    default_preset: str | None,
    loaded: RuntimeConfig | None,
    **kwargs: Any,
) -> AsyncIterator[Runtime]:
    """The nursery of :func:`open_runtime`: compose, yield, then dispose everything.

    The collector's thresholds, raised while the runtime holds many agents, are put
    back once it has closed, however it exits.
    """
    failed: Exception | None = None
    collector = RuntimeCollector()
    try:
        async with trio.open_nursery() as nursery:
            runtime = Runtime(nursery, collector=collector, **kwargs)
            install_retry_listener(runtime.events, runtime.models)
            for provider, adapter in models.items():
                runtime.models.register(provider, adapter, retry_policy=RetryPolicy())
            try:
                await _compose(runtime, presets, default_preset, loaded)
            except Exception as exc:  # raised bare below, once the nursery has closed
                with trio.CancelScope(shield=True):
                    await _close_after(runtime, exc)
                failed = exc
            else:
                try:
                    yield runtime
                except BaseException as exc:
                    with trio.CancelScope(shield=True):
                        await _close_after(runtime, exc)
                    raise
                with trio.CancelScope(shield=True):
                    await _aclose(runtime)
    finally:
        collector.close()
    if failed is not None:
        raise failed


def _make_tool_executor(tools: Sequence[Tool], max_parallel: int) -> ToolRegistry:
    registry = ToolRegistry(max_parallel_tool_calls=max_parallel)
    for t in tools:
        registry.register(t)
    return registry
