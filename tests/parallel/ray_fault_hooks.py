"""``--middleware`` hooks for the Ray restart test of the unchanged ``examples/dqn_cartpole.py``.

``kill_learner_once``: on the learner's first incarnation, SIGKILL its own process (the Ray actor) as soon
as a periodic checkpoint (``iteration_<n>.pth.tar``) is in the run folder; on a restarted learner, write
the counters of its first step to ``restart-<n>.json`` in the current directory (the test reads it)."""
import glob
import json
import os
import signal

from pipeline import task


def kill_learner_once(cfg):
    recorded = []

    def kill_learner_once(ctx):
        if not task.has_role('learner'):
            return
        restarts = int(os.environ.get('RLPIPE_RESTARTS', '0'))
        if restarts == 0:
            if glob.glob(os.path.join('**', 'ckpt', 'iteration_*.pth.tar'), recursive=True):
                os.kill(os.getpid(), signal.SIGKILL)  # a real death of the actor process, mid-run
        elif not recorded:
            recorded.append(True)
            with open(f'restart-{restarts}.json', 'w') as f:
                json.dump({'train_iter': int(ctx.train_iter), 'env_step': int(ctx.env_step),
                           'env_episode': int(ctx.env_episode)}, f)

    return kill_learner_once


def check_resumed_run(out_dir, exp_name='restart'):
    """Assert what a test of ``kill_learner_once`` expects in ``out_dir`` (the launch's working directory): the
    restarted learner's first counters are at least those of the first periodic checkpoint (it resumed, not
    from zero), and the final checkpoint is later still. Returns the run folder."""
    import torch

    (run_dir,) = glob.glob(os.path.join(str(out_dir), exp_name, '*'))
    ckpts = sorted(glob.glob(f'{run_dir}/ckpt/iteration_*.pth.tar'), key=lambda p: int(p.split('_')[-1][:-8]))
    saved = torch.load(ckpts[0], weights_only=True)['counters']  # what the first incarnation saved
    assert saved['train_iter'] >= 1000
    with open(os.path.join(str(out_dir), 'restart-1.json')) as f:
        resumed = json.load(f)  # the restarted learner's counters at its first step
    for k in ('train_iter', 'env_step', 'env_episode'):
        assert resumed[k] >= saved[k] > 0, (k, resumed, saved)
    final = torch.load(f'{run_dir}/ckpt/final.pth.tar', weights_only=True)['counters']
    assert final['train_iter'] >= resumed['train_iter'] and final['env_step'] > resumed['env_step'], (final, resumed)
    return run_dir
