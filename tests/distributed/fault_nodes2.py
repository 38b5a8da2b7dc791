"""Node main for the second pass of fault tests (issue 28), started by ``rlpipe run --package tests/distributed
--main fault_nodes2.trio_main``.

A light learner / collector / evaluator job around ``ContextExchanger``. Files in ``--out``:

- ``pid-<node>-<pid>``: written at start (the tests pause or kill nodes by it);
- ``trained-20``: the learner trained 20 times (the job is running);
- ``dead-<node>``: this node's bus declared node ``<node>`` dead;
- ``finish-now`` (written by a test): the learner finishes the task;
- ``collector-finish`` (written by a test): a collector finishes the task, as a collector's env-step budget
  would (after collecting in that step);
- ``node-<node>.json``: written when the node's run ends (counters, the exchanger's stats).

The learner trains once per step whether or not new data came, as ``OffPolicyLearner`` does (it samples its
buffer); it counts the updates made since new data last arrived.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from contexts import OnlineRLContext  # noqa: E402
from pipeline import Role, task  # noqa: E402
from pipeline.runtime.roles import for_roles  # noqa: E402


def trio_main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--kill-collector-after', type=int, default=-1, help='a collector SIGKILLs itself after N steps')
    ap.add_argument('--wait-timeout', type=float, default=2.0)
    ap.add_argument('--collector-timeout', type=float, default=None)
    ap.add_argument('--learner-timeout', type=float, default=120.0)
    ap.add_argument('--step-sleep', type=float, default=0.02)
    args = ap.parse_args()
    from middleware import ContextExchanger

    out = args.out

    def path(name: str) -> str:
        return os.path.join(out, name)

    state = {'received': 0, 'since_data': 0, 'max_since_data': 0, 'eval_steps': 0, 'last_eval': -1}

    @for_roles(Role.COLLECTOR)
    def collect(ctx):
        if 0 <= args.kill_collector_after <= ctx.total_step:
            os.kill(os.getpid(), signal.SIGKILL)
        ctx.transitions = [{'obs': np.zeros(3, np.float32), 'action': j, 'reward': 1.0} for j in range(3)]
        ctx.env_step += 3
        time.sleep(args.step_sleep)
        if os.path.exists(path('collector-finish')):
            task.finish = True  # as a collector's env-step budget does

    @for_roles(Role.LEARNER)
    def learn(ctx):
        if ctx.transitions:
            state['received'] += len(ctx.transitions)
            state['since_data'] = 0
        else:
            state['since_data'] += 1
            state['max_since_data'] = max(state['max_since_data'], state['since_data'])
        ctx.train_iter += 1  # trains on its buffer every step, new data or not
        if ctx.train_iter == 20:
            open(path('trained-20'), 'w').close()
        if os.path.exists(path('finish-now')):
            task.finish = True
        time.sleep(args.step_sleep)

    @for_roles(Role.EVALUATOR)
    def evaluate(ctx):
        state['eval_steps'] += 1
        if ctx.train_iter >= state['last_eval'] + 10:
            state['last_eval'] = ctx.train_iter
            ctx.eval_value = float(ctx.train_iter)

    def on_dead(node_id, *_, **__):
        open(path(f'dead-{int(node_id)}'), 'w').close()

    os.makedirs(out, exist_ok=True)
    with task.start(ctx=OnlineRLContext()):
        me = task.router.node_id
        open(path(f'pid-{me}-{os.getpid()}'), 'w').close()
        task.on('__peer_dead__', on_dead)
        kw = {} if args.collector_timeout is None else {'collector_timeout': args.collector_timeout}
        cx = ContextExchanger(wait_timeout=args.wait_timeout, learner_timeout=args.learner_timeout, **kw)
        task.use(cx)
        task.use(collect)
        task.use(learn)
        task.use(evaluate)
        task.run()
        ctx = task.ctx
        record = {'node': me, 'roles': sorted(str(r) for r in task.roles), 'finish': task.finish,
                  'train_iter': ctx.train_iter, 'env_step': ctx.env_step, 'cx_stats': dict(cx.stats),
                  'repeats_logged': getattr(cx._w, 'repeats_logged', None), **state}
    with open(path(f'node-{me}.json') + '.tmp', 'w') as f:
        json.dump(record, f)
    os.replace(path(f'node-{me}.json') + '.tmp', path(f'node-{me}.json'))
    return 0
