"""What ``dsh-trio chat`` talks to and where sessions are stored, from flags and environment."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

import attrs

from ..errors import LlmError
from ..llm import ModelAdapter, OpenAICompatibleAdapter, check_deepseek_model
from ._offline import OFFLINE_MODEL, OFFLINE_PROVIDER, OfflineModel

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "DEFAULT_SESSION_DIR",
    "INTERACTIVE_CHUNK_DELAY",
    "PRESETS",
    "SESSION_DIR_ENV",
    "ModelChoice",
    "Preset",
    "Route",
    "UsageError",
    "check_key_variable",
    "check_model_name",
    "check_session_dir",
    "first_existing",
    "offline_choice",
    "resolve_model",
    "resolve_session_dir",
    "session_dir_probe",
]

#: Where sessions are stored unless ``--session-dir`` or :data:`SESSION_DIR_ENV` says otherwise.
DEFAULT_SESSION_DIR: Final = "~/.dsh/sessions"
#: The environment variable that overrides :data:`DEFAULT_SESSION_DIR`.
SESSION_DIR_ENV: Final = "DSH_TRIO_SESSION_DIR"
#: The variable the API key is read from with ``--base-url`` and no preset.
DEFAULT_API_KEY_ENV: Final = "OPENAI_API_KEY"
#: The delay between the offline model's chunks (three words each) in an interactive
#: terminal: about 30 words a second, a human reading pace, so its first reply (~420
#: characters) takes a few seconds, time enough to steer it or press Ctrl-C.
INTERACTIVE_CHUNK_DELAY: Final = 0.1


class UsageError(Exception):
    """A flag or environment setting cannot be used; the message says which and why."""


@attrs.frozen(kw_only=True)
class Preset:
    """A known OpenAI-compatible provider: its endpoint, key variable and default model.

    ``models`` lists the model names ``dsh-trio models`` shows for it, each with a
    note, and ``notes`` the lines it prints below them.
    """

    base_url: str
    api_key_env: str | None
    default_model: str | None = None
    #: The request field that carries the token limit (OpenAI's newer models
    #: take ``max_completion_tokens`` only).
    max_tokens_field: str = "max_tokens"
    models: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()


#: Providers usable with ``--provider NAME`` alone (``--base-url`` overrides the URL).
#: DeepSeek's names are those of its API documentation (late 2026); it retired
#: ``deepseek-chat`` and ``deepseek-reasoner`` on 2026-07-24.
PRESETS: Final[Mapping[str, Preset]] = {
    "deepseek": Preset(
        base_url="https://api.deepseek.com",
        api_key_env="DEEPSEEK_API_KEY",
        default_model="deepseek-flash",
        models=(
            ("deepseek-flash", "the default; served by DeepSeek-V4.1-Flash"),
            ("deepseek-v4-pro", "DeepSeek-V4-Pro"),
            ("deepseek-v4-flash", "the older name, still served (by V4.1-Flash)"),
        ),
        notes=(
            "thinking is on by default; --no-thinking turns it off",
            (
                "retired on 2026-07-24: deepseek-chat (now deepseek-flash "
                "--no-thinking), deepseek-reasoner (now deepseek-flash --thinking)"
            ),
        ),
    ),
    "openai": Preset(
        base_url="https://api.openai.com/v1",
        api_key_env="OPENAI_API_KEY",
        max_tokens_field="max_completion_tokens",
    ),
    "ollama": Preset(base_url="http://localhost:11434/v1", api_key_env=None),
}


@attrs.frozen(kw_only=True)
class Route:
    """The model flags of a chat (``--provider``, ``--model``, ``--base-url``,
    ``--api-key-env``, ``--thinking`` / ``--no-thinking``) as given; ``None`` where a
    flag was not given.

    A chat stores its route in the session header (as the ``origin`` command line),
    so ``--resume`` continues on the same model, with the same thinking switch. The
    API key itself is never stored.
    """

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    thinking: bool | None = None

    def flags(self) -> list[str]:
        """The route as command-line arguments (only the flags that were given)."""
        out: list[str] = []
        for flag, value in (
            ("--provider", self.provider),
            ("--model", self.model),
            ("--base-url", self.base_url),
            ("--api-key-env", self.api_key_env),
        ):
            if value is not None:
                out += [flag, value]
        if self.thinking is not None:
            out.append("--thinking" if self.thinking else "--no-thinking")
        return out

    def origin(self) -> str:
        """The header ``origin`` that records this route: ``dsh-trio chat FLAGS``."""
        return shlex.join(["dsh-trio", "chat", *self.flags()])

    @classmethod
    def from_origin(cls, origin: str | None) -> Route | None:
        """The route an ``origin`` written by :meth:`origin` records, else ``None``."""
        if not origin:
            return None
        try:
            words = shlex.split(origin)
        except ValueError:
            return None
        if words[:2] != ["dsh-trio", "chat"]:
            return None
        parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
        for flag in ("--provider", "--model", "--base-url", "--api-key-env"):
            parser.add_argument(flag)
        parser.add_argument("--thinking", action=argparse.BooleanOptionalAction)
        try:
            known, rest = parser.parse_known_args(words[2:])
        except (argparse.ArgumentError, SystemExit):
            return None
        if rest:
            return None
        return cls(
            provider=known.provider,
            model=known.model,
            base_url=known.base_url,
            api_key_env=known.api_key_env,
            thinking=known.thinking,
        )

    def over(self, stored: Route | None) -> Route:
        """These flags applied over a ``stored`` route (the resumed session's).

        ``--provider`` or ``--base-url`` name a new route: the stored one is ignored.
        ``--model``, ``--api-key-env`` or ``--thinking`` / ``--no-thinking`` alone
        replace that part of the stored route.
        """
        if stored is None or self.provider is not None or self.base_url is not None:
            return self
        return attrs.evolve(
            stored,
            model=self.model if self.model is not None else stored.model,
            api_key_env=(
                self.api_key_env if self.api_key_env is not None else stored.api_key_env
            ),
            thinking=self.thinking if self.thinking is not None else stored.thinking,
        )


@attrs.frozen(kw_only=True)
class ModelChoice:
    """The provider name, model and adapter a chat uses, and how to describe them.

    ``route`` holds the flags that select it (recorded in the session header);
    ``thinking`` is its thinking switch (``AgentOptions.thinking``).
    """

    provider: str
    model: str
    adapter: ModelAdapter
    label: str
    route: Route = Route()
    thinking: bool | None = None


def resolve_session_dir(flag: str | None, environ: Mapping[str, str]) -> str:
    """``--session-dir``, else ``$DSH_TRIO_SESSION_DIR``, else ``~/.dsh/sessions`` (``~`` expanded)."""
    chosen = flag or environ.get(SESSION_DIR_ENV) or DEFAULT_SESSION_DIR
    return os.path.abspath(os.path.expanduser(chosen))


def first_existing(path: str) -> str:
    """``path``, or its nearest ancestor that exists. Blocking ``stat`` calls only."""
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return probe


def session_dir_probe(path: str) -> str:
    """The nearest existing ancestor of the session directory ``path`` (or ``path``).

    Raises:
        UsageError: ``path`` is, or is below, something that is not a directory.
    """
    probe = first_existing(path)
    if not os.path.isdir(probe):
        what = (
            "is not a directory"
            if probe == path
            else f"is below {probe}, which is not a directory"
        )
        raise UsageError(f"the session directory {path} {what}")
    return probe


def check_session_dir(path: str) -> None:
    """Check that sessions can be stored under ``path`` (creating nothing).

    ``path`` must be a writable directory, or not exist yet below a writable
    directory (it is made on the first write). Blocking ``stat`` calls only.

    Raises:
        UsageError: ``path`` cannot hold sessions (the message says why).
    """
    probe = session_dir_probe(path)
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "" if probe == path else f" (it would be made in {probe})"
        raise UsageError(
            f"the session directory {path} is not writable{what}; pass --session-dir DIR"
        )


def offline_choice(*, chunk_delay: float = 0.0) -> ModelChoice:
    """The built-in offline demo model."""
    return ModelChoice(
        provider=OFFLINE_PROVIDER,
        model=OFFLINE_MODEL,
        adapter=OfflineModel(chunk_delay=chunk_delay),
        label="the offline demo model (no network; /help shows how to connect a real one)",
    )


def check_model_name(base_url: str, model: str) -> None:
    """Refuse a model name the server at ``base_url`` no longer serves.

    DeepSeek's API refuses its retired ``deepseek-chat`` and ``deepseek-reasoner``;
    the message names the replacement. Never blocks.

    Raises:
        UsageError: ``model`` is retired on ``base_url``.
    """
    try:
        check_deepseek_model(base_url, model)
    except LlmError as exc:
        raise UsageError(exc.failure.message) from None


_VARIABLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: A run of letters and digits this long, holding both, is a key's, not a word's.
_KEY_RUN: Final = re.compile(
    r"(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}"
)


def check_key_variable(name: str) -> None:
    """Refuse an ``--api-key-env`` value that is not the name of a variable.

    A name is letters, digits and ``_`` (not starting with a digit), and has no
    long run mixing letters and digits the way a key does. The value is never
    quoted in the error: it may be the key itself, pasted in place of its
    variable's name. Never blocks.

    Raises:
        UsageError: ``name`` is not a variable name (or looks like a key).
    """
    if _VARIABLE.fullmatch(name) is None or _KEY_RUN.search(name) is not None:
        raise UsageError(
            "--api-key-env takes the name of the environment variable that holds "
            f"the API key (such as {DEFAULT_API_KEY_ENV}); the value given looks "
            "like a key, not a variable name, so it is not shown"
        )


def _check_url(url: str) -> str:
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(
            f"--base-url must be an http:// or https:// URL with a host, got {url!r}"
        )
    return url.strip()


def resolve_model(
    *,
    provider: str | None,
    model: str | None,
    base_url: str | None,
    api_key_env: str | None,
    environ: Mapping[str, str],
    chunk_delay: float = 0.0,
    thinking: bool | None = None,
) -> ModelChoice:
    """Choose the chat's model from the flags.

    No ``--provider`` and no ``--base-url`` (or ``--provider offline``) selects the
    offline demo model. ``--base-url`` selects an OpenAI-compatible server, with the
    key read from ``--api-key-env`` (default ``OPENAI_API_KEY``, or the preset's
    variable); a missing default key is fine (local servers need none), a missing key
    named by ``--api-key-env`` or required by a preset is an error. ``--provider`` with
    a known name (``deepseek``, ``openai``, ``ollama``) fills in its URL, key variable
    and default model. ``thinking`` (``--thinking`` / ``--no-thinking``) switches the
    model's thinking; ``None`` leaves the provider's default. Never blocks; the
    adapter connects on the first request.

    Raises:
        UsageError: the combination is incomplete or inconsistent (the message says
            what to add), the model is one DeepSeek retired (the message names its
            replacement), or ``api_key_env`` is not a variable name (a key pasted in
            its place is not quoted).
    """
    if api_key_env is not None:
        check_key_variable(api_key_env)
    if provider == OFFLINE_PROVIDER or (provider is None and base_url is None):
        if model is not None and model != OFFLINE_MODEL:
            raise UsageError(
                "--model needs --provider or --base-url: without them the chat uses the offline demo model"
            )
        if api_key_env is not None:
            raise UsageError("--api-key-env needs --provider or --base-url")
        if thinking is not None:
            raise UsageError(
                "--thinking / --no-thinking needs --provider or --base-url: the "
                "offline demo model does not think"
            )
        choice = offline_choice(chunk_delay=chunk_delay)
        return attrs.evolve(choice, route=Route(provider=provider, model=model))
    if provider is not None and not provider.strip():
        raise UsageError("--provider must not be empty")
    preset = PRESETS.get(provider) if provider is not None else None
    if base_url is None:
        if preset is None:
            known = ", ".join([*sorted(PRESETS), OFFLINE_PROVIDER])
            raise UsageError(
                f"unknown provider {provider!r}: pass --base-url URL for an OpenAI-compatible server "
                f"(providers known without it: {known})"
            )
        base_url = preset.base_url
    url = _check_url(base_url)
    chosen_model = model or (preset.default_model if preset is not None else None)
    if not chosen_model:
        needs = f"--provider {provider}" if preset is not None else "--base-url"
        raise UsageError(f"--model is required with {needs}")
    check_model_name(url, chosen_model)
    key_env = api_key_env or (
        preset.api_key_env if preset is not None else DEFAULT_API_KEY_ENV
    )
    api_key = environ.get(key_env) if key_env else None
    key_required = api_key_env is not None or (
        preset is not None and preset.api_key_env is not None
    )
    if not api_key and key_required:
        raise UsageError(
            f"the API key variable {key_env} is not set (export it, or name another with --api-key-env)"
        )
    name = provider or "openai-compatible"
    key = api_key or None
    # Only a preset that needs another token-limit field names one.
    adapter = (
        OpenAICompatibleAdapter(
            url, api_key=key, max_tokens_field=preset.max_tokens_field
        )
        if preset is not None and preset.max_tokens_field != "max_tokens"
        else OpenAICompatibleAdapter(url, api_key=key)
    )
    switch = "" if thinking is None else f", thinking {'on' if thinking else 'off'}"
    return ModelChoice(
        provider=name,
        model=chosen_model,
        adapter=adapter,
        label=f"{chosen_model} via {url}{switch}",
        route=Route(
            provider=provider,
            model=chosen_model,
            base_url=base_url
            if preset is None or base_url != preset.base_url
            else None,
            api_key_env=api_key_env,
            thinking=thinking,
        ),
        thinking=thinking,
    )
