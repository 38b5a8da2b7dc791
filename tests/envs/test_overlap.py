"""Overlapped stepping: EnvManager.step_async / step_wait on every backend, and the collectors'
``overlap=True`` (two halves of the envs, one stepping while the other's actions are computed)."""
import copy
import importlib.util
import time
from functools import partial

import numpy as np
import pytest

from contexts import OnlineRLContext
from middleware import EpisodeCollector, StepCollector
from pipeline.envs import EnvManager, EnvWorkerError

from test_backends import CountEnv

pytestmark = [pytest.mark.timeout(120), pytest.mark.multiprocess]

HAVE_ENVPOOL = importlib.util.find_spec('envpool') is not None
BACKENDS = ['sync', 'subprocess'] + (['envpool'] if HAVE_ENVPOOL else [])
# subprocess layouts: default (2 workers on 2 cores, halves = workers), 3 workers of 2 (halves 2 + 4),
# one worker (both halves queued on the same worker), one worker per env
LAYOUTS = [('sync', {}), ('subprocess', {}), ('subprocess', {'workers': 3}), ('subprocess', {'workers': 1}),
           ('subprocess', {'workers': 6}), ('subprocess', {'local_envs': 3}), ('subprocess', {'local_envs': 2})]


def policy(obs, **_):
    """Deterministic, row by row (so batching cannot matter), and random-looking: episodes end both ways."""
    return (np.floor(np.abs(obs[:, 1]) * 1e5) % 2).astype(np.int64)


class ResettablePolicy:
    """Deterministic policy that records the collector's ``reset`` calls (per-env state resets)."""

    def __init__(self):
        self.resets = []

    def forward(self, obs, **_):
        return policy(obs)

    def reset(self, env_ids=None):
        self.resets.append(None if env_ids is None else sorted(env_ids))


def collect(backend, kw, overlap, calls=25, n_sample=12, collector=StepCollector, **mgr_kw):
    with EnvManager('CartPole-v1', 6, seed=3, backend=backend, max_episode_steps=25, **kw, **mgr_kw) as m:
        key = 'n_episode' if collector is EpisodeCollector else 'n_sample'
        col = collector({'policy': {'collect': {key: n_sample if key == 'n_sample' else 4}}}, policy, m,
                        overlap=overlap)
        ctx = OnlineRLContext()
        out = []
        for _ in range(calls):
            col(ctx)
            out.append(copy.deepcopy(ctx.transitions if key == 'n_sample' else ctx.episodes))
        return out, ctx.env_step, ctx.env_episode, dict(ctx.info_for_logging)


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, list):
            assert_same(x, y)
        else:
            assert x.keys() == y.keys()
            for k in x:
                np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.mark.parametrize('backend, kw', LAYOUTS)
def test_overlap_gives_the_lock_step_sync_trajectories(backend, kw):
    ref, steps, eps, logs = collect('sync', {}, overlap=False)
    assert eps > 10 and any(t['truncated'] for c in ref for t in c) and any(t['terminated'] for c in ref for t in c)
    got, steps2, eps2, logs2 = collect(backend, kw, overlap=True)
    assert_same(ref, got)     # same transitions, same order (half by half = env order), call by call
    assert (steps2, eps2) == (steps, eps) and logs2 == logs


def test_episode_collector_overlap_matches_lock_step():
    """The same episodes in the same order (a call may stop half a round earlier: compare the streams)."""
    ref = [ep for call in collect('sync', {}, overlap=False, calls=6, collector=EpisodeCollector)[0] for ep in call]
    got = [ep for call in collect('subprocess', {}, overlap=True, calls=6, collector=EpisodeCollector)[0]
           for ep in call]
    n = min(len(ref), len(got))
    assert n >= 24
    assert_same(ref[:n], got[:n])


def test_overlap_resets_the_policy_state_of_finished_envs_before_their_next_action():
    """The per-env reset calls reach the policy for the same envs; each before the env's next action."""
    runs = []
    for overlap in (False, True):
        with EnvManager('CartPole-v1', 4, seed=0, backend='subprocess', max_episode_steps=15) as m:
            pol = ResettablePolicy()
            col = StepCollector({'policy': {'collect': {'n_sample': 8}}}, pol, m, overlap=overlap)
            ctx = OnlineRLContext()
            for _ in range(10):
                col(ctx)
            runs.append(sorted(i for r in pol.resets[1:] for i in r))
            assert pol.resets[0] is None
    assert runs[0] == runs[1] and len(runs[0]) >= 4


@pytest.mark.parametrize('kw', [{}, {'local_envs': 2}])
def test_handed_out_transitions_never_change_and_do_not_alias_shared_memory(kw):
    with EnvManager('CartPole-v1', 4, seed=1, backend='subprocess', max_episode_steps=20, **kw) as m:
        col = StepCollector({'policy': {'collect': {'n_sample': 8}}}, policy, m, overlap=True)
        ctx = OnlineRLContext()
        kept, copies = [], []
        shm = getattr(m._backend, '_remote', m._backend)._obs
        for _ in range(30):
            col(ctx)
            for t in ctx.transitions:
                assert not np.shares_memory(t['obs'], shm) and not np.shares_memory(t['next_obs'], shm)
            kept.append(ctx.transitions)
            copies.append(copy.deepcopy(ctx.transitions))
        assert not np.shares_memory(m.obs, shm)
        assert_same(kept, copies)   # 30 calls later, every transition handed out is as it was


@pytest.mark.parametrize('backend', BACKENDS)
def test_step_async_wait_match_step_on_halves(backend):
    """Both halves in flight at once give what stepping the halves one after the other gives (on
    sync and subprocess also what stepping all envs at once gives; EnvPool may hand a slot another
    spare env when the finished envs are reset in different calls)."""
    env = 'CartPole-v1'
    with EnvManager(env, 4, seed=2, backend=backend) as a, EnvManager(env, 4, seed=2, backend=backend) as b, \
            EnvManager(env, 4, seed=2, backend=backend) as c:
        np.testing.assert_array_equal(a.reset(), b.reset())
        c.reset()
        lo, hi = a.halves()
        assert sorted(lo.tolist() + hi.tolist()) == [0, 1, 2, 3] and len(lo) and len(hi)
        for t in range(60):
            act = np.array([t % 2, 1, 0, (t // 3) % 2])
            a.step_async(act[lo], lo)
            assert a.in_flight == 1
            a.step_async(act[hi], hi)
            assert a.in_flight == 2
            got = [a.step_wait(), a.step_wait()]
            assert a.in_flight == 0
            want = [b.step(act[lo], lo), b.step(act[hi], hi)]
            full = c.step(act)
            assert [s.env_ids.tolist() for s in got] == [lo.tolist(), hi.tolist()]
            for f in ('obs', 'action', 'reward', 'next_obs', 'terminated', 'truncated'):
                x = np.concatenate([getattr(s, f) for s in got])
                np.testing.assert_array_equal(x, np.concatenate([getattr(s, f) for s in want]))
                if backend != 'envpool':
                    np.testing.assert_array_equal(x, getattr(full, f))
            assert got[0].finished + got[1].finished == want[0].finished + want[1].finished
            np.testing.assert_array_equal(a.obs, b.obs)


@pytest.mark.parametrize('backend', BACKENDS)
def test_misuse_is_refused_with_a_clear_error(backend):
    with EnvManager('CartPole-v1', 4, seed=0, backend=backend) as m:
        with pytest.raises(RuntimeError, match='reset'):
            m.step_async(np.zeros(4, np.int64))          # before reset
        m.reset()
        with pytest.raises(RuntimeError, match='step_wait\\(\\) without a step_async\\(\\)'):
            m.step_wait()
        m.step_async(np.zeros(2, np.int64), [0, 1])
        with pytest.raises(RuntimeError, match=r'envs \[1\] already have a step_async\(\) in flight'):
            m.step_async(np.zeros(2, np.int64), [1, 2])   # env 1 again
        with pytest.raises(RuntimeError, match='already have a step_async'):
            m.step_async(np.zeros(4, np.int64))           # all envs, two of them in flight
        with pytest.raises(RuntimeError, match=r'step\(\) while 1 step_async\(\) call\(s\) are in flight'):
            m.step(np.zeros(4, np.int64))
        with pytest.raises(ValueError, match='must not repeat'):
            m.step_async(np.zeros(2, np.int64), [3, 3])
        with pytest.raises(ValueError, match='one action per stepped env'):
            m.step_async(np.zeros(3, np.int64), [2, 3])
        assert m.in_flight == 1
        s = m.step_wait()                                 # the refused calls left no trace
        assert s.env_ids.tolist() == [0, 1] and m.in_flight == 0
        m.step(np.zeros(4, np.int64))
        with pytest.raises(RuntimeError, match='without a step_async'):
            m.step_wait()


@pytest.mark.parametrize('backend', BACKENDS)
def test_reset_with_steps_in_flight_waits_for_them_and_starts_over(backend):
    with EnvManager('CartPole-v1', 4, seed=7, backend=backend) as m, \
            EnvManager('CartPole-v1', 4, seed=7, backend=backend) as fresh:
        m.reset()
        m.step_async(np.ones(2, np.int64), [0, 1])
        m.step_async(np.ones(2, np.int64), [2, 3])
        obs = m.reset(seed=7)                             # the same first observations as a fresh manager
        assert m.in_flight == 0
        np.testing.assert_array_equal(obs, fresh.reset())
        np.testing.assert_array_equal(m.step(np.ones(4, np.int64)).next_obs, fresh.step(np.ones(4, np.int64)).next_obs)
        assert m.episode_returns_so_far.tolist() == [1.0] * 4


@pytest.mark.parametrize('backend', BACKENDS)
def test_close_with_steps_in_flight_returns_at_once(backend):
    m = EnvManager('CartPole-v1', 4, seed=0, backend=backend)
    m.reset()
    m.step_async(np.ones(2, np.int64), [2, 3])
    m.step_async(np.ones(2, np.int64), [0, 1])
    t0 = time.monotonic()
    m.close()
    assert time.monotonic() - t0 < 5
    if backend == 'subprocess':
        assert all(not p.is_alive() for p in m._backend._procs)
    with pytest.raises(RuntimeError, match='closed'):
        m.step_wait()


@pytest.mark.slow
def test_close_and_reset_with_a_hung_step_in_flight_are_bounded():
    fns = [lambda: CountEnv(10), lambda: CountEnv(10, fail='hang', fail_at=1)]
    m = EnvManager(fns, 2, backend='subprocess', step_timeout=1.0)
    try:
        m.reset()
        m.step_async(np.zeros(1, np.int64), [1])        # env 1's worker hangs in this step
        t0 = time.monotonic()
        with pytest.raises(EnvWorkerError, match='hung') as e:
            m.reset()                                     # waits for the step in flight: step_timeout
        assert e.value.env_index == 1 and time.monotonic() - t0 < 10
    finally:
        t0 = time.monotonic()
        m.close()
        assert time.monotonic() - t0 < 15
    assert all(not p.is_alive() for p in m._backend._procs)
    m = EnvManager(fns, 2, backend='subprocess', step_timeout=None)
    m.reset()
    m.step_async(np.zeros(2, np.int64))                   # no timeout, and a hung worker: close still returns
    t0 = time.monotonic()
    m.close()
    assert time.monotonic() - t0 < 15
    assert all(not p.is_alive() for p in m._backend._procs)


def test_failure_in_a_step_in_flight_is_reported_by_step_wait():
    fns = [lambda: CountEnv(10), lambda: CountEnv(10, fail='raise', fail_at=1)]
    with EnvManager(fns, 2, backend='subprocess') as m:
        m.reset()
        m.step_async(np.zeros(1, np.int64), [0])
        m.step_async(np.zeros(1, np.int64), [1])
        assert m.step_wait().env_ids.tolist() == [0]
        with pytest.raises(EnvWorkerError, match='boom in env step') as e:
            m.step_wait()
        assert e.value.env_index == 1


def test_overlap_collector_survives_an_env_reset_between_calls_and_one_env():
    with EnvManager('CartPole-v1', 4, seed=0, backend='subprocess') as m:
        col = StepCollector({'policy': {'collect': {'n_sample': 8}}}, policy, m, overlap=True)
        ctx = OnlineRLContext()
        col(ctx)
        assert m.in_flight == 1                           # one half steps between calls
        m.reset()                                         # e.g. an evaluation on the same manager
        col(ctx)
        col(ctx)
        assert ctx.env_step == 24 and len(ctx.transitions) == 8
    with EnvManager('CartPole-v1', 1, seed=0) as m:
        col = StepCollector({'policy': {'collect': {'n_sample': 3}}}, policy, m, overlap=True)
        assert not col.overlap                            # one env: lock step
        ctx = OnlineRLContext()
        col(ctx)
        assert ctx.env_step == 3 and m.in_flight == 0


def test_halves_fall_on_worker_groups():
    with EnvManager(partial(CountEnv, 5), 8, backend='subprocess', workers=2) as m:
        assert [h.tolist() for h in m.halves()] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with EnvManager(partial(CountEnv, 5), 6, backend='subprocess', workers=3) as m:   # groups of 2
        assert [len(h) for h in m.halves()] == [2, 4]
    with EnvManager(partial(CountEnv, 5), 5) as m:
        assert [h.tolist() for h in m.halves()] == [[0, 1], [2, 3, 4]]
    with EnvManager(partial(CountEnv, 5), 1) as m, pytest.raises(ValueError, match='env_num >= 2'):
        m.halves()



class StubPPO:
    """A deterministic collect mode for RolloutCollector (row by row: batching cannot matter)."""

    def forward(self, obs):
        a = policy(obs)
        return {'env_action': a, 'action': a, 'logp': obs[:, 0].astype(np.float32),
                'value': obs[:, 1].astype(np.float32)}

    def value(self, obs):
        return (obs[:, 2] * 10).astype(np.float32)


@pytest.mark.parametrize('backend, kw', [('sync', {}), ('subprocess', {}), ('subprocess', {'workers': 1})])
def test_rollout_collector_overlap_gives_the_lock_step_rollouts(backend, kw):
    from middleware import RolloutCollector
    cfg = {'policy': {'collect': {'n_steps': 16}, 'discount_factor': 0.9}}
    runs = []
    for b, k, overlap in (('sync', {}, False), (backend, kw, True)):
        with EnvManager('CartPole-v1', 5, seed=4, backend=b, max_episode_steps=12, **k) as m:
            col = RolloutCollector(cfg, StubPPO(), m, overlap=overlap)
            ctx = OnlineRLContext()
            rollouts = []
            for _ in range(4):
                col(ctx)
                rollouts.append(copy.deepcopy(ctx.rollout))
                assert m.in_flight == 0                    # nothing left in flight between rollouts
            runs.append((rollouts, ctx.env_step, ctx.env_episode, dict(ctx.info_for_logging)))
    (ra, *rest_a), (rb, *rest_b) = runs
    assert rest_a == rest_b and rest_a[1] > 5
    assert any(r['final_value'].any() for r in ra)     # truncations bootstrapped
    for x, y in zip(ra, rb):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


@pytest.mark.parametrize('backend', ['sync', 'subprocess'])
def test_overlap_transitions_share_obs_with_the_previous_next_obs_as_in_lock_step(backend):
    """Memory: a transition's obs is mostly the very array of its env's previous next_obs (no second
    copy kept alive per transition), with overlap as in lock step. Not after a step in which some env
    of the batch finished an episode: then next_obs is a copy holding the final observations."""
    fractions = []
    for overlap in (False, True):
        with EnvManager('CartPole-v1', 4, seed=0, backend=backend, max_episode_steps=30) as m:
            col = StepCollector({'policy': {'collect': {'n_sample': 8}}}, policy, m, overlap=overlap)
            ctx = OnlineRLContext()
            last, shared, pairs = {}, 0, 0
            for _ in range(40):
                col(ctx)
                for t in ctx.transitions:
                    prev = last.get(t['env_id'])
                    if prev is not None and not (prev['terminated'] or prev['truncated']):
                        pairs += 1
                        shared += np.shares_memory(t['obs'], prev['next_obs'])
                    last[t['env_id']] = t
            fractions.append(shared / pairs)
    assert fractions[0] > 0.5 and fractions[1] >= fractions[0]


@pytest.mark.parametrize('overlap', [False, True])
def test_local_envs_match_sync_lock_step_and_in_any_subset_order(overlap):
    """local_envs: envs 0-1 in this process, 2-4 in a worker; the sync trajectories, also for random
    subsets in random order (with infos), also with two subsets in flight."""
    from test_backends import CountEnv as C, assert_same_records, random_subset_plan
    fns = [partial(C, n) for n in (2, 3, 4, 5, 3)]
    plan = random_subset_plan(seed=5)
    runs = []
    for kw in ({'backend': 'sync'}, {'backend': 'subprocess', 'local_envs': 2}):
        with EnvManager(fns, 5, seed=4, keep_infos=True, **kw) as m:
            rec = [m.reset().copy()]
            for ids, a in plan:
                if overlap and len(ids) > 1:   # two halves of the subset in flight at once
                    h = len(ids) // 2
                    m.step_async(a[:h], ids[:h])
                    m.step_async(a[h:], ids[h:])
                    steps = [m.step_wait(), m.step_wait()]
                else:
                    steps = [m.step(a, env_ids=ids)]
                for s in steps:
                    rec.append((s.env_ids, s.obs, s.next_obs, s.reward, s.terminated, s.truncated, s.finished,
                                [i['t'] for i in s.infos]))
                rec.append(m.obs.copy())
            runs.append(rec)
    assert sum(len(r[6]) for r in runs[0][1:] if isinstance(r, tuple)) > 10
    assert_same_records(*runs)


def test_local_envs_layout_errors_and_failures():
    with EnvManager('CartPole-v1', 8, backend='subprocess', local_envs=4, workers=2) as m:
        assert (m._backend.local_num, m._backend.workers, m._backend.group_size) == (4, 2, 2)
        assert [h.tolist() for h in m.halves()] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    for bad, msg in ((8, 'at least one env to the workers'), (-1, '>= 0'), (True, '>= 0')):
        with pytest.raises(ValueError, match=msg):
            EnvManager('CartPole-v1', 8, backend='subprocess', local_envs=bad)
    with pytest.raises(ValueError, match="for backend='subprocess'"):
        EnvManager('CartPole-v1', 8, backend='sync', local_envs=2)
    # a worker env fails: named by the manager's index; a local env fails: its own exception
    fns = [lambda: CountEnv(10), lambda: CountEnv(10), lambda: CountEnv(10, fail='raise', fail_at=2)]
    m = EnvManager(fns, 3, backend='subprocess', local_envs=1)
    try:
        m.reset()
        m.step(np.zeros(3, np.int64))
        with pytest.raises(EnvWorkerError, match='boom in env step') as e:
            m.step(np.zeros(3, np.int64))
        assert e.value.env_index == 2 and 'worker 0, which runs envs 1-2' in str(e.value)
    finally:
        m.close()
    fns = [lambda: CountEnv(10, fail='raise', fail_at=2), lambda: CountEnv(10)]
    with EnvManager(fns, 2, backend='subprocess', local_envs=1) as m:
        m.reset()
        m.step(np.zeros(2, np.int64))
        with pytest.raises(ValueError, match='boom in env step'):
            m.step(np.zeros(2, np.int64))
        m.step(np.zeros(1, np.int64), env_ids=[1])      # the worker's answer was read: still in step
        m.step_async(np.zeros(1, np.int64), [1])
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 10                    # closed with a step in flight
