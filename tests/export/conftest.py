"""Export tests share one process per file under pytest-xdist (--dist loadfile).

Oracle tests build torch.distributed's fake world in-process; a default process group left
behind would make the next module's ``init_process_group`` (or a forked child's) fail with
"initialize the default process group twice". Each module leaves the process as it found it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def _no_process_group_left_behind() -> Iterator[None]:
    yield
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
