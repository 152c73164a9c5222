"""Which ``request/header`` a request needs: the header log's decision, kept pure."""

from __future__ import annotations

from ..values import CallConfig, EpochHeader, JsonValue, RequestHeaderData

__all__ = ["header_event"]


def header_event(
    persisted: EpochHeader | None,
    header_logged: bool,
    config: CallConfig,
    tools: tuple[JsonValue, ...],
    series: bool,
) -> RequestHeaderData | None:
    """The ``request/header`` data to append before a request, or ``None``.

    ``persisted`` is the session's latest header and ``header_logged`` whether this
    driver logged one yet; the first request of a driver always logs one
    (``"initial"``, or ``"resume"`` over a persisted header), later ones only when
    the header changes (``"change"``) or a request series starts (``"series"``).
    Pure; never blocks.

    Example::

        header_event(None, False, config, (), False).reason  # "initial"
    """
    if (  # the logged header is this request's: nothing to build or compare
        header_logged
        and not series
        and persisted is not None
        and persisted.config is config
        and persisted.adapter_defaults is None
        and persisted.tools == (tools or None)
    ):
        return None
    header = EpochHeader(config=config, tools=tools or None)
    if not header_logged:
        return RequestHeaderData(
            header=header, reason="resume" if persisted is not None else "initial"
        )
    if persisted is None or header != persisted:
        return RequestHeaderData(
            header=header, reason="change", starts_series=True if series else None
        )
    if series:
        return RequestHeaderData(header=header, reason="series")
    return None
