"""Constant-time comparison of secret text (signatures, anti-forgery values).

``hmac.compare_digest`` raises ``TypeError`` for a ``str`` holding a non-ASCII character, and
the text compared comes from outside (a form field, a query parameter, a request header): every
comparison goes through :func:`same_secret`, which compares UTF-8 bytes.
"""

from __future__ import annotations

import hmac

__all__ = ["same_secret"]


def same_secret(given: str, expected: str) -> bool:
    """Whether ``given`` equals ``expected``, in time that does not depend on where they differ.

    Args:
        given: text from outside, any characters (a lone surrogate included).
        expected: the value computed here.

    Returns:
        ``True`` when the two are the same text; never raises.
    """
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )
