"""mainsdk-cli: the ``mainsdk`` command line (``mainsdk sandbox run``, ``mainsdk sandbox drivers``), an app on core.

``mainsdk_cli.cli`` holds the command (``main``; also ``python -m mainsdk_cli``), ``mainsdk_cli.hooks`` the
``mainsdk_cli_commands`` hook through which other distributions add theirs (``mainsdk check``, ``mainsdk
sandbox mcp``), ``mainsdk_cli.out_dir`` the folder ``--out`` writes into. Importing this package imports
none of them: a command plugin imports ``mainsdk_cli.hooks`` alone.
"""
