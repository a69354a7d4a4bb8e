"""The whole conformance suite on the kubernetes driver: the API server replayed from cassettes, sandboxd live."""

from mainsdk_conformance.suite import *  # noqa: F403
