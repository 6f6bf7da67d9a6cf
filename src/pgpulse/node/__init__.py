"""The node layer: the claim loop, attempts and their handlers, heartbeat and membership,
the listener, and the services a node runs; :class:`~pgpulse.app.App` declares a
node's jobs.

May import :mod:`pgpulse.db` and :mod:`pgpulse.core`; never the alerts, the web or the
CLI (import-linter contracts in pyproject.toml), but for the one exception named there:
:class:`~pgpulse.app.App`, which wires the alerts into the node it builds. A node's side
loops are services (:mod:`pgpulse.node.services`); it tells the layers above what it did
through one observer (:mod:`pgpulse.node.observer`).
"""
