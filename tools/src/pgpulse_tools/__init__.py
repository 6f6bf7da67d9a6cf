"""Pulse's tools, kept apart from the runtime: the demo (:mod:`pgpulse_tools.demo`), the
fault-injection harness (:mod:`pgpulse_tools.chaos`) and the benchmark
(:mod:`pgpulse_tools.bench`).

They are reached as ``pgpulse demo``, ``pgpulse chaos`` and ``pgpulse bench``: the ``pgpulse``
command loads :mod:`pgpulse_tools.commands` only when one of them is invoked, so neither the
library nor a node imports any of this, and a production install need not carry it.
"""
