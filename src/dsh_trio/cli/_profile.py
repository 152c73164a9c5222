"""``dsh-trio model unset``: remove the saved default model from the profile.

The profile's other settings stay as they are; the file is replaced atomically (a
synced temporary file renamed over it), so a crash leaves the old profile or the new
one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import tomllib
from typing import Final

import tomli_w

from .._files import read_document
from ..errors import ProfileError, UnusableFileError

__all__ = ["DEFAULT_MODEL_TABLE", "unset_default_model"]

#: The profile table that holds the default model.
DEFAULT_MODEL_TABLE: Final = "default_model"


def unset_default_model(path: str) -> bool:
    """Remove the ``[default_model]`` table from the profile at ``path``. Blocking.

    Idempotent: returns ``False`` (and writes nothing) when the profile or the table
    does not exist, ``True`` when the table was removed. Every other key is kept.

    Raises:
        ProfileError: the profile cannot be read or is not valid TOML (it is left as it
            is), or it cannot be rewritten.
    """
    try:
        data = read_document(path)
    except FileNotFoundError:
        return False
    except UnusableFileError as exc:
        raise ProfileError(path, f"cannot be read: it {exc.problem}") from exc
    except OSError as exc:
        raise ProfileError(path, f"cannot be read ({exc})") from exc
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(path, f"is not valid TOML ({exc})") from exc
    if DEFAULT_MODEL_TABLE not in document:
        return False
    del document[DEFAULT_MODEL_TABLE]
    try:
        _replace(path, tomli_w.dumps(document).encode("utf-8"))
    except OSError as exc:
        raise ProfileError(path, f"cannot be rewritten ({exc})") from exc
    return True


def _replace(path: str, data: bytes) -> None:
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            os.chmod(tmp, os.stat(path).st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
