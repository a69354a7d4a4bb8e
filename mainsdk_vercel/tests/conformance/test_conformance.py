"""The whole conformance suite on the vercel-sandbox driver, replayed from cassettes."""

from mainsdk_conformance.suite import *  # noqa: F403
