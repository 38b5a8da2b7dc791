"""PPO's synchronous on-policy exchange: the example as 3 processes (learner, 2 collectors; the
4-process run with an evaluator is the README's command), and
the refusal of rollouts made with stale weights."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from test_distributed_pipeline import _free_port_base

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


@pytest.mark.multiprocess
@pytest.mark.slow
def test_ppo_example_as_three_processes(tmp_path):
    env = dict(os.environ)
    env['PYTHONPATH'] = ROOT + os.pathsep + env.get('PYTHONPATH', '')
    env.pop('RLPIPE_KEY', None)
    cmd = [sys.executable, '-m', 'pipeline.run.cli', 'run', '--package', ROOT, '--main',
           'examples.ppo_cartpole.main', '--parallel-workers', '3', '--ports', str(_free_port_base(3)),
           '--roles', 'learner:collector:collector',
           '--startup-interval', '0', '--stop-grace', '5', '-v', '--',  # default heartbeats: a busy CI machine stalls
           '--max-env-step', '3072', '--no-stop', '--exp-name', str(tmp_path / 'exp'),
           '--set', 'policy.learn.n_epochs=2']
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    try:
        out, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=10)
        raise AssertionError('the 3-process PPO run did not finish in 150 s:\n' + out[-4000:])
    assert proc.returncode == 0, out[-4000:]
    learner = re.search(r"RolloutExchanger \(node 0, learner\) at finish: (\{.*\})", out)
    assert learner, out[-4000:]
    stats = eval(learner.group(1), {})  # a dict of ints printed by the learner's own log line
    # 2 collectors x 8 envs x 32 steps = 512 env steps per rollout set: 6 sets reach 3072
    assert stats['rollouts_trained'] >= 12 and stats['rollouts_trained'] % 2 == 0, stats
    assert stats['weights_sent'] >= 7 and stats['partial_sets'] == 0, stats
    done = re.findall(r'after (\d+) env steps, (\d+) train iters', out)
    assert done and all(int(s) >= 3072 for s, _ in done), done
    # every node prints its end line tagged with its id and roles, so the merged output says whose it is
    ends = re.findall(r'^(.*)done: last mean eval return', out, re.M)
    assert sorted(ends) == ['[node 0 learner] ', '[node 1 collector] ', '[node 2 collector] '], ends


def test_stale_rollouts_are_refused_and_counted():
    from middleware.exchange.shared import Waiter
    from middleware.exchange.rollout import RolloutExchanger

    ex = object.__new__(RolloutExchanger)  # the listeners alone, without a router
    ex._w = Waiter()
    ex.stats = {'rollouts_received': 0, 'stale_refused': 0}
    ex._rollouts, ex._roles, ex.version = {}, {}, 3
    roll = {'obs': np.zeros((2, 1, 4), np.float32)}
    ex._on_rollout({'node': 1, 'version': 2, 'rollout': roll})   # made with older weights
    ex._on_rollout({'node': 1, 'version': 3, 'rollout': roll})
    ex._on_rollout({'node': 1, 'version': 3, 'rollout': roll})   # a second one for the same version
    ex._on_rollout({'node': 2, 'version': 4, 'rollout': roll})   # a version that does not exist yet
    assert list(ex._rollouts) == [1]
    assert ex.stats == {'rollouts_received': 4, 'stale_refused': 3}


def test_a_rollout_with_no_live_learner_is_kept_the_newest_only_and_dropped_once_outdated(caplog):
    """The collector's step alone, without a router (no learner alive): it keeps the newest rollout only (the
    learner takes one per collector and version), counts and logs what it drops, and drops the kept one once
    newer weights show the learner moved past its version. Delivery on the learner's return: test_faults.py."""
    import logging

    import torch

    from middleware.exchange.shared import Newest, Waiter
    from middleware.exchange.rollout import RolloutExchanger
    from contexts import OnlineRLContext

    ex = object.__new__(RolloutExchanger)
    ex._w = Waiter()
    ex._evals = Newest(ex._w)
    ex.stats = {'rollouts_sent': 0, 'wait_timeouts': 0, 'weights_loaded': 0, 'rollouts_kept': 0, 'kept_sent': 0,
                'kept_dropped': 0, 'unsent_at_finish': 0}
    ex._roles, ex._weights, ex._kept, ex.version, ex.node_id, ex.wait_timeout = {}, None, None, 2, 1, 0.01
    ex.model = torch.nn.Linear(3, 2)
    from pipeline import task

    def one_step(ctx, uid):
        step = ex._collector_step(ctx)
        next(step)                                  # forward part: wait for newer weights (bounded)
        ctx.rollout = {'uid': np.full((2, 1), uid)}
        ctx.env_step += 2
        with pytest.raises(StopIteration):
            next(step)                              # backward part: no learner is alive to send it to

    ctx = OnlineRLContext()
    with task.start(), caplog.at_level(logging.WARNING):   # a fresh task: not finished
        one_step(ctx, 7)
        assert ex._kept['rollout']['uid'][0, 0] == 7 and ex._kept['version'] == 2
        one_step(ctx, 8)                            # a newer rollout replaces the kept one
        assert ex._kept['rollout']['uid'][0, 0] == 8
        assert ex.stats['rollouts_kept'] == 2 and ex.stats['kept_dropped'] == 1 and ex.stats['rollouts_sent'] == 0
        ex._weights = {'version': 3, 'state': ex.model.state_dict(), 'train_iter': 5, 'env_step': 0,
                       'env_episode': 0}
        step = ex._collector_step(ctx)
        next(step)                                  # loads version 3: the kept rollout of version 2 is outdated
        assert ex._kept is None and ex.stats['kept_dropped'] == 2 and ex.version == 3
    msgs = [r.getMessage() for r in caplog.records]
    assert any('no learner is alive; keeping the rollout of weights version 2' in m for m in msgs), msgs
    assert any('a newer rollout replaces it' in m for m in msgs), msgs
    assert any('moved on to weights version 3' in m for m in msgs), msgs
