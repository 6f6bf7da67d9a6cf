"""Fault injection with a history checker, Jepsen-style (``pgpulse chaos``).

Real node processes run a workload against a PostgreSQL they reach through per-node TCP proxies
the harness controls; the harness kills, pauses, partitions and restarts things on a seeded
schedule, every handler records what it did in the database, and a pure checker turns those rows
into a verdict table.

* :mod:`~pgpulse.chaos.server` — the harness's own PostgreSQL on TCP (restartable), or a DSN;
* :mod:`~pgpulse.chaos.proxy` — one TCP proxy per node: cut (stall or drop), delay, heal;
* :mod:`~pgpulse.chaos.workload` — the jobs to load and the App whose handlers record history;
* :mod:`~pgpulse.chaos.cluster` — the node processes (start, SIGKILL, SIGSTOP, SIGTERM);
* :mod:`~pgpulse.chaos.faults` — the seeded fault plan (pure) and the injector;
* :mod:`~pgpulse.chaos.history` — the recorded rows as value objects (JSON dump and load);
* :mod:`~pgpulse.chaos.checker` — the verdict, a pure function of the history;
* :mod:`~pgpulse.chaos.timing` — its lag and recovery figures;
* :mod:`~pgpulse.chaos.runner` — the orchestration behind ``pgpulse chaos``.
"""
