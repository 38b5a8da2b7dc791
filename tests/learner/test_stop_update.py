"""Learner.stop_update ends an update call early: the current minibatch takes no step, counters say so."""
import torch
from torch import nn

from pipeline.learner import Learner


class StopAt(Learner):
    def __init__(self, stop_at):
        super().__init__(nn.Linear(3, 1), lr=0.1)
        self.stop_at, self.seen = stop_at, 0

    def forward_train(self, module_id, batch):
        return self.modules[module_id](batch['x']).squeeze(-1)

    def compute_loss_for_module(self, module_id, batch, out):
        self.seen += 1
        if self.seen == self.stop_at:
            self.stop_update()
        return nn.functional.mse_loss(out, batch['y'])


def test_stop_update_skips_the_step_and_ends_the_call():
    batch = {'x': torch.randn(8, 3), 'y': torch.randn(8)}
    ln = StopAt(stop_at=3)
    res = ln.update(batch=batch, minibatch_size=2, num_epochs=4)
    assert ln.seen == 3  # minibatch 3 computed its loss, nothing after it
    assert res['__all_modules__']['num_minibatch_updates'].peek() == 2
    assert res['default_policy']['num_module_steps_trained'].peek() == 4
    assert ln.num_minibatch_updates_lifetime == 2 and ln.num_env_steps_trained_lifetime == 4
    w = ln.modules['default_policy'].weight.detach().clone()
    ln.stop_at = ln.seen + 1  # stops at the first minibatch of the next call: no step at all
    res = ln.update(batch=batch, minibatch_size=2, num_epochs=4)
    assert res['__all_modules__']['num_minibatch_updates'].peek() == 0
    torch.testing.assert_close(ln.modules['default_policy'].weight, w)
    ln.stop_at = -1  # the next call runs in full again
    res = ln.update(batch=batch, minibatch_size=2, num_epochs=4)
    assert res['__all_modules__']['num_minibatch_updates'].peek() == 16
