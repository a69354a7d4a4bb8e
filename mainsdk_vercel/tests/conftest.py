"""The conformance plugin, loaded here so `pytest mainsdk_vercel/tests` takes it as an initial conftest.

pytest refuses ``pytest_plugins`` in a conftest it meets only while collecting
(``tests/conformance/conftest.py`` is one when the run starts at ``tests``).
"""

pytest_plugins = ["mainsdk_conformance.plugin"]
