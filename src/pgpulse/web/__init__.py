"""Pulse's web edge: the JSON API (with OpenAPI), the dashboard and Prometheus metrics.

``create_app(store, settings)`` builds the ASGI app; ``pgpulse serve`` runs it, and
``pgpulse node run --metrics ADDR`` serves a node's metrics. The edge holds no scheduling logic:
every write goes through :class:`pgpulse.store.Store`.
"""

from pgpulse.web.app import create_app, create_metrics_app
from pgpulse.web.policy import HttpAllowList, WebSettings

__all__ = ["HttpAllowList", "WebSettings", "create_app", "create_metrics_app"]
