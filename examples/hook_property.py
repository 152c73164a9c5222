"""A property test of a custom hook: an ``agent/request`` hook that caps ``max_tokens``.

Subclassing :class:`~dsh_trio.testing.AgentStateMachine` installs the hook on every
agent the machine drives; hypothesis then interleaves follow-ups, steering, inbox
edits, cancels, maintenance, model failures and disposal, and checks the runtime's
inbox and status invariants after every step. The machine's own check,
``check_hook``, adds this hook's property: no request the model received asked for
more than ``CAP`` tokens.

    python -m pytest examples/hook_property.py
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
from hypothesis.stateful import invariant

import dsh_trio as dsh
from dsh_trio.testing import AgentStateMachine, machine_settings

CAP = 256


async def cap_tokens(
    event: dsh.RequestProposal, next: Callable[[], Awaitable[dsh.CallConfig]]
) -> dsh.CallConfig:
    """Never let a request ask for more than ``CAP`` output tokens."""
    config = await next()
    wanted = config.max_tokens if config.max_tokens is not None else CAP
    return attrs.evolve(config, max_tokens=min(wanted, CAP))


class CappedTokensMachine(AgentStateMachine):
    # Agents under test ask for far more than the cap.
    options = dsh.AgentOptions(
        provider="scripted", model="scripted-model", max_tokens=4096
    )

    def setup_agent(self, agent: dsh.Agent) -> None:
        agent.scope.on("agent/request", cap_tokens)

    @invariant()
    def check_hook(self) -> None:
        for subject in self.subjects:
            for _, request in subject.requests:
                assert request.max_tokens is not None and request.max_tokens <= CAP, (
                    request
                )


TestCappedTokens = CappedTokensMachine.TestCase
TestCappedTokens.settings = machine_settings()
