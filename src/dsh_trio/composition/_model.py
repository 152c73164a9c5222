"""The default model: a saved provider/model selection, and the route rewrite that applies it.

``runtime.default_model`` (:class:`DefaultModel`) reads and rewrites the
``[default_model]`` table of a TOML profile the runtime owns::

    [default_model]
    provider = "deepseek"
    model = "deepseek-flash"
    reasoning_effort = "high"    # optional

:func:`install_model_selection` routes every request to the selection and, when it
differs from the route a session last logged, adds a durable notice telling the
model that the turns above were written by another model.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import tomllib
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

import attrs
import tomli_w
import trio

from .._files import make_dirs, read_document
from ..errors import ProfileError, UnusableFileError
from ..loop import new_message_id
from ..values import (
    CallConfig,
    Enter,
    PluginSource,
    PreStepDecision,
    TextBlock,
    UserMessage,
)

if TYPE_CHECKING:
    from ..events import EventBus
    from ..loop import Agent, PreStep, RequestProposal

__all__ = [
    "MODEL_SELECTION_PLUGIN",
    "PROFILE_SECTION",
    "DefaultModel",
    "ModelSelection",
    "SelectionRuntime",
    "install_model_selection",
    "model_changed_notice",
]

#: The profile table that holds the selection.
PROFILE_SECTION: Final = "default_model"
#: The plugin id on the ``[model changed ...]`` notice messages.
MODEL_SELECTION_PLUGIN: Final = "model-selection"


def _non_blank(
    instance: object, attribute: attrs.Attribute[Any], value: object
) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(
            f"ModelSelection.{attribute.name} must be a non-blank str, got {value!r}"
        )


def _blank_or_none(
    instance: object, attribute: attrs.Attribute[Any], value: object
) -> None:
    if value is not None:
        _non_blank(instance, attribute, value)


@attrs.frozen
class ModelSelection:
    """A provider, a model and optionally a reasoning effort (``None``: the model's default).

    The fields are given by position or by name, in the order
    ``ModelSelection(provider, model, reasoning_effort=None)``.

    Example::

        selection = dsh.ModelSelection(provider="deepseek", model="deepseek-flash")

    Raises:
        ValueError: a field is blank or not a ``str``.
    """

    provider: str = attrs.field(validator=_non_blank)
    model: str = attrs.field(validator=_non_blank)
    reasoning_effort: str | None = attrs.field(default=None, validator=_blank_or_none)


def _selection_of(raw: object, where: str) -> ModelSelection | None:
    """The selection a profile's ``[default_model]`` table holds (``None`` if absent)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ProfileError(where, f"[{PROFILE_SECTION}] must be a table")
    for key in ("provider", "model"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ProfileError(
                where, f"[{PROFILE_SECTION}].{key} must be a non-blank string"
            )
    effort = raw.get("reasoning_effort")
    if effort is not None and (not isinstance(effort, str) or not effort.strip()):
        raise ProfileError(
            where, f"[{PROFILE_SECTION}].reasoning_effort must be a non-blank string"
        )
    return ModelSelection(
        provider=raw["provider"], model=raw["model"], reasoning_effort=effort
    )


def _read_document(path: Path) -> dict[str, Any]:
    """The profile's TOML document; ``{}`` when the file does not exist. Blocking.

    Only a regular file of at most 1 MiB is read (a FIFO or a device is refused
    before it is read).
    """
    try:
        data = read_document(str(path))
    except FileNotFoundError:
        return {}
    except UnusableFileError as exc:
        raise ProfileError(str(path), f"cannot be read: it {exc.problem}") from exc
    except OSError as exc:
        raise ProfileError(str(path), f"cannot be read ({exc})") from exc
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(str(path), f"is not valid TOML ({exc})") from exc


def _replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a synced temporary file renamed over it.

    A crash at any point leaves ``path`` either as it was or fully rewritten. Blocking.
    """
    make_dirs(str(path.parent))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # A new profile keeps mkstemp's owner-only mode.
        with contextlib.suppress(FileNotFoundError):
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power loss
    finally:
        os.close(dir_fd)


def _rewrite(path: Path, selection: ModelSelection) -> None:
    """Set the selection in the profile, keeping every other key. Blocking."""
    document = _read_document(path)
    table = document.get(PROFILE_SECTION)
    if table is not None and not isinstance(table, dict):
        raise ProfileError(str(path), f"[{PROFILE_SECTION}] must be a table")
    entry = dict(table or {})
    entry["provider"] = selection.provider
    entry["model"] = selection.model
    if selection.reasoning_effort is None:
        entry.pop("reasoning_effort", None)
    else:
        entry["reasoning_effort"] = selection.reasoning_effort
    document[PROFILE_SECTION] = entry
    _replace_file(path, tomli_w.dumps(document).encode("utf-8"))


class DefaultModel:
    """The saved default provider/model of a runtime (``runtime.default_model``).

    Backed by a TOML profile (``open_runtime(profile=path)``); without one it has no
    selection and saving is a no-op. The runtime does not route agents by it on its
    own: pass the selection as ``AgentOptions`` or call :func:`install_model_selection`.

    Example::

        async with dsh.open_runtime(profile="~/.dsh/profile.toml") as runtime:
            await runtime.default_model.save_selection(
                dsh.ModelSelection(provider="deepseek", model="deepseek-flash")
            )
            runtime.default_model.current_selection()  # ModelSelection(provider='deepseek', ...)
    """

    def __init__(self, profile: str | os.PathLike[str] | None = None) -> None:
        self._path = (
            None if profile is None else Path(os.path.expanduser(os.fspath(profile)))
        )
        self._cached: tuple[tuple[int, int, int], ModelSelection | None] | None = None
        self._lock = trio.Lock()

    @property
    def profile(self) -> Path | None:
        """The profile file, or ``None``."""
        return self._path

    def current_selection(self) -> ModelSelection | None:
        """The selection the profile holds now, read at call time (``None`` if it has none).

        The profile is a small local file: each call stats it and re-reads it only
        when it changed, so edits made by another process are seen at the next call.
        This is the one synchronous file access of the runtime (the call must be
        synchronous to serve request routing); it never waits on anything else.

        Raises:
            ProfileError: the profile is not valid TOML or holds a malformed selection.
        """
        path = self._path
        if path is None:
            return None
        try:
            st = path.stat()
        except FileNotFoundError:
            self._cached = None
            return None
        except OSError as exc:
            raise ProfileError(str(path), f"cannot be read ({exc})") from exc
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        cached = self._cached
        if cached is not None and cached[0] == key:
            return cached[1]
        selection = _selection_of(_read_document(path).get(PROFILE_SECTION), str(path))
        self._cached = (key, selection)
        return selection

    async def save_selection(self, selection: ModelSelection) -> None:
        """Save ``selection`` as the default, rewriting the profile atomically.

        Provider and model are set; the reasoning effort is set when given and removed
        when omitted; every other key of the profile is kept. The file is replaced
        through a synced temporary file, in a worker thread, so a crash leaves either
        the old profile or the new one, never a torn one. Saves are serialised.
        Without a profile this is a no-op. Once the write started, cancellation waits
        for it to finish (the profile is then the new one).

        Raises:
            ProfileError: the existing profile is not valid TOML (it is left as is).
            OSError: the profile could not be written (it is left as it was).
            TypeError: ``selection`` is not a :class:`ModelSelection`.
        """
        if not isinstance(selection, ModelSelection):
            raise TypeError(
                f"save_selection takes a ModelSelection, got {type(selection).__name__}"
            )
        path = self._path
        if path is None:
            await trio.lowlevel.checkpoint()
            return
        async with self._lock:
            await trio.to_thread.run_sync(_rewrite, path, selection)
            self._cached = None


def _route_label(
    route: CallConfig | ModelSelection, other: CallConfig | ModelSelection
) -> str:
    """``model`` when both routes share the provider, else ``provider/model``."""
    if route.provider == other.provider:
        return route.model
    return f"{route.provider}/{route.model}"


def model_changed_notice(
    previous: CallConfig | ModelSelection, current: CallConfig | ModelSelection
) -> UserMessage:
    """The durable ``[model changed: ...]`` notice for a switch from ``previous``."""
    before = _route_label(previous, current)
    after = _route_label(current, previous)
    text = (
        f"[model changed: assistant turns above this point were generated by {before}; "
        f"the session continues with {after}]"
    )
    return UserMessage(
        id=new_message_id(),
        content=(TextBlock(text),),
        source=PluginSource(
            MODEL_SELECTION_PLUGIN, form="notice", summary=f"{before} → {after}"
        ),
    )


class SelectionRuntime(Protocol):
    """What :func:`install_model_selection` needs of a runtime."""

    @property
    def events(self) -> EventBus: ...

    @property
    def default_model(self) -> DefaultModel: ...


def install_model_selection(
    runtime: SelectionRuntime,
    *,
    selection: Callable[[], ModelSelection | None] | None = None,
) -> Callable[[], None]:
    """Route every agent of ``runtime`` to the selected model; returns the disposer.

    The selection (``runtime.default_model.current_selection`` unless ``selection``
    is given) is read once per step, at its pre-step proposal, and applied to that
    step's requests in ``agent/request``: provider and model are replaced, and the
    reasoning effort is the selection's (an omitted one clears an inherited effort).
    When the selected provider/model differs from the route the session's last
    ``request/header`` logged, the step's batch gets a durable user-role notice,
    ``[model changed: assistant turns above this point were generated by A; the
    session continues with B]``, after its other messages (a model is named alone
    when both share the provider). An effort-only change adds nothing, nor does an
    empty batch. With no selection, requests keep their route. Never blocks.

    Example::

        dispose = dsh.install_model_selection(runtime)
    """
    bus: EventBus = runtime.events
    read = (
        selection if selection is not None else runtime.default_model.current_selection
    )
    assembled: weakref.WeakKeyDictionary[Agent, ModelSelection | None] = (
        weakref.WeakKeyDictionary()
    )

    async def pre_step(
        payload: PreStep, next: Callable[[], Awaitable[PreStepDecision]]
    ) -> PreStepDecision:
        selected = read()
        assembled[payload.agent] = selected
        decision = await next()
        if selected is None or not isinstance(decision, Enter) or not decision.messages:
            return decision
        header = payload.agent.session.request_header()
        previous = header.config if header is not None else None
        if previous is None or (
            previous.provider == selected.provider and previous.model == selected.model
        ):
            return decision
        notice = model_changed_notice(previous, selected)
        return attrs.evolve(decision, messages=(*decision.messages, notice))

    async def request(
        payload: RequestProposal, next: Callable[[], Awaitable[CallConfig]]
    ) -> CallConfig:
        config = await next()
        agent = payload.agent
        selected = assembled[agent] if agent in assembled else read()
        if selected is None:
            return config
        return attrs.evolve(
            config,
            provider=selected.provider,
            model=selected.model,
            reasoning_effort=selected.reasoning_effort,
        )

    disposers = (bus.on("agent/pre-step", pre_step), bus.on("agent/request", request))

    def dispose() -> None:
        for undo in disposers:
            undo()

    return dispose
