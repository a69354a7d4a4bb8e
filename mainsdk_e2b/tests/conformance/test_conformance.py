"""Every conformance test that applies to E2B, each on its cassette in cassettes/."""

from mainsdk_conformance.suite import *  # noqa: F403
