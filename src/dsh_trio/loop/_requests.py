"""Request preparation: the call config the ``agent/request`` waterfall starts from."""

from __future__ import annotations

import attrs

from ..values import AgentOptions, CallConfig, EpochHeader

__all__ = ["request_seed"]


def request_seed(
    options: AgentOptions, persisted: EpochHeader | None, header_logged: bool
) -> CallConfig:
    """The seed config of a request: the options', or the logged header's."""
    if not header_logged or persisted is None:
        effort = options.reasoning_effort
        if (
            effort is None
            and persisted is not None
            and persisted.config.provider == options.provider
            and persisted.config.model == options.model
            and not (
                persisted.adapter_defaults
                and persisted.adapter_defaults.reasoning_effort
            )
        ):
            effort = persisted.config.reasoning_effort
        return CallConfig(
            provider=options.provider or "",
            model=options.model or "",
            reasoning_effort=effort,
            max_tokens=options.max_tokens,
            thinking=options.thinking,
        )
    seed = persisted.config
    defaults = persisted.adapter_defaults
    if defaults is not None and (defaults.reasoning_effort or defaults.max_tokens):
        seed = attrs.evolve(
            seed,
            reasoning_effort=None
            if defaults.reasoning_effort
            else seed.reasoning_effort,
            max_tokens=None if defaults.max_tokens else seed.max_tokens,
        )
    return seed
