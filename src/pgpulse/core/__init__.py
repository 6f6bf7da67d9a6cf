"""The core layer: pure values and rules — schedules and cron, fire planning and limits,
sharding and routing, job definitions and their validation, access, the egress rule.

No I/O and no clock reads. May import the standard library and ``pgpulse.core`` only
(import-linter contracts in pyproject.toml; ``./scripts/check``).
"""
