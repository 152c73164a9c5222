"""The plugins of the ``assistant`` preset: a note-taking tool with its runtime context,
and a guard hook. Each setup function is called once per preset generation."""

from collections.abc import Awaitable, Callable, Mapping

import dsh_trio as dsh


def notes(scope: dsh.PresetScope, config: Mapping[str, object]) -> None:
    """Row ``notes``: a tool that keeps notes, and the notes as runtime context."""
    limit = int(str(config.get("limit", 5)))
    kept: list[str] = []

    @dsh.tool
    async def take_note(ctx: dsh.ToolContext, text: str) -> str:
        """Remember a short note for the rest of the conversation."""
        kept.append(text)
        del kept[:-limit]
        return f"noted ({len(kept)} kept)"

    def render(agent: dsh.Agent) -> str | None:
        # A changed context reaches the model as one snapshot message per turn.
        return "Notes:\n" + "\n".join(f"- {n}" for n in kept) if kept else None

    scope.tool(take_note)
    scope.context("notes", render)
    scope.section("notes-guide", "Use take_note to remember what the user asks you to.")


def guard(scope: dsh.PresetScope, config: Mapping[str, object]) -> None:
    """Row ``guard``: a turn whose input mentions a forbidden word ends Blocked()."""
    forbidden = config.get("forbidden", [])
    words = [str(w).lower() for w in forbidden] if isinstance(forbidden, list) else []

    async def refuse_secrets(
        event: dsh.PreStep, next: Callable[[], Awaitable[dsh.PreStepDecision]]
    ) -> dsh.PreStepDecision:
        if any(w in dsh.text_of(m).lower() for m in event.messages for w in words):
            return dsh.Reject()
        return await next()

    scope.on("agent/pre-step", refuse_secrets)
