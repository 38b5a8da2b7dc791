"""Contexts shared by the middleware of one pipeline step: ``Context``, ``OnlineRLContext``,
``OfflineRLContext``."""
from .context import Context, OfflineRLContext, OnlineRLContext

__all__ = ["Context", "OnlineRLContext", "OfflineRLContext"]
