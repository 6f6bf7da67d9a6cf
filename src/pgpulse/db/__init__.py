"""The database layer: connections, migrations, and the repositories (jobs, runs, claims,
nodes, calendars, tokens) as intent-named methods over the statements of
:mod:`pgpulse.sql`.

May import :mod:`pgpulse.core` and :mod:`pgpulse.sql`; never the node, the alerts or an
edge (import-linter contracts in pyproject.toml).
"""
