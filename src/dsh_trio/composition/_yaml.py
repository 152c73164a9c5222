"""Reading one YAML document from a file, for preset and runtime config files.

:func:`read_yaml` owns the file's limits, the strict loader (a key written twice
is refused) and error messages that name the file without quoting it.
"""

from __future__ import annotations

import io
import os
from typing import Any

import yaml

from .._files import DOCUMENT_LIMIT, read_document
from ..errors import PresetError, UnusableFileError

__all__ = ["read_yaml"]


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key written twice in one mapping.

    Plain PyYAML keeps the last value silently: a second ``plugins:`` would drop the
    first list without a word.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # merged keys may be overridden: that is what merging means
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: the constructor reports it below
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found the key {key!r:.60} twice",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where a YAML document fails and why, without quoting the document.

    PyYAML's own text adds the document's line at the mark; only its words (what
    was being parsed, what was found) and the line and column are kept.
    """
    parts: list[str] = []
    for text, mark in (
        (getattr(exc, "context", None), getattr(exc, "context_mark", None)),
        (getattr(exc, "problem", None), getattr(exc, "problem_mark", None)),
    ):
        if text is None and mark is None:
            continue
        at = "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}"
        parts.append(f"{text} ({at})" if text and at else text or at)
    return "not valid YAML" + (f": {'; '.join(parts)}" if parts else "")


def read_yaml(path: str | os.PathLike[str], what: str) -> object:
    """The one YAML document of the file at ``path``; ``what`` names it in errors.

    Only a regular file of at most 1 MiB is read (links are followed): a FIFO, a
    device or a directory is refused before anything is read, and so is a larger
    file. Errors name the file and, for a document that does not parse, the line
    and column; they never quote the file's content.

    Raises:
        PresetError: the file cannot be read, is not a regular file, is larger
            than 1 MiB, is not UTF-8, is not one YAML document, or nests too
            deeply to parse.
    """
    shown = os.fspath(path)
    prefix = f"cannot read {what} {shown!r}"
    try:
        data = read_document(shown, limit=DOCUMENT_LIMIT)
        stream = io.StringIO(data.decode("utf-8"))
        # So that YAML errors name the file, not "<unicode string>".
        stream.name = str(shown)
        return yaml.load(stream, Loader=_Loader)  # _Loader is a SafeLoader
    except UnusableFileError as exc:
        raise PresetError(f"{prefix}: it {exc.problem}") from exc
    except OSError as exc:
        raise PresetError(f"{prefix}: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise PresetError(
            f"{prefix}: not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from exc
    except yaml.YAMLError as exc:
        raise PresetError(f"{prefix}: {_yaml_problem(exc)}") from exc
    except RecursionError as exc:
        raise PresetError(f"{prefix}: it nests too deeply to parse") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # A tagged scalar its constructor refuses (``!!int abc``): the message
        # would quote the value, so only its kind is said.
        raise PresetError(
            f"{prefix}: not valid YAML: a tagged value cannot be converted "
            f"({type(exc).__name__})"
        ) from exc
