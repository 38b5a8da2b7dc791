"""``RolloutExchanger``, kept importable from its old place: it lives in ``middleware.exchange.rollout``."""
from .exchange.rollout import EV_EVAL, EV_ROLLOUT, EV_WEIGHTS, RolloutExchanger

__all__ = ['RolloutExchanger', 'EV_WEIGHTS', 'EV_ROLLOUT', 'EV_EVAL']
