"""Fault injection with a history checker, Jepsen-style (``pgpulse chaos``).

Real node processes run a workload against a PostgreSQL they reach through per-node TCP proxies
the harness controls; the harness kills, pauses, partitions and restarts things on a seeded
schedule, every handler records what it did in the database (and in its node's journal file), and
a pure checker turns those records into a verdict table.

* :mod:`~pgpulse_tools.chaos.server` — the harness's own PostgreSQL on TCP (restartable), or a DSN;
* :mod:`~pgpulse_tools.chaos.postgres` — one PostgreSQL server as the harness's own child process;
* :mod:`~pgpulse_tools.chaos.replication` — a primary and a streaming standby (``--cluster``):
  failover, switchover, rebuild;
* :mod:`~pgpulse_tools.chaos.patroni` — etcd and two Patroni members (``--cluster --patroni``);
* :mod:`~pgpulse_tools.chaos.proxy` — one TCP proxy per node: cut (stall or drop), delay, heal;
* :mod:`~pgpulse_tools.chaos.workload` — the jobs to load and the App whose handlers record history;
* :mod:`~pgpulse_tools.chaos.cluster` — the node processes (start, SIGKILL, SIGSTOP, SIGTERM);
* :mod:`~pgpulse_tools.chaos.faults` — the seeded fault plan (pure) and the injector;
* :mod:`~pgpulse_tools.chaos.history` — the recorded rows as value objects (JSON dump and load);
* :mod:`~pgpulse_tools.chaos.journal` — each node's execution journal, outside the database;
* :mod:`~pgpulse_tools.chaos.effects` — duplicated, re-executed, repeated and overlapping effects;
* :mod:`~pgpulse_tools.chaos.tokens` — fencing tokens and run ids handed out twice;
* :mod:`~pgpulse_tools.chaos.checker` — the verdict, a pure function of the history;
* :mod:`~pgpulse_tools.chaos.timing` — its lag and recovery figures;
* :mod:`~pgpulse_tools.chaos.runner` — the orchestration behind ``pgpulse chaos``.
"""
