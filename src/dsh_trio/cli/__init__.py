"""The ``dsh-trio`` command line: ``chat``, ``sessions`` and ``show``.

``dsh-trio chat`` is an interactive terminal agent (a built-in offline demo model
unless a provider is configured), ``dsh-trio sessions`` lists the saved sessions and
``dsh-trio show ID`` prints one as a readable transcript. :func:`main` runs it
in-process; :class:`OfflineModel` is the offline demo model's adapter.
"""

from ._main import main as main
from ._offline import OfflineModel as OfflineModel

__all__ = ["main", "OfflineModel"]
