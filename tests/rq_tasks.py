"""The function the RQ test's worker runs: it appends its job id, arguments and the ``pulse_*``
meta the handler set to the file named by ``PULSE_TEST_RQ_RECORD``, one JSON line each."""

from __future__ import annotations

import json
import os
from typing import Any

from rq import get_current_job


def record(*args: Any, **kwargs: Any) -> None:
    """Record this execution."""
    job = get_current_job()
    assert job is not None
    line = {"id": job.id, "args": list(args), "kwargs": kwargs, "meta": job.meta}
    with open(os.environ["PULSE_TEST_RQ_RECORD"], "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")
