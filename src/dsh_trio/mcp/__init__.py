"""MCP servers' tools as dsh_trio tools, on the official ``mcp`` SDK (extra ``[mcp]``).

:func:`open_stdio` starts a server process, :func:`open_http` connects to a
streamable-HTTP server; each yields an :class:`MCPServer` whose ``tools`` register
like any tool, for as long as the block lasts. Importing this module does not import
the SDK: opening a server does (an ``ImportError`` names the extra when it is
missing).

Example::

    import dsh_trio as dsh

    async with dsh.mcp.open_stdio(["python", "server.py"]) as server:
        async with dsh.open_runtime(models=models, tools=server.tools) as runtime:
            async with runtime.agents.open(options=options) as agent:
                await agent.run(dsh.user_message("add 2 and 3"))
"""

from ._open import (
    MCPServer as MCPServer,
    open_http as open_http,
    open_stdio as open_stdio,
)

__all__ = ["open_stdio", "open_http", "MCPServer"]
