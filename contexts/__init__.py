"""Contexts shared by the middleware of one pipeline step: ``Context``, ``OnlineRLContext``,
``OfflineRLContext`` (``RLContext``: either of them, for type hints)."""
from .context import Context, OfflineRLContext, OnlineRLContext, RLContext

__all__ = ["Context", "OnlineRLContext", "OfflineRLContext", "RLContext"]
