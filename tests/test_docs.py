"""The docs hold together: the README stays a front door a user reads, and no link in the docs leads nowhere.

Each distribution's README is for its users (issues 25 and 35): at most 15 KB (binary, as the project's sizes are),
with the internals in ``docs/internals.md``, the detail in the guides under ``docs/`` and every speed goal, figure
and fuzz command in ``benchmarks/README.md``, out of the user's path. Every relative link in those files must name a
file or folder of the repository, and a ``#fragment`` a heading of the Markdown file it points to, as GitHub makes
anchors from headings: a guide moved or a heading renamed breaks a link here, not for the reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 15 * 1024
# Every distribution's README: the root one and each folder with a pyproject.toml.
DISTRIBUTION_READMES = sorted(
    [ROOT / "README.md", *(p.parent / "README.md" for p in ROOT.glob("*/pyproject.toml"))]
    + [p.parent / "README.md" for p in ROOT.glob("plugins/*/pyproject.toml") if (p.parent / "README.md").exists()]
)
# The pages a user reads (the internals and the benchmarks log are for those who change the code).
USER_PAGES = sorted(
    [*DISTRIBUTION_READMES, *(p for p in (ROOT / "docs").glob("*.md") if p.name not in ("internals.md",))]
)
DOCS = sorted({*USER_PAGES, ROOT / "benchmarks" / "README.md", ROOT / "docs" / "internals.md"})

# [text](target) outside code; an image's ![alt](target) too. Fenced blocks and inline code are removed first.
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)


def _prose(text: str) -> str:
    return INLINE_CODE.sub("", FENCE.sub("", text))


def anchors(markdown: str) -> set[str]:
    """The fragment GitHub gives each heading: lowercased, punctuation dropped, spaces to hyphens, repeats -1, -2."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", markdown)):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(doc: Path) -> list[str]:
    """The links of ``doc`` that point into the repository (not a URL, not mail)."""
    return [t for t in LINK.findall(_prose(doc.read_text(encoding="utf-8"))) if not re.match(r"[a-z]+:", t)]


def broken_links(doc: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of ``doc`` whose file is missing (or outside ``root``) or whose fragment is no heading."""
    broken = []
    for target in relative_links(doc):
        path, _, fragment = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists() or not file.is_relative_to(root):
            broken.append(f"{target}: no such file in the repository")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{fragment} in {file.relative_to(root)}")
    return broken


@pytest.mark.parametrize("readme", DISTRIBUTION_READMES, ids=lambda d: str(d.relative_to(ROOT)))
def test_each_distributions_readme_is_at_most_15_kb(readme: Path) -> None:
    size = len(readme.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"{readme.relative_to(ROOT)} is {size:,} bytes (at most {README_MAX_BYTES:,}): "
        "move internals to docs/internals.md"
    )


@pytest.mark.parametrize("doc", USER_PAGES, ids=lambda d: str(d.relative_to(ROOT)))
def test_no_speed_goal_fuzz_command_or_benchmark_run_is_on_the_users_path(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    found = re.findall(r"python benchmarks/\w+\.py[^`\n]*|\(goal [^)]*\)|goal of [0-9.]+ ?m?s", text)
    assert found == [], f"{doc.relative_to(ROOT)}: {found} belong in benchmarks/README.md"


def test_the_readme_shows_the_chart_after_the_packages_it_needs_and_lists_access_0001() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.index("\n## Packages in the box\n") < readme.index("plt.bar(")
    assert "'value': 3}" in readme and "'value': 3.0" not in readme
    table = readme[readme.index("\n## Error codes\n") :]
    assert "| `MAIN-ACCESS-0001` | 403 |" in table


def test_every_yaml_in_the_egress_guide_that_gives_hosts_also_allows_them() -> None:
    # A host a run is given must be in sandbox.network and network.allow: an example with only the first fails.
    from ruamel.yaml import YAML

    text = (ROOT / "docs" / "egress.md").read_text(encoding="utf-8")
    blocks = [YAML(typ="safe").load(b) for b in re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]
    giving = [b for b in blocks if isinstance(b, dict) and (b.get("sandbox") or {}).get("network")]
    assert giving
    for block in giving:
        assert set(block["sandbox"]["network"]) <= set((block.get("network") or {}).get("allow") or []), block


def test_the_two_commands_come_first_and_ci_runs_the_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.findall(r"^## (.+)$", readme, re.MULTILINE)[0] == "Two commands"
    block = FENCE.search(readme[readme.index("\n## Two commands\n") :])
    assert block is not None
    install, test = [line for line in block.group(0).splitlines()[1:-1] if line and not line.startswith("#")]
    assert "mainsdk sandbox run" in install
    # .ci/run is the README's test command on a fresh clone: the same line, word for word (pip may be quiet there).
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert [w for w in test.split() if w != "-q"] in [[w for w in line.split() if w != "-q"] for line in ci_lines]


def test_the_guides_the_readme_sends_users_to_exist() -> None:
    for name in ("driver-authors.md", "internals.md"):
        assert (ROOT / "docs" / name).is_file(), name
    assert (ROOT / "benchmarks" / "README.md").is_file()


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(doc: Path) -> None:
    assert broken_links(doc) == []


def test_the_readme_links_to_its_guides() -> None:
    targets = {link.partition("#")[0] for link in relative_links(ROOT / "README.md")}
    assert {"docs/running-code.md", "docs/driver-authors.md", "docs/internals.md", "benchmarks/README.md"} <= targets


def test_a_broken_link_or_fragment_is_found(tmp_path: Path) -> None:
    # Without this, a checker that finds nothing would pass every doc.
    (tmp_path / "guide.md").write_text("# A guide\n\n## Two words\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](guide.md#two-words) [gone](missing.md) [bad](guide.md#three-words) [self](#top) "
        "[web](https://example.com/x.md) `[code](nowhere.md)`\n\n```\n[fenced](nowhere.md)\n```\n# Top\n"
    )
    assert broken_links(doc, root=tmp_path) == [
        "missing.md: no such file in the repository",
        "guide.md#three-words: no heading #three-words in guide.md",
    ]
    assert anchors("# A `b.c` title: x\n## Same\n## Same\n") == {"a-bc-title-x", "same", "same-1"}
