"""Every test of the conformance suite, on the local driver."""

from mainsdk_conformance.suite import *  # noqa: F403
