"""The type checker sees the package as it installs (pyproject [tool.mypy]): setuptools maps each
lower layer (paraplan.graph -> graph/, ...) to a top-level folder, which mypy cannot follow, so
.typecheck/paraplan/ links each one under its paraplan.* name. A layer missing there, or linked to
the wrong folder, would leave its cross-module imports untyped (Any) and its findings unseen."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / ".typecheck" / "paraplan"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _top_level_layers() -> dict[str, str]:
    """paraplan.X -> folder for each subpackage installed from a top-level folder of its own."""
    dirs: dict[str, str] = PYPROJECT["tool"]["setuptools"]["package-dir"]
    return {
        name.removeprefix("paraplan."): folder
        for name, folder in dirs.items()
        if name.count(".") == 1 and "/" not in folder and folder != "paraplan"
    }


def test_every_top_level_layer_is_linked_to_its_folder() -> None:
    layers = _top_level_layers()
    assert set(layers) == {"graph", "hardware", "cost", "rules", "solver"}
    for name, folder in layers.items():
        link = TREE / name
        assert link.is_symlink(), f".typecheck/paraplan/{name} must link to {folder}/"
        assert link.resolve() == (ROOT / folder).resolve()


def test_mypy_checks_every_linked_layer_and_resolves_paraplan_through_the_tree() -> None:
    mypy = PYPROJECT["tool"]["mypy"]
    assert mypy["mypy_path"] == ".typecheck"
    assert sorted(mypy["files"]) == sorted(f".typecheck/paraplan/{n}" for n in _top_level_layers())
    assert mypy["strict"] is True
