"""The hypothesis profiles of the state machines: ``ci``, ``dev`` and ``deep``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from hypothesis import HealthCheck, settings

__all__ = ["PROFILES", "machine_settings", "profile_name", "register_profiles"]

#: The hypothesis settings of each profile, by name.
PROFILES: Final[Mapping[str, Mapping[str, Any]]] = {
    # CI: reproducible and bounded (>= 200 examples x 30 steps per machine).
    "ci": {"max_examples": 200, "stateful_step_count": 30, "derandomize": True},
    # Local default: quick feedback.
    "dev": {"max_examples": 25, "stateful_step_count": 20},
    # HYPOTHESIS_PROFILE=deep: >= 10**5 steps per machine, random seeds.
    "deep": {"max_examples": 2000, "stateful_step_count": 60},
}


def profile_name() -> str:
    """The selected profile: ``$HYPOTHESIS_PROFILE``, else ``ci`` when ``$CI`` is set, else ``dev``."""
    chosen = os.environ.get("HYPOTHESIS_PROFILE")
    if chosen:
        return chosen
    ci = os.environ.get("CI", "").strip().lower()
    return "ci" if ci not in ("", "0", "false", "no") else "dev"


def register_profiles() -> None:
    """Register the ``ci``, ``dev`` and ``deep`` hypothesis profiles (idempotent).

    They can then be loaded with ``settings.load_profile(name)`` or pytest's
    ``--hypothesis-profile``. :func:`machine_settings` does not depend on this.
    """
    for name in PROFILES:
        settings.register_profile(name, machine_settings(name))


def machine_settings(profile: str | None = None, **overrides: Any) -> settings:
    """Hypothesis settings for the state machines under a profile.

    Every profile has no deadline (guest-mode steps take real time), no example
    database and no health checks (a machine example is slow by design).

    Example::

        TestMyMachine = MyMachine.TestCase
        TestMyMachine.settings = machine_settings()

    Args:
        profile: ``"ci"``, ``"dev"`` or ``"deep"``; default :func:`profile_name`.
        **overrides: further :class:`hypothesis.settings` arguments.

    Raises:
        KeyError: unknown profile name.
    """
    name = profile if profile is not None else profile_name()
    if name not in PROFILES:
        raise KeyError(
            f"unknown hypothesis profile {name!r} (known: {', '.join(PROFILES)})"
        )
    values: dict[str, Any] = {
        "deadline": None,
        "database": None,
        "suppress_health_check": list(HealthCheck),
        **PROFILES[name],
        **overrides,
    }
    return settings(**values)
