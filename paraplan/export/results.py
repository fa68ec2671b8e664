"""Reading a result file back (``paraplan export RESULT.json``, ``paraplan evaluate RESULT.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from paraplan.errors import ConfigError
from paraplan.result import Result

ERROR_PREVIEW = 5  # validation errors quoted when a result file is rejected

__all__ = ["load_result"]


def load_result(path: str | Path) -> Result:
    """A Result from a ``paraplan plan --json`` / ``paraplan evaluate --json`` file (a serving
    result, ``kind: serving``, comes back as its JSON dict, which the exporters read).

    ConfigError names the file and what is wrong with it.
    """
    p = Path(path)
    try:
        data: Any = json.loads(p.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read result file {str(p)!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{p}: not a JSON result ({e.msg} at line {e.lineno}); write one with "
            "`paraplan plan SCENARIO --json > RESULT.json`"
        ) from None
    if isinstance(data, dict) and data.get("kind") == "serving":
        return data  # type: ignore[return-value]  # a serving result: its JSON, for export_serving
    try:
        return Result.model_validate(data)
    except ValidationError as e:
        problems = [
            f"{'.'.join(str(x) for x in err['loc']) or 'result'}: {err['msg']}"
            for err in e.errors()[:ERROR_PREVIEW]
        ]
        raise ConfigError(
            f"{p}: not a paraplan result ({len(e.errors())} problems: {'; '.join(problems)}); "
            "write one with `paraplan plan SCENARIO --json > RESULT.json`"
        ) from None
