"""Node mains for the distributed tests, started by ``rlpipe run --package tests/distributed --main dist_nodes.X``.

Each node writes ``<out>/node-<id>.json`` with its counters and the exchangers' stats when its run ends.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from contexts import OnlineRLContext  # noqa: E402
from pipeline import Role, task  # noqa: E402
from pipeline.runtime.roles import for_roles  # noqa: E402


def _write(out: str, record: dict) -> None:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f'node-{task.router.node_id}.json')
    with open(path + '.tmp', 'w') as f:
        json.dump(record, f)
    os.replace(path + '.tmp', path)


def _record(ctx, cx, mx, t0: float) -> dict:
    return {'node': task.router.node_id, 'roles': sorted(str(r) for r in task.roles),
            'env_step': ctx.env_step, 'env_episode': ctx.env_episode, 'train_iter': ctx.train_iter,
            'last_eval_value': ctx.last_eval_value, 'last_eval_iter': ctx.last_eval_iter,
            'finish': task.finish, 'wall': time.monotonic() - t0,
            'cx_stats': getattr(cx, 'stats', None),
            'received_from': {str(k): v for k, v in getattr(cx, 'received_from', {}).items()},
            'model_version': getattr(mx, 'version', None), 'mx_stats': getattr(mx, 'stats', None)}


def dqn_main() -> int:
    """A short DQN CartPole pipeline (the example's middleware, small settings)."""
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--max-env-step', type=int, default=100_000)
    ap.add_argument('--stop-value', type=int, default=-1)
    ap.add_argument('--eval-freq', type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from middleware import (ContextExchanger, ModelExchanger, OffPolicyLearner, StepCollector, data_pusher,
                            eps_greedy_handler, interaction_evaluator, nstep_reward_enhancer, termination_checker)
    from pipeline.config import compile_config
    from pipeline.data import DequeBuffer
    from pipeline.envs import EnvManager
    from pipeline.policy import DQNPolicy

    cfg = compile_config({
        'exp_name': 'dist_test', 'seed': 0,
        'env': {'env_id': 'CartPole-v1', 'collector_env_num': 4, 'evaluator_env_num': 2, 'n_evaluator_episode': 2,
                'stop_value': args.stop_value},
        'policy': {'nstep': 3, 'discount_factor': 0.99,
                   'learn': {'update_per_collect': 2, 'batch_size': 32, 'learning_starts': 100},
                   'collect': {'n_sample': 8}, 'eval': {'evaluator': {'eval_freq': args.eval_freq}},
                   'other': {'eps': {'type': 'exp', 'start': 1.0, 'end': 0.05, 'decay': 2000},
                             'replay_buffer': {'replay_buffer_size': 5000}}},
    }, policy='dqn')
    node = int(json.loads(os.environ.get('RLPIPE_NODE', '{}')).get('node_id', 0))  # collectors differ by seed
    cenv = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=100 * node)
    eenv = EnvManager(cfg.env.env_id, cfg.env.evaluator_env_num, seed=10_000)
    cfg.policy.model.obs_shape = 4
    cfg.policy.model.action_shape = 2
    cfg.policy.model.encoder_hidden_size_list = [32, 32]
    policy = DQNPolicy(cfg, seed=node)
    buffer_ = DequeBuffer(cfg.policy.other.replay_buffer.replay_buffer_size, seed=0)
    t0 = time.monotonic()
    with task.start(ctx=OnlineRLContext()):
        cx = ContextExchanger(wait_timeout=5.0)
        mx = ModelExchanger(policy.model)
        task.use(cx)
        task.use(mx)
        task.use(interaction_evaluator(cfg, policy.eval_mode, eenv))
        task.use(eps_greedy_handler(cfg))
        task.use(StepCollector(cfg, policy.collect_mode, cenv))
        task.use(nstep_reward_enhancer(cfg))
        task.use(data_pusher(cfg, buffer_))
        task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer_))
        task.use(termination_checker(max_env_step=args.max_env_step))
        task.run()
        record = _record(task.ctx, cx, mx, t0)
        record['buffer_count'] = buffer_.count()
        record['weight_sum'] = float(sum(p.detach().double().sum() for p in policy.model.parameters()))
    cenv.close()
    eenv.close()
    _write(args.out, record)
    return 0


def toy_main() -> int:
    """A light pipeline: fake 3-step collections, a 'learner' that writes train_iter into a linear layer."""
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--kill-node', type=int, default=-1, help='this node SIGKILLs itself after --kill-after steps')
    ap.add_argument('--kill-after', type=int, default=20)
    ap.add_argument('--on-lost', default='continue')
    ap.add_argument('--max-train-iter', type=int, default=150)
    ap.add_argument('--step-sleep', type=float, default=0.02)
    ap.add_argument('--period', type=int, default=0, help='>0: PeriodicalModelExchanger with this period')
    ap.add_argument('--stale', type=int, default=None, help='its stale_toleration')
    ap.add_argument('--storage', default=None, help="ContextExchanger's storage directory")
    ap.add_argument('--forge', default='', help='comma list of file references the collector sends as batches')
    args = ap.parse_args()
    torch.set_num_threads(1)
    from middleware import ContextExchanger, ModelExchanger, PeriodicalModelExchanger, termination_checker

    model = torch.nn.Linear(3, 2)
    seen_versions = []

    @for_roles(Role.COLLECTOR)
    def collect(ctx):
        if task.router.node_id == args.kill_node and ctx.total_step >= args.kill_after:
            os.kill(os.getpid(), signal.SIGKILL)
        # the model must be the learner's: its weights hold the version it was sent with
        if not task.finish:  # (a finishing step does not wait for a fresh model)
            seen_versions.append(float(model.weight[0, 0].detach()))
        ctx.transitions = [{'obs': np.full(3, ctx.env_step + j, np.float32), 'action': j, 'reward': 1.0}
                            for j in range(3)]
        ctx.env_step += 3
        time.sleep(args.step_sleep)

    @for_roles(Role.COLLECTOR)
    def forge(ctx):  # batch messages naming files that are not batch files of the storage directory
        if ctx.total_step == 3:
            for ref in filter(None, args.forge.split(',')):
                task.emit_to(0, 'ctx_exchanger.data', {'file': ref, 'node': task.router.node_id,
                                                       'inc': cx.incarnation, 'seq': next(cx._seq)})
                cx._sent += 1

    received = []

    @for_roles(Role.LEARNER)
    def learn(ctx):
        if ctx.transitions:
            received.extend(int(t['obs'][0]) for t in ctx.transitions)
            ctx.train_iter += 1
            with torch.no_grad():
                model.weight.fill_(ctx.train_iter)
        time.sleep(args.step_sleep)

    t0 = time.monotonic()
    with task.start(ctx=OnlineRLContext()):
        cx = ContextExchanger(wait_timeout=5.0, on_collector_lost=args.on_lost, storage=args.storage)
        if args.period:
            mode = 'send' if task.has_role(Role.LEARNER) else 'receive'
            mx = PeriodicalModelExchanger(model, mode=mode, period=args.period, stale_toleration=args.stale)
        else:
            mx = ModelExchanger(model)
        task.use(cx)
        task.use(mx)
        task.use(collect)
        task.use(forge)
        task.use(learn)
        task.use(termination_checker(max_train_iter=args.max_train_iter))
        task.run()
        record = _record(task.ctx, cx, mx, t0)
    record['n_received'] = len(received)
    record['seen_versions'] = seen_versions[-5:]
    record['all_seen_versions'] = sorted(set(seen_versions))
    runs = [len(list(g)) for _, g in itertools.groupby(seen_versions)]
    record['longest_use_of_one_version'] = max(runs, default=0)
    record['versions_monotonic'] = all(a <= b for a, b in zip(seen_versions, seen_versions[1:]))
    _write(args.out, record)
    return 0


def fault_main() -> int:
    """Learner + collectors whose every transition carries a unique id (node, pid, k), for the fault test.

    Collectors append the ids of each batch the ContextExchanger sent to ``<out>/sent-<node>-<pid>.txt`` (one
    line per batch, written after the send); a collector with ``--kill-node`` id kills itself (SIGKILL) once,
    after ``--kill-after`` steps, when the learner has consumed all it sent. The learner records every id it
    merged and finishes the run once ``<out>/finish-now`` exists."""
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--kill-node', type=int, default=-1)
    ap.add_argument('--kill-after', type=int, default=30)
    args = ap.parse_args()
    from middleware import ContextExchanger

    me, pid = None, os.getpid()
    counter = itertools.count()
    sent_log = None

    @for_roles(Role.COLLECTOR)
    def collect(ctx):
        if me == args.kill_node and ctx.total_step >= args.kill_after:
            marker = os.path.join(args.out, f'killed-{me}')
            if not os.path.exists(marker):
                end = time.monotonic() + 20
                while cx._unacked() and time.monotonic() < end:  # all it sent was consumed: nothing in flight
                    time.sleep(0.01)
                open(marker, 'w').close()
                os.kill(pid, signal.SIGKILL)
        ctx.transitions = [{'obs': np.zeros(3, np.float32), 'src': [me, pid, next(counter)]} for _ in range(3)]
        ctx.env_step += 3
        time.sleep(0.02)

    def handed(cx) -> int:  # batches the exchanger sent or kept for later (each batch is one or the other first)
        return cx.stats['batches_sent'] + cx.stats.get('batches_kept', 0) if hasattr(cx, 'stats') else 0

    def log_sent(ctx):  # before the exchanger in the chain: its backward part runs after the send
        n0 = handed(cx)
        yield
        if sent_log is not None and handed(cx) > n0:
            sent_log.write(' '.join('%d:%d:%d' % tuple(t['src']) for t in ctx.transitions) + '\n')
            sent_log.flush()

    received = []

    @for_roles(Role.LEARNER)
    def learn(ctx):
        for t in ctx.transitions or ():
            received.append('%d:%d:%d' % tuple(int(x) for x in t['src']))
        if ctx.transitions:
            ctx.train_iter += 1
        if os.path.exists(os.path.join(args.out, 'finish-now')):
            task.finish = True
        time.sleep(0.01)

    os.makedirs(args.out, exist_ok=True)
    t0 = time.monotonic()
    with task.start(ctx=OnlineRLContext()):
        me = task.router.node_id
        with open(os.path.join(args.out, f'pid-{me}-{pid}'), 'w'):
            pass
        if task.has_role(Role.COLLECTOR):
            sent_log = open(os.path.join(args.out, f'sent-{me}-{pid}.txt'), 'w')
        cx = ContextExchanger(wait_timeout=5.0)
        task.use(log_sent)
        task.use(cx)
        task.use(collect)
        task.use(learn)
        task.run()
        record = _record(task.ctx, cx, None, t0)
        record['bus_stats'] = dict(task.router.stats)
    record['received'] = received
    record['pid'] = pid
    if sent_log is not None:
        sent_log.close()
    path = os.path.join(args.out, f'node-{me}-{pid}.json')
    with open(path, 'w') as f:
        json.dump(record, f)
    return 0


def ppo_fault_main() -> int:
    """Learner + collector exchanging weights and rollouts with ``RolloutExchanger``; each rollout carries a
    unique id (``uid``), for the test of a learner paused while a rollout is collected.

    The learner appends the id of every rollout it trained on to ``<out>/trained.txt`` and finishes once
    ``<out>/finish-now`` exists. The collector appends, after the exchanger's send, one JSON line per rollout
    (its id, the weights version, the exchanger's stats) to ``<out>/collected.txt``; while ``<out>/hold``
    exists it waits at the start of its collect step (having written ``<out>/holding``), and it writes
    ``<out>/dead-<node>`` when the bus declares a peer dead."""
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    args = ap.parse_args()
    from middleware import RolloutExchanger

    counter = itertools.count()
    out = args.out

    def path(name):
        return os.path.join(out, name)

    @for_roles(Role.COLLECTOR)
    def collect(ctx):
        if os.path.exists(path('hold')):
            open(path('holding'), 'w').close()
            while os.path.exists(path('hold')) and not task.finish:
                time.sleep(0.05)
        ctx.rollout = {'obs': np.zeros((4, 1, 3), np.float32), 'uid': np.full((4, 1), next(counter), np.int64)}
        ctx.env_step += 4
        time.sleep(0.05)

    def log_collected(ctx):  # before the exchanger in the chain: its backward part runs after the send
        yield
        if task.has_role(Role.COLLECTOR) and getattr(ctx, 'rollout', None) is not None:
            with open(path('collected.txt'), 'a') as f:
                f.write(json.dumps({'uid': int(ctx.rollout['uid'][0, 0]), 'version': rx.version,
                                    'stats': rx.stats}) + '\n')

    @for_roles(Role.LEARNER)
    def learn(ctx):
        if ctx.rollout is not None:
            with open(path('trained.txt'), 'a') as f:
                f.write(''.join('%d\n' % u for u in ctx.rollout['uid'][0]))
            ctx.train_iter += 1
        if os.path.exists(path('finish-now')):
            task.finish = True

    def on_dead(node_id, *_, **__):
        open(path(f'dead-{int(node_id)}'), 'w').close()

    os.makedirs(out, exist_ok=True)
    t0 = time.monotonic()
    with task.start(ctx=OnlineRLContext()):
        me = task.router.node_id
        with open(path(f'pid-{me}-{os.getpid()}'), 'w'):
            pass
        task.on('__peer_dead__', on_dead)
        rx = RolloutExchanger(torch.nn.Linear(3, 2))
        task.use(log_collected)
        task.use(rx)
        task.use(collect)
        task.use(learn)
        task.run()
        record = _record(task.ctx, rx, None, t0)
    _write(out, record)
    return 0
