"""A Celery app for the tests: its worker records every task it executes (task id, name, args,
kwargs and the ``pulse_*`` headers) as one JSON line in the file named by
``PULSE_TEST_CELERY_RECORD``; the broker is ``PULSE_TEST_CELERY_BROKER``.

With ``PULSE_TEST_KILL_AFTER_PUBLISH`` naming a file that does not exist yet, the first task
this process publishes (a Pulse node sending through ``--celery-app``) writes its task id there
and SIGKILLs the process: a node that dies after the broker took the message and before its run
was recorded, deterministically.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from celery import Celery, Task
from celery.signals import after_task_publish

app = Celery(
    "pulse_test",
    broker=os.environ.get("PULSE_TEST_CELERY_BROKER", "redis://127.0.0.1:6379/0"),
    set_as_current=False,
)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_default_queue=os.environ.get("PULSE_TEST_CELERY_QUEUE", "celery"),
)


@app.task(bind=True, name="pulse_test.record")  # type: ignore[untyped-decorator]
def record(self: Task, *args: Any, **kwargs: Any) -> None:
    """Append this execution to the record file."""
    request = self.request
    line = {
        "id": request.id,
        "task": self.name,
        "args": list(args),
        "kwargs": kwargs,
        "pulse_job": request.get("pulse_job"),
        "pulse_scheduled_for": request.get("pulse_scheduled_for"),
        "pulse_attempt": request.get("pulse_attempt"),
    }
    with open(os.environ["PULSE_TEST_CELERY_RECORD"], "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


@after_task_publish.connect  # type: ignore[untyped-decorator]
def _kill_after_publish(headers: dict[str, Any] | None = None, **_: Any) -> None:
    marker = os.environ.get("PULSE_TEST_KILL_AFTER_PUBLISH")
    if not marker or os.path.exists(marker) or headers is None:
        return
    with open(marker, "w", encoding="utf-8") as out:
        out.write(str(headers.get("id")))
    os.kill(os.getpid(), signal.SIGKILL)
