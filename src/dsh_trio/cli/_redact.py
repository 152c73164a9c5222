"""Secrets kept out of what the command line prints: passwords in connection strings.

Every error line ``dsh-trio`` prints passes through :func:`redact`, so a store given
as ``postgresql://me:secret@db/app`` or ``host=db password=secret`` is shown with
``***`` in place of the secret, whichever message repeats it.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["redact"]

#: ``scheme://user:PASSWORD@``: everything between the user's colon and the last ``@``
#: of the authority.
_USERINFO: Final = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"]*):[^\s/'\"]*@"
)
#: ``password=VALUE`` (libpq keywords, URI query parameters): the value, quoted or not.
_SECRET_KEY: Final = re.compile(
    r"(?P<key>\b(?:ssl)?(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key)"
    r"\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&;,'\")]*)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with the password-like parts of connection strings replaced by ``***``.

    Replaces the password of a URI's ``user:password@`` and the value of a
    ``password=``, ``secret=``, ``token=`` or ``api_key=`` setting (any case, quoted
    or not). Pure; never blocks.

    >>> redact("cannot use 'postgresql://me:s3cret@db/app?password=x'")
    "cannot use 'postgresql://me:***@db/app?password=***'"
    >>> redact("got 'host=db password=s3cret dbname=app'")
    "got 'host=db password=*** dbname=app'"
    """
    text = _USERINFO.sub(lambda m: f"{m['head']}:***@", text)
    return _SECRET_KEY.sub(lambda m: f"{m['key']}***", text)
