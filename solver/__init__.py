"""The CP-SAT planner: search space, candidate tables, model, solve, explanation, enumeration."""

from paraplan.solver.distinct import DUPLICATE_REL, distinct_key, is_near_duplicate
from paraplan.solver.solve import (
    NoFitError,
    NoLayoutError,
    Outcome,
    OutOfTime,
    Solution,
    SolverOptions,
    solve_instance,
)
from paraplan.solver.space import Options, layouts

__all__ = [
    "DUPLICATE_REL",
    "NoFitError",
    "NoLayoutError",
    "Options",
    "Outcome",
    "OutOfTime",
    "Solution",
    "distinct_key",
    "is_near_duplicate",
    "SolverOptions",
    "layouts",
    "solve_instance",
]
