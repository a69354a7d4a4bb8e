"""mainsdk-mcp: the code-runner action (``sandbox.action``) served over the Model Context Protocol.

``mainsdk sandbox mcp`` serves it on stdio (``mainsdk_mcp.cli``, added to the ``mainsdk`` command line
through the ``mainsdk_cli_commands`` hook); ``mainsdk_mcp.server`` holds the server (``build_server``,
``serve_stdio``). This module imports neither, so the command line lists the command without loading ``mcp``.
"""
