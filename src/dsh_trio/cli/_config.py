"""What ``dsh-trio chat`` talks to and where sessions are stored, from flags and environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

import attrs

from ..llm import ModelAdapter, OpenAICompatibleAdapter
from ._offline import OFFLINE_MODEL, OFFLINE_PROVIDER, OfflineModel

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "DEFAULT_SESSION_DIR",
    "INTERACTIVE_CHUNK_DELAY",
    "PRESETS",
    "SESSION_DIR_ENV",
    "ModelChoice",
    "Preset",
    "UsageError",
    "offline_choice",
    "resolve_model",
    "resolve_session_dir",
]

#: Where sessions are stored unless ``--session-dir`` or :data:`SESSION_DIR_ENV` says otherwise.
DEFAULT_SESSION_DIR: Final = "~/.dsh/sessions"
#: The environment variable that overrides :data:`DEFAULT_SESSION_DIR`.
SESSION_DIR_ENV: Final = "DSH_TRIO_SESSION_DIR"
#: The variable the API key is read from with ``--base-url`` and no preset.
DEFAULT_API_KEY_ENV: Final = "OPENAI_API_KEY"
#: The delay between the offline model's chunks in an interactive terminal.
INTERACTIVE_CHUNK_DELAY: Final = 0.02


class UsageError(Exception):
    """A flag or environment setting cannot be used; the message says which and why."""


@attrs.frozen(kw_only=True)
class Preset:
    """A known OpenAI-compatible provider: its endpoint, key variable and default model."""

    base_url: str
    api_key_env: str | None
    default_model: str | None = None


#: Providers usable with ``--provider NAME`` alone (``--base-url`` overrides the URL).
PRESETS: Final[Mapping[str, Preset]] = {
    "deepseek": Preset(
        base_url="https://api.deepseek.com",
        api_key_env="DEEPSEEK_API_KEY",
        default_model="deepseek-chat",
    ),
    "openai": Preset(
        base_url="https://api.openai.com/v1", api_key_env="OPENAI_API_KEY"
    ),
    "ollama": Preset(base_url="http://localhost:11434/v1", api_key_env=None),
}


@attrs.frozen(kw_only=True)
class ModelChoice:
    """The provider name, model and adapter a chat uses, and how to describe them."""

    provider: str
    model: str
    adapter: ModelAdapter
    label: str


def resolve_session_dir(flag: str | None, environ: Mapping[str, str]) -> str:
    """``--session-dir``, else ``$DSH_TRIO_SESSION_DIR``, else ``~/.dsh/sessions`` (``~`` expanded)."""
    chosen = flag or environ.get(SESSION_DIR_ENV) or DEFAULT_SESSION_DIR
    return os.path.abspath(os.path.expanduser(chosen))


def offline_choice(*, chunk_delay: float = 0.0) -> ModelChoice:
    """The built-in offline demo model."""
    return ModelChoice(
        provider=OFFLINE_PROVIDER,
        model=OFFLINE_MODEL,
        adapter=OfflineModel(chunk_delay=chunk_delay),
        label="the offline demo model (no network; /help shows how to connect a real one)",
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
) -> ModelChoice:
    """Choose the chat's model from the flags.

    No ``--provider`` and no ``--base-url`` (or ``--provider offline``) selects the
    offline demo model. ``--base-url`` selects an OpenAI-compatible server, with the
    key read from ``--api-key-env`` (default ``OPENAI_API_KEY``, or the preset's
    variable); a missing default key is fine (local servers need none), a missing key
    named by ``--api-key-env`` or required by a preset is an error. ``--provider`` with
    a known name (``deepseek``, ``openai``, ``ollama``) fills in its URL, key variable
    and default model. Never blocks; the adapter connects on the first request.

    Raises:
        UsageError: the combination is incomplete or inconsistent (the message says
            what to add).
    """
    if provider == OFFLINE_PROVIDER or (provider is None and base_url is None):
        if model is not None and model != OFFLINE_MODEL:
            raise UsageError(
                "--model needs --provider or --base-url: without them the chat uses the offline demo model"
            )
        if api_key_env is not None:
            raise UsageError("--api-key-env needs --provider or --base-url")
        return offline_choice(chunk_delay=chunk_delay)
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
    return ModelChoice(
        provider=name,
        model=chosen_model,
        adapter=OpenAICompatibleAdapter(url, api_key=api_key or None),
        label=f"{chosen_model} via {url}",
    )
