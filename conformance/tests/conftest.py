"""The machinery's own tests: cassettes, the replay server, record mode and the plugin."""

pytest_plugins = ["pytester"]
