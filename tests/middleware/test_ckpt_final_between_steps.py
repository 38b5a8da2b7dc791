"""A finish that arrives between two steps (as a remote ``__finish__`` does: the bus sets it from another
thread after the saver's backward part already looked) still leaves ``final.pth.tar`` behind."""
import os

import torch
from torch import nn

from contexts import OnlineRLContext
from middleware import CkptSaver
from pipeline import task
from pipeline.run import run_pipeline


class TinyPolicy:
    def __init__(self):
        self.model = nn.Linear(3, 2)

    def state_dict(self):
        return {'model': self.model.state_dict()}

    def load_state_dict(self, state):
        self.model.load_state_dict(state['model'])


def _finish_after_the_saver_looked(ctx):
    yield
    ctx.train_iter += 1
    if ctx.train_iter == 3:  # outermost backward part: runs after the saver's check, like a remote finish
        task.finish = True


def _run(tmp_path, roles):
    saver = CkptSaver(TinyPolicy(), str(tmp_path / 'run'))
    with task.start(ctx=OnlineRLContext(), roles=roles):
        task.use(_finish_after_the_saver_looked)
        task.use(saver)
        ctx, interrupted = run_pipeline(saver, max_step=10)
    return ctx, interrupted, tmp_path / 'run' / 'ckpt'


def test_a_finish_between_steps_still_writes_the_final_checkpoint(tmp_path):
    ctx, interrupted, d = _run(tmp_path, ['learner'])
    assert not interrupted and ctx.train_iter == 3
    assert os.listdir(d) == ['final.pth.tar']
    assert torch.load(d / 'final.pth.tar', weights_only=True)['counters']['train_iter'] == 3


def test_no_final_checkpoint_on_a_node_that_does_not_learn(tmp_path):
    _, _, d = _run(tmp_path, ['collector'])
    assert not d.exists() or 'final.pth.tar' not in os.listdir(d)
