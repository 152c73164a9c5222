"""Hypothesis profiles for the state machines (``HYPOTHESIS_PROFILE``: ci, dev, deep)."""

from __future__ import annotations

from dsh_trio.testing import register_profiles

register_profiles()
