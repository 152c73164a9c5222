"""``dsh-trio presets``, and the chat's composition: ``--preset``, ``--config``, the default model.

Presets come from the ``presets`` folder of the config folder (the parent of the
session directory: ``~/.dsh/presets/*.yaml`` by default) and from the runtime config
given with ``--config FILE`` (its presets, default preset and declared agents).

A plugin row names a module; the command line looks for it on the import path and
then in the presets folder and in the folder of ``--config FILE`` (both are appended
to ``sys.path``), so a plugin module kept beside its preset file imports without
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, TextIO, TypeAlias

import attrs
import trio

from ..composition import PresetDefinition, PresetInfo, load_preset, load_runtime_config
from ..errors import PresetError
from ..nursery import open_runtime
from ..values import CallConfig
from ._checks import check_sessions_readable
from ._config import SESSION_DIR_ENV, ModelChoice, UsageError, resolve_session_dir
from ._flags import Commands
from ._model_cmd import add_model_command

if TYPE_CHECKING:
    from ..loop import RequestProposal
    from ..nursery import Runtime

__all__ = [
    "PRESETS_FOLDER",
    "RuntimeOpener",
    "add_composition",
    "chat_opener",
    "folder_presets",
    "import_plugins_beside",
    "presets_folder",
    "render_presets",
    "run_presets",
]

#: What the chat opens its runtime with: ``open_runtime`` or :func:`chat_opener`'s.
RuntimeOpener: TypeAlias = "Callable[..., AbstractAsyncContextManager[Runtime]]"

#: The folder of preset files in the config folder.
PRESETS_FOLDER: Final = "presets"

_DESCRIPTION: Final = f"""\
List the presets the chat can use (--preset ID): the preset files in the
{PRESETS_FOLDER}/ folder of the config folder (the parent of the session directory,
default ~/.dsh/{PRESETS_FOLDER}/*.yaml) and those of --config FILE. Each row says
whether the preset is the default and, for a broken preset (a plugin row whose
import or setup failed), what failed."""


def presets_folder(session_dir: str) -> str:
    """The preset folder of the config folder that holds ``session_dir``."""
    return os.path.join(os.path.dirname(session_dir.rstrip(os.sep)), PRESETS_FOLDER)


def folder_presets(session_dir: str) -> list[PresetDefinition]:
    """The presets of the config folder's ``presets/*.yaml`` files, by file name. Blocking.

    Raises:
        UsageError: a preset file is malformed (the message names it).
    """
    folder = presets_folder(session_dir)
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found: list[PresetDefinition] = []
    for name in names:
        if not name.endswith((".yaml", ".yml")):
            continue
        try:
            found.append(load_preset(os.path.join(folder, name)))
        except PresetError as exc:
            raise UsageError(str(exc)) from exc  # it names the file
    return found


def import_plugins_beside(session_dir: str, config: str | None) -> None:
    """Let plugin rows import modules kept beside their preset files. Blocking (``stat``).

    Appends the presets folder (when it exists) and the folder of ``config`` to
    ``sys.path``, after everything already there, so installed packages and
    ``PYTHONPATH`` win over a module of the same name. Idempotent.
    """
    folders = [presets_folder(session_dir)]
    if config is not None:
        folders.append(os.path.dirname(os.path.abspath(os.path.expanduser(config))))
    for folder in folders:
        if os.path.isdir(folder) and folder not in sys.path:
            sys.path.append(folder)


def add_composition(
    commands: Commands,
    chat: argparse.ArgumentParser,
) -> None:
    """Add ``--preset`` / ``--config`` to ``chat`` and the ``presets`` and ``model`` commands."""
    group = chat.add_argument_group("composition")
    group.add_argument(
        "--preset",
        metavar="ID",
        help="the preset the chat's agent uses (see: dsh-trio presets; default: the default preset)",
    )
    group.add_argument(
        "--config",
        metavar="FILE",
        help="a runtime config (YAML): presets, default preset, default model, declared agents",
    )
    presets = commands.add_parser(
        "presets",
        help="list the presets, the default one and what broke in broken ones",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    presets.add_argument(
        "--config", metavar="FILE", help="a runtime config (YAML) with presets"
    )
    presets.add_argument(
        "--session-dir",
        metavar="DIR",
        help=f"the session directory; presets are in its parent folder (default: ${SESSION_DIR_ENV})",
    )
    presets.set_defaults(run=run_presets)
    add_model_command(commands)


def _config_presets(config: str | None) -> tuple[list[PresetDefinition], str | None]:
    """The presets and default preset of a runtime config file. Blocking."""
    if config is None:
        return [], None
    try:
        loaded = load_runtime_config(config)
    except PresetError as exc:
        raise UsageError(f"--config {config}: {exc}") from exc
    return list(loaded.presets), loaded.default_preset


async def _registered(
    definitions: Sequence[PresetDefinition], default: str | None
) -> list[PresetInfo]:
    async with open_runtime(presets=definitions, default_preset=default) as runtime:
        return runtime.presets.list()


def render_presets(infos: Sequence[PresetInfo]) -> list[str]:
    """One line per preset: a ``*`` for the default, id, name and description or what broke."""
    if not infos:
        return []
    width = max(len(i.id) for i in infos)
    lines: list[str] = []
    for info in infos:
        mark = "*" if info.is_default else " "
        text = (
            f"BROKEN: {' '.join(info.broken.split())}"
            if info.broken is not None
            else " - ".join(t for t in (info.name, info.description) if t)
        )
        lines.append(f"{mark} {info.id.ljust(width)}  {text}".rstrip())
    return lines


def run_presets(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run ``dsh-trio presets``; returns 0, or 1 when a preset is broken. Blocking."""
    out = sys.stdout if out is None else out
    session_dir = resolve_session_dir(args.session_dir, os.environ)
    check_sessions_readable(session_dir)
    from_config, default = _config_presets(args.config)
    definitions = [*from_config, *folder_presets(session_dir)]
    import_plugins_beside(session_dir, args.config)
    try:
        infos = trio.run(_registered, definitions, default)
    except PresetError as exc:  # an id registered twice, or an unknown default
        raise UsageError(str(exc)) from exc
    if not infos:
        folder = presets_folder(session_dir)
        missing = (
            ""
            if os.path.isdir(folder)
            else f"; the folder does not exist yet: mkdir -p {shlex.quote(folder)}"
        )
        print(
            f"no presets (add preset files to {folder}, or pass --config FILE){missing}",
            file=out,
        )
        return 0
    for line in render_presets(infos):
        print(line, file=out)
    return 1 if any(i.broken is not None for i in infos) else 0


def _effort_listener(
    provider: str, model: str, effort: str
) -> Callable[
    [RequestProposal, Callable[[], Awaitable[CallConfig]]], Awaitable[CallConfig]
]:
    async def apply(
        payload: RequestProposal, next: Callable[[], Awaitable[CallConfig]]
    ) -> CallConfig:
        config = await next()
        if config.provider == provider and config.model == model:
            return attrs.evolve(config, reasoning_effort=effort)
        return config

    return apply


def chat_opener(
    args: argparse.Namespace,
    session_dir: str,
    choice: ModelChoice,
    effort: str | None,
) -> RuntimeOpener:
    """The chat's ``open_runtime``: with the presets, ``--preset``, ``--config``.

    The preset folder and ``--config`` are read now (blocking; :class:`UsageError`
    when one is malformed), and their folders made importable
    (:func:`import_plugins_beside`). ``effort`` (the default model's) is
    applied to the requests for ``choice``'s provider and model. Entering the runtime
    checks that ``--preset`` names a registered, working preset (:class:`UsageError`
    otherwise).
    """
    provider, model = choice.provider, choice.model
    presets = folder_presets(session_dir)
    preset: str | None = getattr(args, "preset", None)
    config: str | None = getattr(args, "config", None)
    _config_presets(config)  # a config that cannot be read is a usage error, now
    import_plugins_beside(session_dir, config)

    @contextlib.asynccontextmanager
    async def opener(**kwargs: Any) -> AsyncIterator[Runtime]:
        async with open_runtime(
            **kwargs, presets=presets, default_preset=preset, config=config
        ) as runtime:
            if preset is not None:
                try:
                    info = runtime.presets.resolve(preset)
                except PresetError as exc:
                    raise UsageError(str(exc)) from exc
                if info.broken is not None:
                    raise UsageError(f'the preset "{preset}" is broken: {info.broken}')
            if effort is not None:
                runtime.events.on(
                    "agent/request", _effort_listener(provider, model, effort)
                )
            yield runtime

    return opener
