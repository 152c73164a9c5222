"""The README example: checking that your own ``agent/pre-step`` hook never loses a message.

A user subclasses :class:`AgentStateMachine`, registers the hook in
``setup_agent``, and gets every invariant of the machine for free: here, that each
message claimed into a step is written as a ``user/message`` unless the turn was
aborted, failed or blocked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

import dsh_trio as dsh
from dsh_trio.testing import AgentStateMachine, machine_settings

from .mutation import assert_caught

# ------------------------------------------------------------------ the example


async def redact_secrets(
    event: object, next: Callable[[], Awaitable[dsh.PreStepDecision]]
) -> dsh.PreStepDecision:
    """A pre-step hook that masks the word "secret" in what the model will see."""
    decision = await next()
    if not isinstance(decision, dsh.Enter):
        return decision
    redacted = tuple(
        attrs.evolve(
            m,
            content=tuple(
                dsh.TextBlock(b.text.replace("secret", "******"))
                if isinstance(b, dsh.TextBlock)
                else b
                for b in m.content
            ),
        )
        for m in decision.messages
    )
    return dsh.Enter(redacted, starts_request_series=decision.starts_request_series)


class RedactingHookMachine(AgentStateMachine):
    """The agent machine with the redacting hook installed on every agent."""

    def setup_agent(self, agent: dsh.Agent) -> None:
        agent.scope.on("agent/pre-step", redact_secrets)


TestRedactingHook = RedactingHookMachine.TestCase
TestRedactingHook.settings = machine_settings()


# ------------------------------------------------------------------ the same check catches a bad hook


async def drop_secrets(
    event: object, next: Callable[[], Awaitable[dsh.PreStepDecision]]
) -> dsh.PreStepDecision:
    """A buggy variant: it drops messages that mention a secret instead of masking them."""
    decision = await next()
    if not isinstance(decision, dsh.Enter):
        return decision
    kept = tuple(
        m
        for m in decision.messages
        if "secret" not in "".join(getattr(b, "text", "") for b in m.content)
    )
    return dsh.Enter(kept)


class DroppingHookMachine(AgentStateMachine):
    def setup_agent(self, agent: dsh.Agent) -> None:
        agent.scope.on("agent/pre-step", drop_secrets)


def test_a_hook_that_drops_messages_is_caught() -> None:
    program = assert_caught(
        DroppingHookMachine, r"was lost: claimed at #\d+ into turn \d+, never written"
    )
    assert any("secret" in step for step in program)
