"""The conformance suite. A driver's test module runs all of it with ``from mainsdk_conformance.suite import *``.

Star-import, SQLAlchemy style, so a new suite version's tests (new classes too)
run without the driver changing its module; the plugin refuses a module that
overrides a suite test, and expected failures go in the target instead.
"""

from mainsdk_conformance.suite.action import TestAction
from mainsdk_conformance.suite.audit import TestAudit
from mainsdk_conformance.suite.box import TestTmpAndHome
from mainsdk_conformance.suite.cells import TestBackground, TestCells
from mainsdk_conformance.suite.checkpoints import TestCheckpoints, TestPause
from mainsdk_conformance.suite.errors import TestErrors
from mainsdk_conformance.suite.faults import TestFaults
from mainsdk_conformance.suite.files import TestFiles
from mainsdk_conformance.suite.limits import TestLimits, TestOutput
from mainsdk_conformance.suite.network import TestNetwork
from mainsdk_conformance.suite.packages import TestNoPackages, TestPackages
from mainsdk_conformance.suite.run import TestIsolation, TestRun
from mainsdk_conformance.suite.secrets import TestSecrets
from mainsdk_conformance.suite.sessions import TestNoSessions, TestSessions

__all__ = [
    "TestAction",
    "TestAudit",
    "TestBackground",
    "TestCells",
    "TestCheckpoints",
    "TestErrors",
    "TestFaults",
    "TestFiles",
    "TestIsolation",
    "TestLimits",
    "TestNetwork",
    "TestNoPackages",
    "TestNoSessions",
    "TestOutput",
    "TestPackages",
    "TestPause",
    "TestRun",
    "TestSecrets",
    "TestSessions",
    "TestTmpAndHome",
]

SUITE_CLASSES: tuple[type, ...] = (
    TestAction,
    TestAudit,
    TestBackground,
    TestCells,
    TestCheckpoints,
    TestErrors,
    TestFaults,
    TestFiles,
    TestIsolation,
    TestLimits,
    TestNetwork,
    TestNoPackages,
    TestNoSessions,
    TestOutput,
    TestPackages,
    TestPause,
    TestRun,
    TestSecrets,
    TestSessions,
    TestTmpAndHome,
)
