"""The runtime config document: presets, the default preset and model, declared agents."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from ..errors import PresetError
from ..values import AgentOptions
from ._definition import (
    PresetDefinition,
    checked_mapping,
    kind_of,
    load_preset,
    nonblank,
    parse_preset,
)
from ._yaml import read_yaml

__all__ = ["DeclaredAgent", "RuntimeConfig", "load_runtime_config"]

_TOP_KEYS = frozenset({"presets", "default_preset", "default_model", "agents"})
_AGENT_KEYS = frozenset({"id", "preset", "options"})
#: Option keys as written in the document → ``AgentOptions`` fields (the reference's
#: camelCase spellings are read too).
_OPTION_KEYS = {
    "provider": "provider",
    "model": "model",
    "reasoning_effort": "reasoning_effort",
    "reasoningEffort": "reasoning_effort",
    "max_tokens": "max_tokens",
    "maxTokens": "max_tokens",
    "thinking": "thinking",
}


@attrs.frozen(kw_only=True)
class DeclaredAgent:
    """One ``agents`` entry: an agent the runtime starts at open (its id is its session id)."""

    id: str
    preset: str | None = None
    options: AgentOptions = attrs.field(factory=AgentOptions)


@attrs.frozen(kw_only=True)
class RuntimeConfig:
    """A parsed runtime config document (``open_runtime(config=path)``)."""

    presets: tuple[PresetDefinition, ...] = ()
    default_preset: str | None = None
    default_model: AgentOptions | None = None
    agents: tuple[DeclaredAgent, ...] = ()


def _options(raw: object, where: str) -> AgentOptions:
    if raw is None:
        return AgentOptions()
    if not isinstance(raw, Mapping):
        raise PresetError(
            f"{where} must be a mapping of agent options, got {kind_of(raw)}"
        )
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        field = _OPTION_KEYS.get(key)
        if field is None:
            raise PresetError(
                f"{where}.{key} is not an agent option (allowed: {sorted(_OPTION_KEYS)})"
            )
        if field == "thinking" and value is not None and not isinstance(value, bool):
            raise PresetError(
                f"{where}.{key} must be true, false or null (the provider's "
                f"default), got {kind_of(value)}"
            )
        fields[field] = value
    try:
        return AgentOptions(**fields)
    except (TypeError, ValueError) as exc:
        # The option's own message quotes the value: say its kind instead.
        for key, value in raw.items():
            try:
                AgentOptions(**{_OPTION_KEYS[key]: value})
            except (TypeError, ValueError) as one:
                rule = str(one).partition(", got ")[0]
                raise PresetError(
                    f"{where}.{key}: {rule}, got {kind_of(value)}"
                ) from exc
        raise PresetError(f"{where}: the options do not fit together") from exc


def _agent(raw: object, where: str) -> DeclaredAgent:
    raw = checked_mapping(raw, where, _AGENT_KEYS)
    agent_id = nonblank(raw.get("id"), f"{where}.id")
    preset = nonblank(raw.get("preset"), f"{where}.preset", optional=True)
    return DeclaredAgent(
        id=agent_id,
        preset=preset,
        options=_options(raw.get("options"), f"{where}.options"),
    )


def _preset(raw: object, where: str, base: Path) -> PresetDefinition:
    if isinstance(raw, str):
        if not raw.strip():
            raise PresetError(f"{where} must be a preset file path or document, got ''")
        try:
            return load_preset(base / raw)
        except PresetError as exc:
            raise PresetError(f"{where}: {exc}") from exc
    return parse_preset(raw, where)


def _presets(raw: list[object], where: str, base: Path) -> tuple[PresetDefinition, ...]:
    presets: list[PresetDefinition] = []
    first: dict[str, int] = {}
    for i, item in enumerate(raw):
        definition = _preset(item, f"{where}.presets[{i}]", base)
        if definition.id in first:
            raise PresetError(
                f'{where}.presets[{i}]: the preset id "{definition.id}" is already '
                f"defined by {where}.presets[{first[definition.id]}]"
            )
        first[definition.id] = i
        presets.append(definition)
    return tuple(presets)


def parse_runtime_config(doc: object, where: str, base: Path) -> RuntimeConfig:
    """Build a :class:`RuntimeConfig` from a parsed document; file paths are relative to ``base``.

    Raises:
        PresetError: the document is malformed (the message names the key), or
            two agents share an id.
    """
    if doc is None:
        return RuntimeConfig()
    doc = checked_mapping(doc, where, _TOP_KEYS)
    presets_raw = doc.get("presets") or []
    agents_raw = doc.get("agents") or []
    for key, value in (("presets", presets_raw), ("agents", agents_raw)):
        if not isinstance(value, list):
            raise PresetError(f"{where}.{key} must be a list, got {kind_of(value)}")
    default_preset = nonblank(
        doc.get("default_preset"), f"{where}.default_preset", optional=True
    )
    model = doc.get("default_model")
    agents = tuple(_agent(a, f"{where}.agents[{i}]") for i, a in enumerate(agents_raw))
    seen: dict[str, int] = {}
    for i, agent in enumerate(agents):
        if agent.id in seen:
            raise PresetError(
                f'{where}.agents: the id "{agent.id}" is declared twice '
                f"(agents[{seen[agent.id]}] and agents[{i}])"
            )
        seen[agent.id] = i
    return RuntimeConfig(
        presets=_presets(presets_raw, where, base),
        default_preset=default_preset,
        default_model=None
        if model is None
        else _options(model, f"{where}.default_model"),
        agents=agents,
    )


def load_runtime_config(path: str | os.PathLike[str]) -> RuntimeConfig:
    """Read a runtime config document (YAML); preset file paths are relative to it.

    Blocks on the file reads (a config is read once, at open).

    Raises:
        PresetError: the file (or a preset file it names) cannot be read, is not
            UTF-8 YAML, or is malformed; the message names the file and the key.
        TypeError: ``path`` is not a path.
    """
    file = Path(path)
    doc = read_yaml(file, "runtime config")
    return parse_runtime_config(doc, str(file), file.parent)
