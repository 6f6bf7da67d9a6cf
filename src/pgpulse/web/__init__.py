"""Pulse's web edge: the JSON API (with OpenAPI), the dashboard and Prometheus metrics.

``pgpulse.web.app.create_app(store, settings)`` builds the ASGI app; ``pgpulse serve`` runs it,
and ``pgpulse node run --metrics ADDR`` serves a node's metrics. The edge holds no scheduling
logic: every write goes through :class:`pgpulse.db.store.Store`.

This package imports nothing on its own: FastAPI and uvicorn load only with
:mod:`pgpulse.web.app` and :mod:`pgpulse.web.server`, so a command that serves nothing (``pgpulse
schedule next``, ``job list``) and a node without ``--http`` never import them.
"""
