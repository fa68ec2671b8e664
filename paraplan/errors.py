"""paraplan's exceptions; the CLI maps each to an exit code (STYLE.md Sec. 6)."""

from __future__ import annotations

__all__ = ["ParaplanError", "ConfigError", "InfeasibleError", "SolveTimeout", "ExportError"]


class ParaplanError(Exception):
    """Base of every error paraplan raises on purpose."""

    exit_code = 1


class ConfigError(ParaplanError, ValueError):
    """The scenario breaks a rule; the message names the field, the value and the rule."""

    exit_code = 1


class InfeasibleError(ParaplanError):
    """No plan in the search space fits; ``families`` names the binding constraint families."""

    exit_code = 2

    def __init__(self, message: str, families: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.families = families


class SolveTimeout(ParaplanError):
    """The time limit expired before any feasible plan was found."""

    exit_code = 3


class ExportError(ParaplanError):
    """The target framework cannot express the plan; the message names the nearest one it can."""

    exit_code = 4
