"""Every test of the conformance suite, on the example driver."""

from mainsdk_conformance.suite import *  # noqa: F403
