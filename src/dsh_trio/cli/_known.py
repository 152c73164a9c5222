"""What ``dsh-trio model set`` accepts: the providers and reasoning efforts the chat knows.

A saved default is used by every later ``dsh-trio chat``, so a typo in it would make
each of them fail; ``model set`` refuses it at once instead, listing what is known.
"""

from __future__ import annotations

from typing import Final

from ._config import PRESETS, UsageError
from ._offline import OFFLINE_MODEL, OFFLINE_PROVIDER

__all__ = ["KNOWN_EFFORTS", "check_default_model", "known_providers"]

#: The reasoning efforts the OpenAI-compatible servers the chat knows accept:
#: OpenAI's (``minimal`` to ``xhigh``) and DeepSeek's (``low``, ``high``, ``max``; it
#: maps ``minimal`` to ``low``, ``medium`` and ``xhigh`` to ``high``, ``ultra`` to ``max``).
KNOWN_EFFORTS: Final = ("minimal", "low", "medium", "high", "xhigh", "max", "ultra")


def known_providers() -> list[str]:
    """The providers ``--provider`` takes without ``--base-url``, ``offline`` last."""
    return [*sorted(PRESETS), OFFLINE_PROVIDER]


def check_default_model(provider: str, model: str, effort: str | None) -> None:
    """Refuse a default model the chat could not use. Never blocks.

    >>> check_default_model("deepseek", "any-model-name", "high")

    Raises:
        UsageError: ``provider`` is not a known provider (the chat would need a base
            URL, which the default cannot hold), the offline provider with another
            model than its own, or ``effort`` is not a known effort; the message
            lists what is known.
    """
    providers = known_providers()
    if provider not in providers:
        raise UsageError(
            f"unknown provider {provider!r}: the default model needs one of "
            f"{', '.join(providers)} (another OpenAI-compatible server: pass "
            "--base-url URL --model NAME to the chat)"
        )
    if provider == OFFLINE_PROVIDER and model != OFFLINE_MODEL:
        raise UsageError(
            f"the {OFFLINE_PROVIDER} provider has one model, {OFFLINE_MODEL}; got {model!r}"
        )
    if effort is not None and effort not in KNOWN_EFFORTS:
        raise UsageError(
            f"unknown reasoning effort {effort!r}: known efforts are "
            f"{', '.join(KNOWN_EFFORTS)} (omit --effort for the model's default)"
        )
