"""Learners: exact epoch/minibatch updates of torch modules, with mergeable metrics.

``from pipeline.learner import Learner, LearnerGroup, TrainingData, MetricsLogger, Stats``

Only torch is imported here (treetensor and Ray are imported lazily when used).

A DQN-style learner (target network outside ``modules``, synced in a hook)::

    class DQNLearner(Learner):
        def __init__(self, model, *, discount=0.97, target_update_freq=100, **kw):
            super().__init__(model, **kw)              # lr=, optimizer=, grad_clip=, lr_schedule=
            self.target = copy.deepcopy(model).requires_grad_(False)
            self.discount, self.freq = discount, target_update_freq

        def forward_train(self, module_id, batch):     # batch: dict of tensors or a treetensor tree
            return self.modules[module_id](batch["obs"])

        def compute_loss_for_module(self, module_id, batch, q):
            ...                                        # TD target with self.target under no_grad
            return {"total_loss": loss, "q_mean": q.mean().detach(), "priority": td.abs().detach()}

        def after_gradient_based_update(self, timesteps):
            # counts gradient steps including this call's (= train iterations with minibatch_size=None)
            if self.num_minibatch_updates_lifetime % self.freq == 0:
                self.target.load_state_dict(self.modules[self.DEFAULT_MODULE_ID].state_dict())

        def get_extra_state(self):
            return {"target": self.target.state_dict()}

        def set_extra_state(self, state):
            self.target.load_state_dict(state["target"])

    results = learner.update(batch, timesteps={"num_env_steps_sampled_lifetime": env_steps})
    loss = results["default_policy"]["total_loss"].peek()   # or MetricsLogger.peek_results(results)
    priorities = learner.last_outputs["default_policy"]["priority"]
"""

from .learner import Learner
from .learner_group import LearnerGroup, plan_shards
from .metrics import ALL_MODULES, MetricsLogger
from .stats import Stats
from .training_data import TrainingData

__all__ = ["Learner", "LearnerGroup", "TrainingData", "MetricsLogger", "Stats", "ALL_MODULES", "plan_shards"]
