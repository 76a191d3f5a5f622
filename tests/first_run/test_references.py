"""Every document the code and the docs point at is in the repository: relative links in the
Markdown files resolve, and each ``docs/... §n`` citation in the source names an existing file and
one of its numbered sections."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"\b((?:docs/)[\w./-]+\.md) §(\d+(?:\.\d+)?)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _markdown() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _sections(doc: Path) -> set[str]:
    """The numbers of a document's numbered headings (``## 3. …``, ``### 1.6 …``)."""
    found = re.findall(r"^#{2,4} (\d+(?:\.\d+)?)\.? ", doc.read_text(encoding="utf-8"), re.MULTILINE)
    return set(found)


def test_relative_links_in_the_docs_resolve() -> None:
    broken: list[str] = []
    for doc in _markdown():
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def test_design_citations_in_the_code_point_at_sections_in_the_repository() -> None:
    cited = 0
    missing: list[str] = []
    for path in [*sorted((ROOT / "src").rglob("*.py")), ROOT / "pyproject.toml"]:
        text = path.read_text(encoding="utf-8")
        assert "DESIGN.md" not in text, f"{path.relative_to(ROOT)} cites a document outside the repository"
        for document, section in CITATION.findall(" ".join(text.split())):
            cited += 1
            target = ROOT / document
            if not target.exists() or section not in _sections(target):
                missing.append(f"{path.relative_to(ROOT)}: {document} §{section}")
    assert cited >= 20  # the formats cite the wire reference throughout
    assert not missing, missing
