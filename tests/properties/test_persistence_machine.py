"""The persistence state machine, run under the selected profile."""

from __future__ import annotations

from dsh_trio.testing import machine_settings

from .persistence_machine import PersistenceMachine

TestPersistenceMachine = PersistenceMachine.TestCase
TestPersistenceMachine.settings = machine_settings()
