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
