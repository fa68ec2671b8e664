"""The CP-SAT planner: search space, candidate tables, model, solve, explanation, enumeration."""

from paraplan.solver.solve import (
    NoFitError,
    NoLayoutError,
    Outcome,
    OutOfTime,
    Solution,
    SolverOptions,
    solve_instance,
)
from paraplan.solver.space import Fixed, Options, layouts

__all__ = [
    "Fixed",
    "NoFitError",
    "NoLayoutError",
    "Options",
    "Outcome",
    "OutOfTime",
    "Solution",
    "SolverOptions",
    "layouts",
    "solve_instance",
]
