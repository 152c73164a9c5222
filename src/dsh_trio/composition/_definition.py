"""Preset documents: ``PresetDefinition``, ``PluginRow`` and the YAML shape they come from."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Union

import attrs
import yaml

from ..errors import PresetError
from ._yaml import read_yaml

if TYPE_CHECKING:
    from ..values import JsonValue

__all__ = [
    "PluginRow",
    "PresetDefinition",
    "check_definition",
    "dump_preset",
    "load_preset",
    "parse_preset",
    "kind_of",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_ROW_KEYS = frozenset({"name", "id", "config", "disabled", "group"})
_PRESET_KEYS = frozenset({"id", "name", "description", "order", "plugins"})

#: A row's config: options for its setup function, or the nested rows of a group.
RowConfig = Union["Mapping[str, JsonValue]", "tuple[PluginRow, ...]"]


@attrs.frozen(kw_only=True)
class PluginRow:
    """One plugin row of a preset: an import path to a setup function, and its config.

    ``name`` is ``"package.module:function"`` (``"package.module"`` alone means its
    ``setup``); the function is called once per preset generation as
    ``setup(scope, config)``. A row with ``group=True`` nests rows: its ``config`` is a
    tuple of :class:`PluginRow`. A ``disabled`` row is skipped.

    Example::

        PluginRow(name="my_app.plugins:search", config={"index": "docs"})
    """

    name: str
    id: str | None = None
    config: RowConfig = _EMPTY
    disabled: bool = False
    group: bool = False

    @property
    def label(self) -> str:
        """How messages name the row: its id, else its name."""
        return self.id if self.id else self.name


@attrs.frozen(kw_only=True)
class PresetDefinition:
    """A named composition: the plugin rows a preset generation activates, in order.

    Example::

        PresetDefinition(id="coder", plugins=(PluginRow(name="my_app.plugins:files"),))
    """

    id: str
    plugins: tuple[PluginRow, ...]
    name: str | None = None
    description: str | None = None
    order: float | None = None


#: How deep groups (and a row's config) may nest; deeper is refused, which also
#: stops a self-referencing YAML alias.
MAX_DEPTH = 32


def _where(path: str, key: str | int) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}"


def kind_of(value: object) -> str:
    """What ``value`` is, in words, without its content (``"a string"``, ``"null"``).

    Errors about a document read from a file say this instead of quoting the
    value: the file may not be what the caller thinks (``--config ~/.netrc``).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "an empty string" if not value else "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"a {type(value).__name__}"


def _got(value: object, wrong_type: type[Exception]) -> str:
    """``value`` as an error shows it: quoted for Python code, its kind for a document."""
    return f"{value!r:.60}" if wrong_type is TypeError else kind_of(value)


def _import_path_problem(name: str) -> str | None:
    """Why ``name`` is not ``package.module[:function]``, or ``None`` when it is."""
    module, colon, function = name.partition(":")
    if not all(part.isidentifier() for part in module.split(".")):
        return f"{module!r} is not a dotted module name"
    if colon and not function.isidentifier():
        return f"{function!r} is not a function name"
    return None


def _check_json(
    value: object, where: str, depth: int, done: set[int], active: set[int]
) -> None:
    """Refuse what is not a JSON value; ``done`` makes shared (aliased) nodes cost once."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return
    if not isinstance(value, (Mapping, list, tuple)):
        raise PresetError(
            f"{where} is a {type(value).__name__}, not a JSON value "
            "(quote it in YAML to keep it a string)"
        )
    key = id(value)
    if key in done:
        return
    if key in active:
        raise PresetError(f"{where} refers to itself (a recursive YAML alias)")
    if depth > MAX_DEPTH:
        raise PresetError(f"{where} nests deeper than {MAX_DEPTH} levels")
    active.add(key)
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                raise PresetError(f"{where} has a non-string key ({kind_of(k)})")
            _check_json(item, _where(where, k), depth + 1, done, active)
    else:
        for i, item in enumerate(value):
            _check_json(item, _where(where, i), depth + 1, done, active)
    active.discard(key)
    done.add(key)


def _check_row(
    row: object,
    where: str,
    depth: int,
    wrong_type: type[Exception],
    *,
    nested: bool = True,
) -> None:
    """Check one built row (and, if ``nested``, a group's rows).

    ``wrong_type`` is raised for a field of the wrong type: ``TypeError`` for rows
    built in Python, ``PresetError`` for rows read from a document.
    """
    if not isinstance(row, PluginRow):
        raise wrong_type(f"{where} must be a PluginRow, got {_got(row, wrong_type)}")
    name: object = row.name
    if not isinstance(name, str):
        raise wrong_type(f"{where}.name must be a string, got {_got(name, wrong_type)}")
    if not name.strip():
        raise PresetError(
            f"{where}.name must be a non-empty string, got {_got(name, wrong_type)}"
        )
    for key in ("disabled", "group"):
        flag: object = getattr(row, key)
        if not isinstance(flag, bool):
            raise wrong_type(
                f"{_where(where, key)} must be a boolean, got {_got(flag, wrong_type)}"
            )
    row_id: object = row.id
    if row_id is not None and not isinstance(row_id, str):
        raise wrong_type(f"{where}.id must be a string, got {_got(row_id, wrong_type)}")
    config: object = row.config
    if row.group:
        if isinstance(config, Mapping) and not config:
            config = ()  # the default config: no rows
        if not isinstance(config, tuple):
            raise wrong_type(
                f'{where}.config of group "{name}" must be a tuple of PluginRow, '
                f"got {_got(config, wrong_type)}"
            )
        if not config:
            raise PresetError(f'{where}: group "{name}" has no rows under config')
        if depth >= MAX_DEPTH:
            raise PresetError(f"{where}: groups nest deeper than {MAX_DEPTH} levels")
        for i, inner in enumerate(config if nested else ()):
            _check_row(inner, f"{where}.config[{i}]", depth + 1, wrong_type)
        return
    problem = _import_path_problem(name)
    if problem is not None:
        raise PresetError(
            f'{where}.name "{name}" must be an import path '
            f'"package.module:function" ({problem})'
        )
    if not isinstance(config, Mapping):
        raise wrong_type(
            f"{where}.config must be a mapping, got {_got(config, wrong_type)}"
        )
    _check_json(config, f"{where}.config", 0, set(), set())


def check_definition(definition: object) -> None:
    """Check a definition built in Python before it is registered.

    Raises:
        TypeError: ``definition`` is not a :class:`PresetDefinition`, or a field has
            the wrong type (the message names the row and the field).
        PresetError: a value is malformed (blank id or name, a name that is not an
            import path, a group without rows, config that is not JSON).
    """
    if not isinstance(definition, PresetDefinition):
        raise TypeError(f"expected a PresetDefinition, got {definition!r:.60}")
    preset_id: object = definition.id
    if not isinstance(preset_id, str) or not preset_id.strip():
        raise PresetError(
            f"a preset id must be a non-blank string, got {preset_id!r:.60}"
        )
    where = f'preset "{preset_id}"'
    for key in ("name", "description"):
        value: object = getattr(definition, key)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{where}.{key} must be a string, got {value!r:.60}")
    _check_order(definition.order, where, TypeError)
    plugins: object = definition.plugins
    if not isinstance(plugins, tuple):
        raise TypeError(
            f"{where}.plugins must be a tuple of PluginRow, got {plugins!r:.60}"
        )
    for i, row in enumerate(plugins):
        _check_row(row, f"{where}.plugins[{i}]", 0, TypeError)


def _check_order(order: object, where: str, wrong_type: type[Exception]) -> None:
    if order is None:
        return
    if isinstance(order, bool) or not isinstance(order, (int, float)):
        raise wrong_type(
            f"{where}.order must be a number, got {_got(order, wrong_type)}"
        )
    if not math.isfinite(order):
        raise PresetError(f"{where}.order must be a finite number, got {order!r}")


def _optional_str(doc: Mapping[str, Any], key: str, where: str) -> str | None:
    value = doc.get(key)
    if value is None or isinstance(value, str):
        return value
    raise PresetError(f"{_where(where, key)} must be a string, got {kind_of(value)}")


def checked_mapping(
    raw: object, where: str, allowed: frozenset[str] | set[str], what: str = ""
) -> Mapping[Any, Any]:
    """``raw`` as a mapping whose keys are all ``allowed``.

    Raises:
        PresetError: it is not a mapping, or has other keys (the message names ``where``).
    """
    if not isinstance(raw, Mapping):
        raise PresetError(f"{where} must be a mapping{what}, got {kind_of(raw)}")
    unknown = set(raw) - allowed
    if unknown:
        raise PresetError(
            f"{where} has unknown keys {sorted(map(str, unknown))} (allowed: {sorted(allowed)})"
        )
    return raw


def nonblank(value: object, where: str, *, optional: bool = False) -> Any:
    """``value`` if it is a non-blank ``str`` (or ``None`` when ``optional``).

    Raises:
        PresetError: otherwise, naming ``where``.
    """
    if (value is None and optional) or (isinstance(value, str) and value.strip()):
        return value
    raise PresetError(f"{where} must be a non-empty string, got {kind_of(value)}")


def _parse_row(
    raw: object, where: str, depth: int, within: frozenset[int]
) -> PluginRow:
    raw = checked_mapping(raw, where, _ROW_KEYS, " (a plugin row)")
    name = nonblank(raw.get("name"), f"{where}.name")
    group = raw.get("group", False)
    config = raw.get("config")
    parsed: object
    if group is True:
        if depth >= MAX_DEPTH:
            raise PresetError(f"{where}: groups nest deeper than {MAX_DEPTH} levels")
        parsed = _parse_rows(
            config if config is not None else [], f"{where}.config", depth + 1, within
        )
    elif config is None:
        parsed = _EMPTY
    elif isinstance(config, Mapping):
        parsed = MappingProxyType(dict(config))
    else:
        raise PresetError(f"{where}.config must be a mapping, got {kind_of(config)}")
    row = PluginRow(
        name=name,
        id=raw.get("id"),
        config=parsed,  # checked just below
        disabled=raw.get("disabled", False),
        group=group,
    )
    # Nested rows were checked as they were parsed: check this row alone.
    _check_row(row, where, depth, PresetError, nested=False)
    return row


def _parse_rows(
    raw: object, where: str, depth: int = 0, within: frozenset[int] = frozenset()
) -> tuple[PluginRow, ...]:
    if not isinstance(raw, list):
        raise PresetError(f"{where} must be a list of plugin rows, got {kind_of(raw)}")
    if id(raw) in within:
        raise PresetError(f"{where} contains itself (a recursive YAML alias)")
    within |= {id(raw)}
    return tuple(
        _parse_row(row, _where(where, i), depth, within) for i, row in enumerate(raw)
    )


def parse_preset(doc: object, where: str = "preset") -> PresetDefinition:
    """Build a :class:`PresetDefinition` from the reference's preset document shape.

    Raises:
        PresetError: the document is malformed; the message names the key.
    """
    doc = checked_mapping(doc, where, _PRESET_KEYS)
    preset_id = nonblank(doc.get("id"), f"{where}.id")
    order = doc.get("order")
    _check_order(order, where, PresetError)
    if "plugins" not in doc:
        raise PresetError(f'{where} ("{preset_id}") has no plugins list')
    return PresetDefinition(
        id=preset_id,
        plugins=_parse_rows(doc["plugins"], f"{where}.plugins"),
        name=_optional_str(doc, "name", where),
        description=_optional_str(doc, "description", where),
        order=order,
    )


def load_preset(path: str | os.PathLike[str]) -> PresetDefinition:
    """Read a preset document (YAML) from ``path``.

    Blocks on the file read (presets are read at startup). The document has ``id``,
    optional ``name``, ``description`` and ``order``, and ``plugins``: rows with
    ``name`` (``package.module:function``; any label for a group), ``id``,
    ``config`` (JSON values; a group's nested rows), ``disabled``, ``group``.

    Example::

        definition = load_preset("presets/coder.yml")
        await runtime.presets.register(definition)

    Raises:
        PresetError: the file cannot be read, is not UTF-8 YAML, or is not a preset
            document; the message names the file and the key (``file.plugins[2].name``).
        TypeError: ``path`` is not a path.
    """
    return parse_preset(read_yaml(path, "preset file"), where=os.fspath(path))


def _plain(value: object, memo: dict[int, object]) -> object:
    """``value`` as plain dicts and lists (what YAML dumps); shared nodes stay shared."""
    if not isinstance(value, (Mapping, list, tuple)):
        return value
    done = memo.get(id(value))
    if done is not None:
        return done
    if isinstance(value, Mapping):
        plain: dict[str, object] = {}
        memo[id(value)] = plain
        plain.update((k, _plain(v, memo)) for k, v in value.items())
        return plain
    items: list[object] = []
    memo[id(value)] = items
    items.extend(_plain(v, memo) for v in value)
    return items


def _row_doc(row: PluginRow) -> dict[str, object]:
    doc: dict[str, object] = {"name": row.name}
    if row.id is not None:
        doc["id"] = row.id
    if row.group:
        doc["group"] = True
    if row.disabled:
        doc["disabled"] = True
    config = row.config
    if isinstance(config, tuple):
        doc["config"] = [_row_doc(r) for r in config]
    elif config:
        doc["config"] = _plain(config, {})
    return doc


def dump_preset(definition: PresetDefinition) -> str:
    """The YAML text of ``definition`` (the shape :func:`load_preset` reads)."""
    doc: dict[str, object] = {"id": definition.id}
    for key in ("name", "description", "order"):
        value = getattr(definition, key)
        if value is not None:
            doc[key] = value
    doc["plugins"] = [_row_doc(r) for r in definition.plugins]
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
