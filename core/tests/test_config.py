import tracemalloc
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from mainsdk.config import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_NODES,
    AppConfig,
    DiskPermissions,
    Limits,
    SandboxConfig,
    load_config,
    load_config_text,
    parse_app_config,
    parse_sandbox_config,
)
from mainsdk.entry_points import config_section_names
from mainsdk.errors import INVALID_OPTION, UNKNOWN_CONFIG_KEY, ConfigError, ConfigProblem, SandboxError
from mainsdk.units import MAX_DISK, MAX_FILES, MAX_MEMORY, MAX_OUTPUT, MAX_TIMEOUT

MB = 1024 * 1024

SEED_EXAMPLE = """\
sandbox:
  driver: vercel-sandbox
  limits: { timeout: 30s, memory: 512MB, output: 1MB, files: 50MB, max-cost: $0.05 }
  network: [pypi.org]                # the most any run may get; must also be in network.allow
  secrets: [OPENWEATHER_KEY]         # the only secrets a run may be given
  vercel: { token: "secret:VERCEL_TOKEN", project: prj_123 }
network:
  allow: [pypi.org]
"""


def problems_of(text: str) -> list[tuple[str, str, int | None]]:
    """(code, key, line) of every problem that loading ``text`` reports."""
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    return [(p.code, p.key, p.line) for p in caught.value.problems]


def only_problem(text: str) -> ConfigProblem:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    assert len(caught.value.problems) == 1, caught.value.problems
    return caught.value.problems[0]


# --- Defaults and a full config ---------------------------------------------------


@pytest.mark.parametrize("raw", [None, {}])
def test_empty_sandbox_section_gets_every_default(raw: object) -> None:
    config = parse_sandbox_config(raw)
    assert config == SandboxConfig()
    assert config.driver == "local"
    assert config.limits == Limits(timeout=30.0, memory=512 * MB, output=1 * MB, files=50 * MB, max_cost=None)
    assert config.sections == {}
    assert config.network == ()
    assert config.secrets == ()


def test_null_subsections_get_their_defaults() -> None:
    config = load_config_text("sandbox:\n  limits:\n  network:\n")
    assert config.sandbox == SandboxConfig()


def test_partial_limits_keep_the_other_defaults() -> None:
    config = parse_sandbox_config({"limits": {"timeout": "2m"}})
    assert config.limits == Limits(timeout=120.0)


def test_seed_configuration_example() -> None:
    config = load_config_text(SEED_EXAMPLE, source="main.yaml")
    sandbox = config.sandbox
    assert sandbox.driver == "vercel-sandbox"
    assert sandbox.limits.timeout == 30.0
    assert sandbox.limits.memory == 512 * 1024 * 1024
    assert sandbox.limits.output == 1024 * 1024
    assert sandbox.limits.files == 50 * 1024 * 1024
    assert sandbox.limits.max_cost == Decimal("0.05")
    assert sandbox.network == ("pypi.org",)
    assert sandbox.secrets == ("OPENWEATHER_KEY",)
    assert set(sandbox.sections) == {"vercel"}  # the vercel driver's own section (see mainsdk_vercel's tests)
    assert sandbox.price is None
    assert config.network_allow == ("pypi.org",)
    assert config.permissions.processes is None
    assert config.permissions.disk.temp_max == 1024 * MB
    assert config.source == Path("main.yaml")


def test_quick_start_example_reads_permissions() -> None:
    config = load_config_text(
        """\
sandbox:
  driver: local
  local: { python: python3 }
permissions:
  processes: [python3]
  disk: { temp: { max: 1GB } }
"""
    )
    assert config.sandbox.driver == "local"
    assert config.permissions.processes == ("python3",)
    assert config.permissions.disk.temp_max == 1024 * MB


def test_every_sandbox_key() -> None:
    config = parse_sandbox_config(
        {
            "driver": "e2b",
            "limits": {"timeout": "500ms", "memory": "1GiB", "output": "64KB", "files": "10B", "max-cost": "$1"},
            "network": ["*.PyPI.org", "203.0.113.7"],
            "secrets": ["_A", "b2"],
            "price": "$0.0001",
        }
    )
    assert config == SandboxConfig(
        driver="e2b",
        limits=Limits(timeout=0.5, memory=1024 * MB, output=64 * 1024, files=10, max_cost=Decimal(1)),
        network=("*.pypi.org", "203.0.113.7"),
        secrets=("_A", "b2"),
        price=Decimal("0.0001"),
    )


def test_other_sections_are_kept_as_plain_python() -> None:
    config = load_config_text(
        """\
app: { name: demo, ratio: 1.5, on: true }
network:
  allow: [pypi.org]
  proxy: corp        # another interface's key: not ours to refuse
permissions:
  env: [HOME]
sandbox: {}
"""
    )
    assert config.other == {
        "app": {"name": "demo", "ratio": 1.5, "on": True},
        "network": {"allow": ["pypi.org"], "proxy": "corp"},
        "permissions": {"env": ["HOME"]},
    }
    app = config.other["app"]
    # ruamel's ScalarFloat and CommentedMap are gone.
    assert type(app) is dict
    assert type(app["ratio"]) is float
    assert type(config.other["network"]["allow"]) is list


@pytest.mark.parametrize(
    ("text", "key", "meant", "line"),
    [
        ("sandbx:\n  driver: e2b\n", "sandbx", "sandbox", 1),
        ("app: {}\nSandbox: {}\n", "Sandbox", "sandbox", 2),
        ("netwrok:\n  allow: [pypi.org]\n", "netwrok", "network", 1),
        ("permission:\n  processes: [python3]\n", "permission", "permissions", 1),
        ("permissions:\n  procesess: [python3]\n", "permissions.procesess", "processes", 2),
        ("permissions:\n  dsk: { temp: { max: 1GB } }\n", "permissions.dsk", "disk", 2),
        ("permissions:\n  disk: { tmp: { max: 1GB } }\n", "permissions.disk.tmp", "temp", 2),
        ("network:\n  proxy: corp\n  alow: [pypi.org]\n", "network.alow", "allow", 3),
        ("network:\n  allows: [pypi.org]\n", "network.allows", "allow", 2),
    ],
)
def test_a_typo_of_a_key_the_sandbox_reads_outside_sandbox_is_refused_with_a_did_you_mean(
    text: str, key: str, meant: str, line: int
) -> None:
    # Each loaded silently with the defaults: the local driver, no host, no program.
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="main.yaml")
    (problem,) = caught.value.problems
    assert (problem.code, problem.key, problem.line) == (UNKNOWN_CONFIG_KEY, key, line)
    assert f'did you mean "{meant}"?' in problem.message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("permissions:\n  disk: { persistent: { max: 1GB } }\n", "permissions.disk.persistent"),
        ("permissions:\n  disk: { temp: { max: 1GB, min: 1MB } }\n", "permissions.disk.temp.min"),
    ],
)
def test_any_unknown_key_under_permissions_disk_is_refused_as_under_sandbox(text: str, key: str) -> None:
    # permissions.disk is the sandbox's whole: a key it does not take would be silently ignored.
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="main.yaml")
    (problem,) = caught.value.problems
    assert (problem.code, problem.key, problem.line) == (UNKNOWN_CONFIG_KEY, key, 2)
    assert "takes only" in problem.message


def test_sections_and_keys_not_close_to_the_sandboxs_stay_the_rest_of_the_apps() -> None:
    text = (
        "networking: {}\nsandbox_id: {}\nbox: {}\naudit: {file: a.jsonl}\nnetwork: {deny: [x], proxy: corp}\n"
        "permissions: {env: [], max_processes: 3}\n"
    )
    assert set(load_config_text(text).other) == {"networking", "sandbox_id", "box", "audit", "network", "permissions"}


@pytest.mark.parametrize("host", ["localhost", "LocalHost.", "app.localhost", "*.app.localhost"])
def test_localhost_in_sandbox_network_is_refused_at_load_naming_the_loopback_address(host: str) -> None:
    # It loaded, then every run given it was refused by the proxy (403), while 127.0.0.1 reached the host.
    text = f'sandbox:\n  network: [pypi.org, "{host}"]\nnetwork:\n  allow: [pypi.org, "{host}"]\n'
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="main.yaml")
    [problem] = caught.value.problems  # network.allow is the app's: a localhost there is another interface's
    assert (problem.code, problem.key, problem.line) == (INVALID_OPTION, "sandbox.network[1]", 2)
    assert "list 127.0.0.1 or ::1 here and in network.allow instead" in problem.message
    loaded = load_config_text("sandbox:\n  network: [127.0.0.1, '::1']\nnetwork:\n  allow: [127.0.0.1, '::1']\n")
    assert loaded.sandbox.network == ("127.0.0.1", "::1")


def test_parse_app_config_of_a_plain_dict() -> None:
    config = parse_app_config(
        {"sandbox": {"driver": "local"}, "network": {"allow": ["PyPI.org"]}, "permissions": {"processes": []}}
    )
    assert config.network_allow == ("pypi.org",)
    assert config.permissions.processes == ()
    assert config.source is None


# --- Problems -------------------------------------------------------------------


def test_unknown_key_names_its_dotted_path_line_and_the_valid_keys() -> None:
    problem = only_problem("# my app\nsandbox:\n  driver: local\n  limitz: { timeout: 10s }\n")
    assert problem.code == UNKNOWN_CONFIG_KEY == "MAIN-CONFIG-0003"
    assert problem.key == "sandbox.limitz"
    assert (problem.line, problem.column) == (4, 3)
    assert problem.message == (
        "unknown key; the keys here are: driver, limits, network, secrets, packages, egress, price, sessions"
        + "".join(f", {name}" for name in config_section_names())  # the installed drivers' sections
        + '; did you mean "limits"?'
    )


def test_unknown_nested_key_suggests_the_renamed_key() -> None:
    problem = only_problem("sandbox:\n  limits:\n    timeout: 10s\n    max_cost: $1\n")
    assert (problem.code, problem.key, problem.line) == (UNKNOWN_CONFIG_KEY, "sandbox.limits.max_cost", 4)
    assert problem.message.endswith('did you mean "max-cost"?')


def test_unknown_key_without_a_close_match_has_no_suggestion() -> None:
    problem = only_problem("sandbox:\n  zzz: 1\n")
    assert problem.key == "sandbox.zzz"
    assert "did you mean" not in problem.message


def test_three_problems_in_one_file_are_all_reported_with_their_lines() -> None:
    text = """\
sandbox:
  driver: local
  limits:
    timeout: 30x
    memory: 512MB
  secretz: [A]
  network: [pypi.org, "https://files.pythonhosted.org"]
"""
    assert problems_of(text) == [
        (INVALID_OPTION, "sandbox.limits.timeout", 4),
        (UNKNOWN_CONFIG_KEY, "sandbox.secretz", 6),
        (INVALID_OPTION, "sandbox.network[1]", 7),
    ]


def test_problems_across_sections_are_all_reported() -> None:
    text = """\
sandbox:
  driver: Vercel
network:
  allow: [pypi.org:443]
permissions:
  processes: python3
  disk: { temp: { max: 0MB } }
"""
    assert problems_of(text) == [
        (INVALID_OPTION, "sandbox.driver", 2),
        (INVALID_OPTION, "network.allow[0]", 4),
        (INVALID_OPTION, "permissions.processes", 6),
        (INVALID_OPTION, "permissions.disk.temp.max", 7),
    ]


def test_bad_unit_keeps_the_unit_message() -> None:
    problem = only_problem("sandbox:\n  limits: { timeout: 30x }\n")
    assert problem.code == INVALID_OPTION == "MAIN-SANDBOX-0001"
    assert problem.key == "sandbox.limits.timeout"
    assert problem.message == '"30x" is not a duration: use a number with s, ms, m or h, like 30s'
    assert problem.line == 2


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("sandbox:\n  limits: { memory: 512XB }\n", "sandbox.limits.memory", '"512XB" is not a size'),
        ("sandbox:\n  limits: { max-cost: five }\n", "sandbox.limits.max-cost", '"five" is not an amount of money'),
        ("sandbox:\n  price: -0.1\n", "sandbox.price", "-0.1 is not an amount of money"),
        ("sandbox:\n  driver: ''\n", "sandbox.driver", "must not be empty"),
        ("sandbox:\n  driver: Vercel_Sandbox\n", "sandbox.driver", '"Vercel_Sandbox" is not a driver id'),
        ("sandbox:\n  secrets: [1KEY]\n", "sandbox.secrets[0]", '"1KEY" is not a secret name'),
        ("sandbox:\n  secrets: [OK, my-key]\n", "sandbox.secrets[1]", '"my-key" is not a secret name'),
    ],
)
def test_invalid_values_name_their_key(text: str, key: str, message: str) -> None:
    problem = only_problem(text)
    assert problem.key == key
    assert problem.line == 2
    assert message in problem.message


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("sandbox:\n  network: pypi.org\n", "sandbox.network", 'expected a list like [pypi.org], not "pypi.org"'),
        ("sandbox:\n  secrets: KEY\n", "sandbox.secrets", 'expected a list like [OPENWEATHER_KEY], not "KEY"'),
        ("sandbox:\n  driver: [local]\n", "sandbox.driver", "expected text, not a list"),
        ("sandbox:\n  limits: { timeout: [30s] }\n", "sandbox.limits.timeout", "a list is not a duration"),
        ("sandbox:\n  limits: 30s\n", "sandbox.limits", "expected a mapping with the keys timeout, memory"),
        ("sandbox: local\n", "sandbox", "expected a mapping with the keys driver, limits, network, secrets, packages"),
        ("network: [pypi.org]\n", "network", "expected a mapping, not a list"),
        ("permissions:\n  disk: 1GB\n", "permissions.disk", 'expected a mapping, not "1GB"'),
    ],
)
def test_list_where_a_scalar_belongs_and_the_reverse(text: str, key: str, message: str) -> None:
    problem = only_problem(text)
    assert problem.code == INVALID_OPTION
    assert problem.key == key
    assert problem.message.startswith(message)


def test_every_bad_list_item_is_reported_at_its_own_line() -> None:
    text = "sandbox:\n  network:\n    - pypi.org\n    - '*'\n    - a.*.com\n"
    assert problems_of(text) == [
        (INVALID_OPTION, "sandbox.network[1]", 4),
        (INVALID_OPTION, "sandbox.network[2]", 5),
    ]


def test_plain_dict_problems_are_collected_without_lines() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_sandbox_config({"driver": "x y", "limitz": {}, "limits": {"files": "1.5B"}}, source="raw")
    assert [(p.code, p.key, p.line, p.source) for p in caught.value.problems] == [
        (INVALID_OPTION, "sandbox.driver", None, "raw"),
        (INVALID_OPTION, "sandbox.limits.files", None, "raw"),
        (UNKNOWN_CONFIG_KEY, "sandbox.limitz", None, "raw"),
    ]


def test_yaml_syntax_error_has_its_line() -> None:
    problem = only_problem("sandbox:\n  driver: local\n  limits: { timeout: 30s\nnetwork: {}\n")
    assert problem.code == INVALID_OPTION
    assert problem.key == "main.yaml"
    assert problem.message.startswith("not valid YAML:")
    assert problem.line == 4


def test_duplicate_key_is_a_syntax_error_at_the_second_key() -> None:
    problem = only_problem("sandbox:\n  driver: local\n  driver: e2b\n")
    assert problem.key == "main.yaml"
    assert "duplicate key" in problem.message
    assert problem.line == 3


@pytest.mark.parametrize("text", ["- sandbox\n", "just text\n", "42\n"])
def test_top_level_that_is_not_a_mapping_is_refused(text: str) -> None:
    problem = only_problem(text)
    assert problem.key == "main.yaml"
    assert problem.message.startswith("the top level must be a mapping")


def test_empty_file_is_every_default() -> None:
    assert load_config_text("# nothing here yet\n") == AppConfig()


def test_problem_text_reads_file_line_key_message_code() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text("sandbox:\n  limitz: {}\n", source="app/main.yaml")
    assert str(caught.value.problems[0]).startswith("app/main.yaml line 2: sandbox.limitz: unknown key;")
    assert caught.value.code == UNKNOWN_CONFIG_KEY


# --- Finding the file ----------------------------------------------------------


def test_mainsdk_config_env_var_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_file = tmp_path / "custom.yaml"
    config_file.write_text("sandbox:\n  driver: e2b\n")
    (tmp_path / "main.yaml").write_text("sandbox:\n  driver: local\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MAINSDK_CONFIG", str(config_file))
    config = load_config()
    assert config.sandbox.driver == "e2b"
    assert config.source == config_file


def test_problems_name_the_file_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config_file = tmp_path / "bad.yaml"
    config_file.write_text("sandbox:\n  driver: local\n  limitz: {}\n")
    monkeypatch.setenv("MAINSDK_CONFIG", str(config_file))
    with pytest.raises(ConfigError) as caught:
        load_config()
    problem = caught.value.problems[0]
    assert (problem.source, problem.key, problem.line) == (str(config_file), "sandbox.limitz", 3)


def test_mainsdk_config_naming_a_missing_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MAINSDK_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError) as caught:
        load_config()
    problem = caught.value.problems[0]
    assert problem.key == "MAINSDK_CONFIG"
    assert "missing.yaml" in problem.message


def test_main_yaml_in_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAINSDK_CONFIG", raising=False)
    (tmp_path / "main.yaml").write_text("sandbox:\n  driver: vercel-sandbox\n")
    monkeypatch.chdir(tmp_path)
    config = load_config()
    assert config.sandbox.driver == "vercel-sandbox"
    assert config.source == Path("main.yaml")


def test_explicit_path_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = tmp_path / "chosen.yaml"
    chosen.write_text("sandbox:\n  limits: { timeout: 5s }\n")
    monkeypatch.setenv("MAINSDK_CONFIG", str(tmp_path / "missing.yaml"))
    assert load_config(chosen).sandbox.limits.timeout == 5.0


def test_no_file_gives_the_embedded_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAINSDK_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    config = load_config()
    assert config == AppConfig()
    assert config.source is None
    assert config.sandbox.driver == "local"
    assert config.permissions.processes is None


def test_yaml_syntax_error_in_a_file_has_its_line(tmp_path: Path) -> None:
    broken = tmp_path / "main.yaml"
    broken.write_text("sandbox:\n  driver: local\n\tlimits: {}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(broken)
    problem = caught.value.problems[0]
    assert (problem.key, problem.line, problem.source) == ("main.yaml", 3, str(broken))


# --- Merge keys, aliases and hostile YAML (issue 12) ----------------------------------------------------------------


MERGED = """\
defaults: &defaults
  timeout: 10s
  memory: 256MB
sandbox:
  limits:
    <<: *defaults
    output: 2MB
"""


def test_a_merge_key_fills_the_mapping_as_yaml_defines() -> None:
    limits = load_config_text(MERGED).sandbox.limits
    assert (limits.timeout, limits.memory, limits.output) == (10.0, 256 * MB, 2 * MB)


def test_a_key_written_beside_the_merge_wins_over_the_merged_one() -> None:
    text = MERGED.replace("    output: 2MB\n", "    timeout: 5s\n")
    assert load_config_text(text).sandbox.limits.timeout == 5.0


def test_a_merged_key_s_problem_is_placed_where_the_merged_mapping_writes_it() -> None:
    text = MERGED.replace("  timeout: 10s\n", "  timeout: forever\n").replace("  memory: 256MB\n", "  memroy: 1GB\n")
    assert problems_of(text) == [
        (INVALID_OPTION, "sandbox.limits.timeout", 2),
        (UNKNOWN_CONFIG_KEY, "sandbox.limits.memroy", 3),
    ]


def test_merging_a_list_of_mappings_and_aliasing_a_list() -> None:
    text = (
        "a: &a {timeout: 1s}\nb: &b {memory: 64MB, timeout: 9s}\nhosts: &hosts [pypi.org]\n"
        "sandbox:\n  limits:\n    <<: [*a, *b]\n  network: *hosts\nnetwork:\n  allow: *hosts\n"
    )
    config = load_config_text(text)
    assert (config.sandbox.limits.timeout, config.sandbox.limits.memory) == (1.0, 64 * MB)  # the first merge wins
    assert config.sandbox.network == config.network_allow == ("pypi.org",)


def test_merging_something_that_is_not_a_mapping_is_refused_with_its_line() -> None:
    problem = only_problem("d: &d [1]\nsandbox:\n  <<: *d\n")
    assert (problem.code, problem.line) == (INVALID_OPTION, 1)  # the YAML reader points at what was merged
    assert "merg" in problem.message


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{previous}'] * 10)}]\n"
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_an_alias_bomb_is_refused_at_its_line_without_building_it() -> None:
    assert len(ALIAS_BOMB) < 420  # ten billion items once expanded
    tracemalloc.start()
    try:
        problem = only_problem(ALIAS_BOMB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problem.code == INVALID_OPTION
    assert problem.line == 4  # d: the first line whose aliases pass the bound
    assert f"more than {MAX_CONFIG_NODES} values" in problem.message
    assert peak < 20 * MB


@pytest.mark.parametrize(
    "wrap",
    ["[{}]", "[[[{}]]]", "{{k: [{}]}}", "[a, {{b: [{}]}}]"],
    ids=["bare", "in-lists", "in-a-mapping", "mixed"],
)
def test_an_alias_bomb_wrapped_in_collections_is_refused_too(wrap: str) -> None:
    levels = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        repeated = ", ".join([f"*l{level - 1}"] * 10)
        levels.append(f"l{level}: &l{level} " + wrap.format(repeated))
    problem = only_problem("\n".join(levels) + "\n")
    assert problem.code == INVALID_OPTION and problem.line is not None and problem.line <= 5
    assert f"more than {MAX_CONFIG_NODES} values" in problem.message


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    problem = only_problem("sandbox:\n  network: &n [pypi.org, *n]\n")
    assert (problem.code, problem.key, problem.line) == (INVALID_OPTION, "sandbox.network[1]", 2)
    assert "repeat itself forever" in problem.message


@pytest.mark.parametrize(
    "text",
    [
        "sandbox:\n  network: " + "[" * 40 + "]" * 40 + "\n",
        "sandbox:\n  network: " + "[" * 60_000 + "\n",
        "sandbox: " + "{a: " * 5000 + "x" + "}" * 5000 + "\n",
        "sandbox:\n" + "".join(f"{'  ' * (depth + 1)}k{depth}:\n" for depth in range(200)),
    ],
)
def test_deep_nesting_is_a_coded_error_not_a_recursion_error(text: str) -> None:
    problem = only_problem(text)
    assert problem.code == INVALID_OPTION and problem.line is not None
    assert "deep" in problem.message or "opens more than" in problem.message


def test_nesting_up_to_the_bound_is_read() -> None:
    depth = MAX_CONFIG_DEPTH - 2  # the top-level mapping and sandbox: take two
    config = load_config_text("sandbox:\n  limits:\n    timeout: 5s\nother: " + "[" * depth + "]" * depth + "\n")
    assert config.sandbox.limits.timeout == 5.0


def test_a_file_over_the_size_bound_is_refused_before_it_is_parsed() -> None:
    problem = only_problem("a: '" + "b" * MAX_CONFIG_BYTES + "'\n")
    assert problem.code == INVALID_OPTION and "may be at most" in problem.message


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("sandbox:\n  limits:\n    timeout: " + "9" * 5000 + "\n", "sandbox.limits.timeout", 3),  # int() refuses
        ("sandbox:\n  price: !!int '" + "9" * 5000 + "'\n", "sandbox.price", 2),
        ("sandbox:\n  limits: {timeout: .nan, memory: .inf}\n", "sandbox.limits.timeout", 2),
        ("sandbox:\n  limits:\n    memory: -.inf\n", "sandbox.limits.memory", 3),
        ("sandbox: !!python/object/apply:os.system [echo pwned]\n", "sandbox", 1),
        ("sandbox:\n  driver: !!binary aGVsbG8=\n", "sandbox.driver", 2),
        ("sandbox: !!set {driver, local}\n", "sandbox", 1),
        ('sandbox:\n  network: !!python/object/apply:os.system ["true"]\n', "sandbox.network", 2),
        ("sandbox:\n  limits: !!omap [timeout: 5s]\n", "sandbox.limits", 2),
        ("%TAG ! tag:example.com,2000:\n---\nsandbox: !foo {}\n", "sandbox", 3),
        ("sandbox:\n  driver: !!timestamp 2001-12-14\n", "sandbox.driver", 2),
        ("sandbox:\n  secrets: [!custom X]\n", "sandbox.secrets[0]", 2),
        ("sandbox:\n  1: local\n", "sandbox.1", 2),
        ("sandbox:\n  [a, b]: local\n", "sandbox.('a', 'b')", 2),
        ("sandbox:\n  ~: local\n", "sandbox.None", 2),
        ("sandbox:\n  limits: [30s]\n", "sandbox.limits", 2),
        ("sandbox:\n  driver: 5\n", "sandbox.driver", 2),
        ("permissions: [python3]\n", "permissions", 1),
        ("permissions:\n  processes: python3\n", "permissions.processes", 2),
        ("network:\n  allow: {pypi.org: yes}\n", "network.allow", 2),
        ("sandbox: {}\nsandbox: {}\n", "main.yaml", 2),
        ("---\na: 1\n---\nb: 2\n", "main.yaml", 3),
        ("sandbox: *nowhere\n", "main.yaml", 1),
    ],
)
def test_malformed_files_are_coded_errors_with_the_key_and_line(text: str, key: str, line: int) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    problems = caught.value.problems
    assert {p.code for p in problems} <= {INVALID_OPTION, UNKNOWN_CONFIG_KEY}
    assert (problems[0].key, problems[0].line) == (key, line)


@pytest.mark.parametrize("text", ["", "\n", "# a comment\n", "---\n", "sandbox:\n", "sandbox: ~\n"])
def test_empty_files_and_sections_are_every_default(text: str) -> None:
    assert load_config_text(text).sandbox == SandboxConfig()


# --- Upper bounds on limits (issue 12) ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "example"), [("timeout", "30", "30s"), ("memory", "512", "512MB"), ("output", "1e300", "512MB")]
)
def test_a_limit_with_no_unit_is_refused_with_one_to_write(key: str, value: str, example: str) -> None:
    # Issue 35: "timeout: 30" was taken silently (seconds), and "memory: 512" as 512 bytes.
    problem = only_problem(f"sandbox:\n  limits:\n    {key}: {value}\n")
    assert (problem.code, problem.key, problem.line) == (INVALID_OPTION, f"sandbox.limits.{key}", 3)
    assert (
        problem.message == f"{value if value != '1e300' else '1e+300'} has no unit; write it with one, like {example}"
    )


@pytest.mark.parametrize(
    ("key", "value", "maximum"),
    [
        ("sandbox.limits.timeout", "597h", "24h"),
        ("sandbox.limits.timeout", "99999999999h", "24h"),
        ("sandbox.limits.timeout", "86401s", "24h"),
        ("sandbox.limits.memory", "2TB", "1TB"),
        ("sandbox.limits.output", "2GB", "1GB"),
        ("sandbox.limits.files", "65GB", "64GB"),
        ("sandbox.limits.max-cost", "$1000001", "$1,000,000"),
        ("sandbox.price", "1e300", "$1,000,000"),
        ("permissions.disk.temp.max", "1025GB", "1TB"),
    ],
)
def test_a_limit_past_its_maximum_is_refused_with_the_key_and_line(key: str, value: str, maximum: str) -> None:
    *sections, last = key.split(".")
    text = "".join(f"{'  ' * depth}{section}:\n" for depth, section in enumerate(sections))
    text += f"{'  ' * len(sections)}{last}: {value}\n"
    problem = only_problem(text)
    assert (problem.code, problem.key, problem.line) == (INVALID_OPTION, key, len(sections) + 1)
    assert "too large: " in problem.message and f"at most {maximum}" in problem.message


def test_every_limit_at_its_maximum_is_accepted() -> None:
    config = load_config_text(
        "sandbox:\n  limits: {timeout: 24h, memory: 1TB, output: 1GB, files: 64GB, max-cost: $1000000}\n"
        "permissions: {disk: {temp: {max: 1TB}}}\n"
    )
    assert config.sandbox.limits == Limits(
        timeout=MAX_TIMEOUT, memory=MAX_MEMORY, output=MAX_OUTPUT, files=MAX_FILES, max_cost=Decimal(1_000_000)
    )
    assert config.permissions.disk.temp_max == MAX_DISK


def test_a_huge_string_value_is_cut_short_in_the_message() -> None:
    problem = only_problem("sandbox:\n  limits:\n    timeout: " + "x" * 100_000 + "\n")
    assert len(problem.message) < 300


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: Limits(timeout=1e300), "sandbox.limits.timeout"),
        (lambda: Limits(timeout=float("nan")), "sandbox.limits.timeout"),
        (lambda: Limits(timeout=0), "sandbox.limits.timeout"),
        (lambda: Limits(memory=2 * MAX_MEMORY), "sandbox.limits.memory"),
        (lambda: Limits(memory=1.5), "sandbox.limits.memory"),  # type: ignore[arg-type]
        (lambda: Limits(output="1MB"), "sandbox.limits.output"),  # type: ignore[arg-type]
        (lambda: Limits(files=True), "sandbox.limits.files"),
        (lambda: Limits(max_cost=Decimal("1e9")), "sandbox.limits.max-cost"),
        # A signalling NaN raised decimal.InvalidOperation at the comparison, before any message.
        (lambda: Limits(timeout=Decimal("sNaN")), "sandbox.limits.timeout"),  # type: ignore[arg-type]
        (lambda: Limits(max_cost=Decimal("sNaN")), "sandbox.limits.max-cost"),
        (lambda: SandboxConfig(price=Decimal("NaN")), "sandbox.price"),
        (lambda: SandboxConfig(price=Decimal(-1)), "sandbox.price"),
        (lambda: DiskPermissions(temp_max=2 * MAX_DISK), "permissions.disk.temp.max"),
    ],
)
def test_a_limit_built_by_hand_past_its_bound_is_refused_too(build: Any, key: str) -> None:
    with pytest.raises(SandboxError) as caught:
        build()
    assert caught.value.code == INVALID_OPTION and caught.value.message.startswith(f"{key}: ")


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    big = tmp_path / "main.yaml"
    with big.open("wb") as file:
        file.truncate(1024**3)  # 1GB of NUL bytes, sparse: no disk used
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as caught:
            load_config(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    [problem] = caught.value.problems
    assert problem.code == INVALID_OPTION and "may be at most" in problem.message
    assert peak < 10 * MB


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('sandbox:\n  driver: "\\e[31mred"\n', '"\\x1b[31mred" is not a driver id'),
        ('sandbox:\n  driver: "a\\nmain.yaml:1:1: MAIN-SANDBOX-0000 forged"\n', '"a\\x0amain.yaml:1:1'),
        ('sandbox:\n  secrets: ["\\ud800"]\n', '"\\ud800" is not a secret name'),
        ('sandbox:\n  "k\\e[2J": 1\n', "sandbox.k\\x1b[2J"),
    ],
    ids=["escape-sequence", "newline", "lone-surrogate", "in-a-key"],
)
def test_values_quoted_back_in_a_problem_are_escaped(text: str, shown: str) -> None:
    [problem] = load_problems(text)
    assert shown in f"{problem.key}: {problem.message}"
    assert (problem.key + problem.message).isprintable()


def load_problems(text: str) -> tuple[ConfigProblem, ...]:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text)
    return caught.value.problems


def test_core_schema_tags_are_read() -> None:
    config = load_config_text(
        "sandbox:\n  driver: !!str e2b\n  limits: !!map {timeout: !!str 5s}\n  network: !!seq []\n"
    )
    assert (config.sandbox.driver, config.sandbox.limits.timeout, config.sandbox.network) == ("e2b", 5.0, ())
