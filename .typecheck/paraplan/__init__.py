"""The package as mypy sees it (pyproject [tool.mypy]): setuptools maps paraplan.graph, .hardware,
.cost, .rules and .solver to top-level folders, which mypy cannot follow, so this folder holds a
symlink to each. This file stands in for paraplan/__init__.py so the front door stays unchecked."""
