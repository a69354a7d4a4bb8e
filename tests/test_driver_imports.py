"""Drivers take core's contract from one documented place: ``mainsdk.driver`` (and ``@hookimpl``, ``AppConfig``).

Read from the drivers' sources (the local, E2B, Vercel, Kubernetes and example drivers, the conformance tests'
third-party driver, and the driver kit they share), so a driver reaching into another module of core fails here,
with the import named. The few left are listed with why ``mainsdk.driver`` cannot re-export them yet.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    "mainsdk_local/src",
    "mainsdk_e2b/src",
    "mainsdk_vercel/src",
    "mainsdk_kubernetes/src",
    "plugins/mainsdk_example_driver/src",
    "conformance/tests/third_party_driver/src",
    "mainsdk_driverkit/src",
]
# Where a driver may import from core, and what: all of mainsdk.driver, and one name of each other module.
CONTRACT = {"mainsdk.hookspecs": "hookimpl", "mainsdk.config": "AppConfig"}
# Each of these modules imports mainsdk.driver, so mainsdk.driver re-exporting them would close an import circle.
NOT_YET = {
    ("mainsdk_local/driver.py", "mainsdk", "arguments"): "the local_sandbox() factory checks its keyword arguments",
    ("mainsdk_local/driver.py", "mainsdk.config", "Permissions"): "local_sandbox() builds its own AppConfig",
    ("mainsdk_local/driver.py", "mainsdk.config", "parse_app_config"): "local_sandbox() builds its own AppConfig",
    ("mainsdk_local/driver.py", "mainsdk.plugins", "DriverHookError"): "a start failure worded as core words one",
}


def core_imports() -> list[tuple[str, str, str]]:
    """(file under its source root, module, name) for every import of core in the drivers' sources."""
    found = []
    for source in SOURCES:
        for path in sorted((ROOT / source).rglob("*.py")):
            where = str(path.relative_to(ROOT / source))
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
                    if node.module == "mainsdk" or node.module.startswith("mainsdk."):
                        found += [(where, node.module, alias.name) for alias in node.names]
                elif isinstance(node, ast.Import):
                    found += [(where, a.name, "") for a in node.names if a.name.split(".")[0] == "mainsdk"]
    return found


def test_drivers_import_core_only_from_the_contract_module() -> None:
    imports = core_imports()
    assert len(imports) > 50  # the walk found the drivers' imports
    elsewhere = [
        f"{where}: from {module} import {name}"
        for where, module, name in imports
        if module != "mainsdk.driver" and CONTRACT.get(module) != name and (where, module, name) not in NOT_YET
    ]
    assert elsewhere == [], "import these from mainsdk.driver (re-export them there if missing)"


def test_each_import_left_outside_the_contract_is_still_made() -> None:
    # An entry of NOT_YET that no driver makes any more is dropped from the list, so the list stays the truth.
    assert set(NOT_YET) <= set(core_imports())
