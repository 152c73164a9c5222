"""DeepSeek's own API: how its URL is recognised, and the model names it retired.

DeepSeek retired ``deepseek-chat`` and ``deepseek-reasoner`` on 2026-07-24; they had
been aliases of its V4 Flash model with thinking off and on. Its current names are
``deepseek-flash`` (served by DeepSeek-V4.1-Flash), ``deepseek-v4-pro``, and the older
``deepseek-v4-flash``, which is still served (by V4.1 Flash). A request for a retired
name on DeepSeek's API fails before it is sent, naming the replacement; other servers
(a proxy, vLLM) decide for themselves what a model name means.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import httpx  # noqa: ASYNC127  # URL parsing only

from ..errors import LlmError
from ..values import LlmFailure

__all__ = ["RETIRED_DEEPSEEK_MODELS", "check_deepseek_model", "is_deepseek_url"]

#: The model DeepSeek names today for its retired aliases.
_REPLACEMENT: Final = "deepseek-flash"

#: DeepSeek's retired model names → whether the replacement runs with thinking on.
RETIRED_DEEPSEEK_MODELS: Final[Mapping[str, bool]] = {
    "deepseek-chat": False,
    "deepseek-reasoner": True,
}


def is_deepseek_url(base_url: str) -> bool:
    """Whether ``base_url`` is DeepSeek's own API (a ``*.deepseek.com`` host).

    Example::

        assert is_deepseek_url("https://api.deepseek.com")
        assert not is_deepseek_url("http://localhost:8000/v1")
    """
    try:
        host = httpx.URL(base_url).host.lower()
    except (httpx.InvalidURL, TypeError, ValueError):
        return False
    return host == "deepseek.com" or host.endswith(".deepseek.com")


def check_deepseek_model(base_url: str, model: str) -> None:
    """Refuse a model name DeepSeek retired, when ``base_url`` is DeepSeek's own API.

    Never blocks. Any other URL, and every current name, passes.

    Example::

        check_deepseek_model("https://api.deepseek.com", "deepseek-flash")  # passes
        check_deepseek_model("http://localhost:8000/v1", "deepseek-chat")  # passes

    Raises:
        LlmError: ``model`` is ``deepseek-chat`` or ``deepseek-reasoner`` and
            ``base_url`` is DeepSeek's (code ``INVALID_REQUEST``); the message names
            the replacement, ``deepseek-flash`` with thinking off (for
            ``deepseek-chat``) or on (for ``deepseek-reasoner``).
    """
    thinking = RETIRED_DEEPSEEK_MODELS.get(model)
    if thinking is None or not is_deepseek_url(base_url):
        return
    on_off, flag = ("on", "--thinking") if thinking else ("off", "--no-thinking")
    raise LlmError(
        LlmFailure(
            f"DeepSeek retired the model {model!r} on 2026-07-24: use "
            f"{_REPLACEMENT!r} with thinking {on_off} instead "
            f"(AgentOptions(model={_REPLACEMENT!r}, thinking={thinking}); in the "
            f"chat: --model {_REPLACEMENT} {flag})",
            "INVALID_REQUEST",
        )
    )
