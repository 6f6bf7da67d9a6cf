"""The objects every request of the web app shares, built once per app."""

from __future__ import annotations

from dataclasses import dataclass

from pgpulse.core.policy import WebSettings
from pgpulse.db.store import Store
from pgpulse.db.tokens import TokenStore
from pgpulse.web.service import JobService


@dataclass(frozen=True, slots=True)
class WebContext:
    """Store, settings, tokens and the job service of one web app (``app.state.pulse``)."""

    store: Store
    settings: WebSettings
    tokens: TokenStore
    service: JobService

    @classmethod
    def build(cls, store: Store, settings: WebSettings) -> WebContext:
        """Wire the context over ``store``."""
        return cls(store, settings, TokenStore(store.pool), JobService(store, settings))
