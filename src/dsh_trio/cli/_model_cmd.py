"""``dsh-trio model``: show or save the default model the chat uses when no flag names one;
``dsh-trio models``: the providers and models the chat knows.

The default lives in ``profile.toml`` in the config folder, the parent of the session
directory (``~/.dsh/profile.toml`` for the default ``~/.dsh/sessions``), as the
``[default_model]`` table of :class:`dsh_trio.composition.DefaultModel`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Final, TextIO

import trio

from ..composition import DefaultModel, ModelSelection
from ._config import (
    DEFAULT_API_KEY_ENV,
    PRESETS,
    SESSION_DIR_ENV,
    Route,
    UsageError,
    check_model_name,
    resolve_session_dir,
)
from ._flags import Commands
from ._known import KNOWN_EFFORTS, check_default_model, known_providers
from ._offline import OFFLINE_MODEL, OFFLINE_PROVIDER
from ._profile import unset_default_model

__all__ = [
    "PROFILE_FILE",
    "add_model_command",
    "add_models_command",
    "default_route",
    "profile_path",
    "run_model",
    "run_models",
]

#: The profile's file name in the config folder.
PROFILE_FILE: Final = "profile.toml"

_DESCRIPTION: Final = f"""\
Show the default model, save one with `set` or remove it with `unset`. `dsh-trio
chat` uses it when no --provider, --base-url or --model is given (a resumed session
keeps its own model).
It is saved in {PROFILE_FILE} in the config folder, the parent of the session
directory (default ~/.dsh/{PROFILE_FILE}); other settings in that file are kept.

examples:
  dsh-trio model
  dsh-trio model set deepseek deepseek-v4-pro --effort max
  dsh-trio model set ollama llama3.2
  dsh-trio model unset"""


def profile_path(session_dir: str) -> str:
    """The profile of the config folder that holds ``session_dir``."""
    return os.path.join(os.path.dirname(session_dir.rstrip(os.sep)), PROFILE_FILE)


def add_model_command(
    commands: Commands,
) -> None:
    """Add ``dsh-trio model [set PROVIDER MODEL [--effort E]]`` to ``commands``."""
    model = commands.add_parser(
        "model",
        help="show or save the default model of the chat",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model.set_defaults(run=run_model, action="show")
    _add_session_dir(model)
    actions = model.add_subparsers(dest="action", metavar="ACTION")
    save = actions.add_parser(
        "set",
        help="save PROVIDER and MODEL as the default",
        description="Save PROVIDER and MODEL (and a reasoning effort) as the default model.",
    )
    save.add_argument(
        "provider", metavar="PROVIDER", help=f"one of {', '.join(known_providers())}"
    )
    save.add_argument("model", metavar="MODEL", help="e.g. deepseek-flash")
    save.add_argument(
        "--effort",
        metavar="E",
        help=f"reasoning effort, one of {', '.join(KNOWN_EFFORTS)} "
        "(DeepSeek maps them to low, high, max; omitted: the model's default)",
    )
    _add_session_dir(save)
    unset = actions.add_parser(
        "unset",
        help="remove the saved default (the chat then uses the offline demo model)",
        description="Remove the saved default model; the profile's other settings are kept.",
    )
    _add_session_dir(unset)


def _add_session_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--session-dir",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help=f"the session directory; the profile is in its parent folder (default: ${SESSION_DIR_ENV})",
    )


def describe(selection: ModelSelection) -> str:
    """``provider/model``, with the effort when one is set."""
    effort = (
        f" (reasoning effort {selection.reasoning_effort})"
        if selection.reasoning_effort
        else ""
    )
    return f"{selection.provider}/{selection.model}{effort}"


def run_model(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """Run ``dsh-trio model``: print the default, or save one (``set``). Blocking.

    Raises:
        UsageError: ``set`` was given a blank name, or a model the provider's server
            retired (DeepSeek's ``deepseek-chat``, ``deepseek-reasoner``).
    """
    out = sys.stdout if out is None else out
    session_dir = resolve_session_dir(getattr(args, "session_dir", None), os.environ)
    path = profile_path(session_dir)
    default = DefaultModel(path)
    if args.action == "unset":
        removed = unset_default_model(path)
        print(
            f"default model removed from {path}"
            if removed
            else f"no default model saved in {path}; nothing to remove",
            file=out,
        )
        return 0
    if args.action == "set":
        check_default_model(args.provider, args.model, args.effort)
        try:
            selection = ModelSelection(
                provider=args.provider, model=args.model, reasoning_effort=args.effort
            )
        except ValueError as exc:
            raise UsageError(str(exc).replace("ModelSelection.", "")) from None
        preset = PRESETS.get(selection.provider)
        if preset is not None:
            check_model_name(preset.base_url, selection.model)
        trio.run(default.save_selection, selection)
        print(f"default model: {describe(selection)} (saved in {path})", file=out)
        return 0
    current = default.current_selection()
    if current is None:
        print(
            f"no default model saved in {path}; the chat uses the offline demo model "
            "(save one with: dsh-trio model set PROVIDER MODEL)",
            file=out,
        )
        return 0
    print(f"default model: {describe(current)} ({path})", file=out)
    return 0


def default_route(route: Route, session_dir: str) -> tuple[Route, str | None]:
    """``route``, or the profile's default when no flag names a model; and its effort.

    A route with a provider, a base URL or a model is kept as it is (effort ``None``).
    The profile's route keeps ``route``'s key variable and thinking switch.
    """
    if (
        route.provider is not None
        or route.base_url is not None
        or route.model is not None
    ):
        return route, None
    selection = DefaultModel(profile_path(session_dir)).current_selection()
    if selection is None:
        return route, None
    chosen = Route(
        provider=selection.provider,
        model=selection.model,
        api_key_env=route.api_key_env,
        thinking=route.thinking,
    )
    return chosen, selection.reasoning_effort


def add_models_command(commands: Commands) -> None:
    """Add ``models`` (the known providers and models) to ``commands``."""
    models = commands.add_parser(
        "models",
        help="list the providers and models the chat knows",
        description=(
            "List the providers --provider accepts, their default model, endpoint and "
            "key variable, and the models known for each."
        ),
    )
    del models


def run_models(args: argparse.Namespace) -> int:
    """Print the providers ``--provider`` accepts and the models known for each."""
    del args
    rows = [("PROVIDER", "DEFAULT MODEL", "ENDPOINT", "KEY VARIABLE")]
    rows.append((OFFLINE_PROVIDER, OFFLINE_MODEL, "(built in, no network)", "-"))
    for name in sorted(PRESETS):
        preset = PRESETS[name]
        key = preset.api_key_env or "-"
        if preset.api_key_env:
            key += " (set)" if os.environ.get(preset.api_key_env) else " (not set)"
        rows.append((name, preset.default_model or "(--model)", preset.base_url, key))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True))
            + "  "
            + row[3]
        )
    for name in sorted(PRESETS):
        models = PRESETS[name].models
        if not models:
            continue
        width = max(len(model) for model, _ in models)
        print(f"models of {name} (--provider {name} --model M):")
        for model, note in models:
            print(f"  {model.ljust(width)}  {note}")
        for note in PRESETS[name].notes:
            print(f"  {note}")
    print(
        "any other OpenAI-compatible server: --base-url URL --model NAME "
        f"(key from --api-key-env VAR, default {DEFAULT_API_KEY_ENV})"
    )
    return 0
