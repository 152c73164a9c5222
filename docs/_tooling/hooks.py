"""mkdocs hooks of the documentation build (``hooks:`` in ``mkdocs.yml``)."""

from __future__ import annotations

import logging
from typing import Any


def on_config(config: Any) -> Any:
    """Keep ``--strict`` strict under ``--quiet``.

    ``mkdocs build -q`` raises the ``mkdocs`` logger to ERROR, so warnings (an unresolved
    cross-reference, a missing page) never reach the counter that ``--strict`` checks and
    the build passes. A strict build lowers it back to WARNING: ``-q`` then hides the INFO
    lines only, and every warning is shown and fails the build.
    """
    logger = logging.getLogger("mkdocs")
    if config.strict and logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    return config
