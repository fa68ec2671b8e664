"""Every document the code cites is in the repository, with the section it cites (issue 12 item 5).

Scans the repository's *.py, *.md, *.yaml, *.yml and *.toml files for:
- paths under ``shared/`` (a folder outside the repository, not shipped): always an error;
- ``docs/NAME.md`` and the bare project documents (``DESIGN.md``, ``STYLE.md``, ``frameworks.md``,
  ...): the file must exist under docs/;
- section citations next to a document (``docs/frameworks.md §2.3``, ``STYLE.md Sec. 6``,
  ``frameworks.md section 7``, ``§3.2-3.3``), and ``§N`` alone, which cites the document last named
  in the same file (or the file itself inside docs/): the section must be a numbered heading there;
- the reference data files by name (``hardware.json``, ``models.json``,
  ``published_runs_calibration.csv``): a file of that name must exist in the repository.
URLs are skipped: ``https://.../docs/x.md`` names a file in another project.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml"}
SKIP_DIRS = {
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    "node_modules",
    ".venv",
    "venv",
    "build",
    "dist",
    "tmp",
}
BARE_DOCS = {
    "DESIGN.md",
    "STYLE.md",
    "frameworks.md",
    "hardware.md",
    "published_runs.md",
    "models.md",
    "peers.md",
}  # the project's documents, cited without the docs/ prefix
DATA_FILES = ("hardware.json", "models.json", "published_runs_calibration.csv")

URL = re.compile(r"\b(?:https?://|www\.)\S+")
SHARED = re.compile(r"(?<![\w-])(?:\.\./)*shared/[\w./-]*")
SECTION = r"(?:§\s?|Sec\.\s?|[Ss]ection\s)(\d+(?:\.\d+)*)(?:\s?-\s?(\d+(?:\.\d+)*))?"
DOC = re.compile(r"(?<![\w.-])(?:(?:\.\./)*docs/)?([A-Za-z][\w-]*\.md)\b(?:\s?" + SECTION + ")?")
LONE_SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)(?:\s?-\s?(\d+(?:\.\d+)*))?")
DATA = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in DATA_FILES) + r")\b")
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def _skipped(rel: Path) -> bool:
    """Folders that are not the project's: caches, builds and any hidden folder or virtual
    environment (CI builds .venv-megatron-lm inside the clone)."""
    return any(
        p in SKIP_DIRS or p.startswith(".") or p.endswith(".egg-info") or p.startswith("venv")
        for p in rel.parts[:-1]
    )


def _files() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*")
        if path.suffix in SUFFIXES and path.is_file() and not _skipped(path.relative_to(ROOT))
    )


@cache
def _sections(doc: Path) -> frozenset[str]:
    """Numbered headings of a Markdown file ("## 2." and "### 2.3 ..." give "2" and "2.3")."""
    return frozenset(HEADING.findall(doc.read_text(encoding="utf-8")))


@cache
def _data_names() -> frozenset[str]:
    return frozenset(
        p.name for p in ROOT.rglob("*") if p.name in DATA_FILES and not _skipped(p.relative_to(ROOT))
    )


def _doc_path(match: re.Match[str]) -> Path | None:
    """The docs/ file a reference names, or None when it is not a reference to a project document."""
    name, text = match.group(1), match.group(0)
    if "docs/" in text or name in BARE_DOCS or match.group(2):
        return DOCS / name
    return None


def _check_section(doc: Path, first: str, last: str | None, where: str, problems: list[str]) -> None:
    for number in (first, last):
        if number and doc.exists() and number not in _sections(doc):
            problems.append(
                f"{where}: {doc.relative_to(ROOT)} has no section {number} "
                f"(it has {', '.join(sorted(_sections(doc))) or 'none'})"
            )


def reference_problems(path: Path, text: str) -> list[str]:
    """Broken references in one file's text, each as 'file:line: what is wrong'."""
    problems: list[str] = []
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    current = path if path.parent == DOCS and path.suffix == ".md" else None
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{rel}:{number}"
        line = URL.sub(" ", raw)
        for m in SHARED.finditer(line):
            problems.append(
                f"{where}: {m.group(0)!r} is outside the repository (not shipped); cite "
                "the copy in the repository or the primary source"
            )
        line = SHARED.sub(" ", line)
        spans = []
        for m in DOC.finditer(line):
            doc = _doc_path(m)
            if doc is None:
                continue
            current = doc
            spans.append(m.span())
            if not doc.exists():
                problems.append(
                    f"{where}: {m.group(0)!r} names {doc.relative_to(ROOT)}, which does not exist"
                )
                continue
            _check_section(doc, m.group(2), m.group(3), where, problems)
        for m in LONE_SECTION.finditer(line):
            if any(a <= m.start() < b for a, b in spans) or current is None:
                continue
            _check_section(current, m.group(1), m.group(2), where, problems)
        for m in DATA.finditer(line):
            if m.group(1) not in _data_names():
                problems.append(f"{where}: {m.group(1)} is not in the repository")
    return problems


def test_every_doc_reference_resolves_inside_the_repository() -> None:
    problems = [
        p
        for f in _files()
        if f != Path(__file__).resolve()  # its examples are broken on purpose
        for p in reference_problems(f, f.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not problems, "broken document references:\n" + "\n".join(problems)


def test_the_cited_documents_exist_with_numbered_sections() -> None:
    for name in ("DESIGN.md", "STYLE.md", "frameworks.md", "hardware.md", "published_runs.md"):
        assert _sections(DOCS / name), f"docs/{name} has no numbered sections"
    # the sections the code cites by number today
    assert {"1", "2.2", "2.3", "3", "3.2", "3.3", "3.5", "4.1", "5", "6", "7"} <= _sections(
        DOCS / "frameworks.md"
    )
    assert "6" in _sections(DOCS / "STYLE.md")
    assert {"3.4", "3.5", "4"} <= _sections(DOCS / "published_runs.md")


def test_the_checker_catches_each_kind_of_broken_reference() -> None:
    fake = ROOT / "paraplan" / "fake.py"
    cases = {
        "# see ../shared/docs/DESIGN.md": "outside the repository",
        "# as in shared/data/hardware.json": "outside the repository",
        "# docs/nowhere.md": "does not exist",
        "# (docs/frameworks.md §99)": "no section 99",
        "# (frameworks.md Sec. 2.9)": "no section 2.9",
        "# frameworks.md section 42": "no section 42",
        "# STYLE.md Sec. 60": "no section 60",
        "# docs/frameworks.md §2.3-2.99": "no section 2.99",
        "# peers.md": "does not exist",
        "# the catalog (nodes.json)": "",
    }
    for text, expected in cases.items():
        problems = reference_problems(fake, text)
        assert (expected in " ".join(problems)) if expected else not problems, (text, problems)
    # a lone § cites the document named last in the same file
    assert reference_problems(fake, '"""docs/frameworks.md §3."""\n# rule (§3.9)\n')
    assert not reference_problems(fake, '"""docs/frameworks.md §3."""\n# rule (§3.2)\n')
    # URLs name other projects' files
    assert not reference_problems(fake, "# https://github.com/x/y/blob/main/docs/performance.md")
    # papers' sections are not document sections
    assert not reference_problems(fake, "# Narayanan et al. 2021, arXiv:2104.04473 Sec. 2.2.2")
