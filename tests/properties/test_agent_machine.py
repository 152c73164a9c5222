"""The agent state machine, run under the selected profile."""

from __future__ import annotations

from dsh_trio.testing import AgentStateMachine, machine_settings


class AgentMachine(AgentStateMachine):
    """The base machine as shipped: no hooks of its own."""


TestAgentMachine = AgentMachine.TestCase
TestAgentMachine.settings = machine_settings()
