"""Learners: exact epoch/minibatch updates of torch modules, with mergeable metrics.

``from pipeline.learner import Learner, LearnerGroup, TrainingData, MetricsLogger, Stats``

Only torch is imported here (treetensor and Ray are imported lazily when used).
"""

from .learner import Learner
from .learner_group import LearnerGroup, plan_shards
from .metrics import ALL_MODULES, MetricsLogger
from .stats import Stats
from .training_data import TrainingData

__all__ = ["Learner", "LearnerGroup", "TrainingData", "MetricsLogger", "Stats", "ALL_MODULES", "plan_shards"]
