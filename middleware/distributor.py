"""The distributed middleware, kept importable from its old place: see ``middleware.exchange``."""
from .exchange import ContextExchanger, ModelExchanger, PeriodicalModelExchanger
from .exchange.shared import pack_rows as _pack_rows, unpack_rows as _unpack_rows

__all__ = ['ContextExchanger', 'ModelExchanger', 'PeriodicalModelExchanger', '_pack_rows', '_unpack_rows']
