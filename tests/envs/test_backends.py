"""The same EnvManager contract on every backend, sync == subprocess trajectories, and worker failures."""
import os
import sys
import time
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from pipeline.envs import EnvManager, EnvWorkerError

pytestmark = [pytest.mark.timeout(120), pytest.mark.multiprocess]

BACKENDS = ['sync', 'subprocess']
# the contract on every layout: the default (one worker per core), one env per worker, all in one worker,
# env 0 in this process and the others in workers (local_envs=1)
LAYOUTS = ['sync', 'subprocess', 'subprocess:per-env', 'subprocess:one-worker', 'subprocess:local']


class CountEnv(gym.Env):
    """Obs [t, last action, reset draw]; reward t; terminates after `length` steps; `fail_at` makes
    step number `fail_at` raise / hang / kill the process, for env `bad` (its make index)."""

    def __init__(self, length=3, truncate=False, fail=None, fail_at=2):
        self.length, self.truncate, self.fail, self.fail_at = length, truncate, fail, fail_at
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.t = 0
        self.draw = 0.0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.draw = float(self.np_random.random())
        return np.array([0.0, -1.0, self.draw], np.float32), {'reset': True}

    def step(self, action):
        self.t += 1
        if self.fail is not None and self.t == self.fail_at:
            if self.fail == 'raise':
                raise_from_env_step()
            elif self.fail == 'hang':
                hang_in_env_step()
            elif self.fail == 'exit':
                os._exit(3)
        end = self.t >= self.length
        obs = np.array([self.t, action, self.draw], np.float32)
        return obs, float(self.t), end and not self.truncate, end and self.truncate, {'t': self.t}


def raise_from_env_step():
    raise ValueError('boom in env step')


def hang_in_env_step():
    time.sleep(600)


class FailingMake:
    def __call__(self):
        raise RuntimeError('cannot make this env')


def make_mgr(backend, fns, **kw):
    backend, _, layout = backend.partition(':')
    if layout == 'local':
        kw['local_envs'] = 1
    elif layout:
        kw['workers'] = {'per-env': len(fns), 'one-worker': 1}[layout]
    return EnvManager(fns, len(fns), backend=backend, **kw)


@pytest.mark.parametrize('backend', LAYOUTS)
def test_final_obs_auto_reset_and_episode_stats(backend):
    with make_mgr(backend, [lambda: CountEnv(3), lambda: CountEnv(2)], seed=0) as m:
        first = m.reset().copy()
        s1 = m.step(np.array([1, 2]))
        assert s1.terminated.tolist() == [False, False] and s1.finished == []
        s2 = m.step(np.array([0, 1]))
        assert s2.terminated.tolist() == [False, True] and not s2.truncated.any()
        np.testing.assert_array_equal(s2.next_obs[1], [2, 1, first[1, 2]])   # the true final observation
        assert m.obs[1, 0] == 0 and m.obs[1, 1] == -1                          # env 1 already reset
        np.testing.assert_array_equal(m.obs[0], s2.next_obs[0])
        assert [(e.env_id, e.episode_return, e.length, e.terminated, e.truncated) for e in s2.finished] == \
            [(1, 3.0, 2, True, False)]
        s3 = m.step(np.array([2, 2]))
        assert s3.terminated.tolist() == [True, False]
        assert s3.obs[1, 0] == 0 and s3.next_obs[1, 0] == 1            # env 1's new episode goes on
        assert s3.next_obs[0, 0] == 3 and s3.finished[0].episode_return == 6.0
        assert s3.reward.dtype == np.float32


@pytest.mark.parametrize('backend', LAYOUTS)
def test_truncation_apart_from_termination_and_infos(backend):
    with make_mgr(backend, [lambda: CountEnv(2, truncate=True)] * 2, keep_infos=True) as m:
        m.reset()
        m.step(np.array([0, 0]))
        s = m.step(np.array([1, 1]))
        assert s.truncated.all() and not s.terminated.any()
        assert all(e.truncated and not e.terminated and e.length == 2 for e in s.finished)
        assert [i['t'] for i in s.infos] == [2, 2]          # the final step's info, not the reset's


@pytest.mark.parametrize('backend', LAYOUTS)
def test_subset_step_leaves_other_envs_alone(backend):
    with make_mgr(backend, [lambda: CountEnv(100)] * 3, seed=1) as m:
        obs0 = m.reset().copy()
        s = m.step(np.array([2]), env_ids=[2])
        assert s.env_ids.tolist() == [2] and s.next_obs.shape == (1, 3)
        np.testing.assert_array_equal(m.obs[:2], obs0[:2])
        assert m.obs[2, 0] == 1 and m.obs[2, 1] == 2
        s = m.step(np.array([1, 1, 1]))
        assert m.obs[:, 0].tolist() == [1, 1, 2]


def test_sync_and_subprocess_give_the_same_trajectories():
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, (400, 3))
    runs = []
    for backend, kw in (('sync', {}), ('subprocess', {}), ('subprocess', {'workers': 2})):  # last: groups 2 + 1
        with EnvManager('CartPole-v1', 3, seed=11, backend=backend, max_episode_steps=60, **kw) as m:
            rec = [m.reset().copy()]
            eps = []
            for a in actions:
                s = m.step(a)
                rec += [s.next_obs, s.reward, s.terminated, s.truncated, m.obs.copy()]
                eps += s.finished
            runs.append((rec, eps))
    (ra, ea) = runs[0]
    assert len(ea) > 10 and any(e.truncated for e in ea) and any(e.terminated for e in ea)
    for rb, eb in runs[1:]:
        assert ea == eb
        for x, y in zip(ra, rb):
            np.testing.assert_array_equal(x, y)
    with EnvManager('CartPole-v1', 3, seed=12, backend='subprocess') as m:
        assert not np.array_equal(m.reset(), ra[0])


def assert_same_records(a: list, b: list) -> None:
    """Two runs' records (arrays, or tuples of arrays and plain values) are equal item by item."""
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(x, y) if isinstance(x, tuple) else [(x, y)]:
            if isinstance(u, np.ndarray):
                np.testing.assert_array_equal(u, v)
            else:
                assert u == v


def random_subset_plan(seed: int, n_envs: int = 5, steps: int = 40, n_actions: int = 3) -> list:
    """``steps`` pairs (env ids: a random non-empty subset in random order, one random action per id)."""
    rng = np.random.default_rng(seed)
    plan = []
    for _ in range(steps):
        ids = rng.permutation(n_envs)[:rng.integers(1, n_envs + 1)]
        plan.append((ids, rng.integers(0, n_actions, len(ids))))
    return plan


def test_grouped_workers_match_sync_on_subsets_in_any_order_with_infos():
    """5 envs in 2 workers (3 + 2): steps of random subsets in random order give what sync gives."""
    lengths = [2, 3, 4, 5, 3]
    fns = [partial(CountEnv, n) for n in lengths]
    plan = random_subset_plan(seed=3)
    runs = []
    for backend, kw in (('sync', {}), ('subprocess', {'workers': 2})):
        with EnvManager(fns, 5, seed=4, backend=backend, keep_infos=True, **kw) as m:
            if backend == 'subprocess':
                assert (m._backend.workers, m._backend.group_size) == (2, 3)
            rec = [m.reset().copy()]
            for ids, a in plan:
                s = m.step(a, env_ids=ids)
                rec.append((s.env_ids, s.obs, s.next_obs, s.reward, s.terminated, s.truncated, s.finished,
                            [i['t'] for i in s.infos], m.obs.copy()))
            runs.append(rec)
    assert sum(len(r[6]) for r in runs[0][1:]) > 10
    assert_same_records(*runs)


@pytest.mark.parametrize('how', ['raise', 'hang', 'exit'])
def test_failing_env_in_a_group_is_named(how):
    """Envs 0-2 in one worker: the failing env (1) is named, not the worker's first env."""
    fns = [lambda: CountEnv(10), lambda: CountEnv(10, fail=how, fail_at=2), lambda: CountEnv(10)]
    m = make_mgr('subprocess:one-worker', fns, step_timeout=1.0)
    try:
        m.reset()
        m.step(np.array([0, 0, 0]))
        with pytest.raises(EnvWorkerError) as e:
            m.step(np.array([0, 0, 0]))
        assert e.value.env_index == 1 and 'worker 0, which runs envs 0-2' in str(e.value)
        expected = {'raise': 'boom in env step', 'hang': 'hung', 'exit': 'exit code 3'}[how]
        assert expected in str(e.value)
        if how == 'raise':
            assert 'raise_from_env_step' in e.value.worker_traceback
        elif how == 'hang' and sys.platform.startswith('linux'):
            assert 'hang_in_env_step' in e.value.worker_traceback
    finally:
        t0 = time.monotonic()
        m.close()
        assert time.monotonic() - t0 < 15
    assert all(not p.is_alive() for p in m._backend._procs)


def test_env_that_cannot_be_made_in_a_group_is_named():
    with pytest.raises(EnvWorkerError, match='cannot make this env') as e:
        EnvManager([lambda: CountEnv(3), lambda: CountEnv(3), FailingMake()], 3, backend='subprocess', workers=1)
    assert e.value.env_index == 2


def test_workers_layout_and_bad_workers():
    with EnvManager('CartPole-v1', 5, backend='subprocess', workers=4) as m:
        assert (m._backend.workers, m._backend.group_size) == (3, 2)   # ceil(5 / 4) = 2 envs per worker
        assert len(m._backend._procs) == 3 and m.reset().shape == (5, 4)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match='workers must be a positive int'):
            EnvManager('CartPole-v1', 2, backend='subprocess', workers=bad)


def test_worker_exception_reports_index_and_traceback():
    fns = [lambda: CountEnv(10), lambda: CountEnv(10, fail='raise', fail_at=2)]
    m = make_mgr('subprocess', fns)
    m.reset()
    m.step(np.array([0, 0]))
    with pytest.raises(EnvWorkerError) as e:
        m.step(np.array([0, 0]))
    assert e.value.env_index == 1
    assert 'raise_from_env_step' in e.value.worker_traceback and 'boom in env step' in str(e.value)
    with pytest.raises(RuntimeError, match='close'):
        m.step(np.array([0, 0]))
    t0 = time.monotonic()
    m.close()
    assert time.monotonic() - t0 < 10


def test_hung_worker_is_reported_with_its_stack_and_close_does_not_hang():
    fns = [lambda: CountEnv(10), lambda: CountEnv(10), lambda: CountEnv(10, fail='hang', fail_at=1)]
    m = make_mgr('subprocess', fns, step_timeout=1.0)
    m.reset()
    with pytest.raises(EnvWorkerError) as e:
        m.step(np.array([0, 0, 0]))
    assert e.value.env_index == 2 and 'hung' in str(e.value)
    if sys.platform.startswith('linux'):
        assert 'hang_in_env_step' in e.value.worker_traceback
    t0 = time.monotonic()
    m.close()
    assert time.monotonic() - t0 < 15
    assert all(not p.is_alive() for p in m._backend._procs)


def test_dead_worker_reports_exit_code():
    m = make_mgr('subprocess', [lambda: CountEnv(10, fail='exit', fail_at=1), lambda: CountEnv(10)])
    m.reset()
    with pytest.raises(EnvWorkerError, match='exit code 3') as e:
        m.step(np.array([0, 0]))
    assert e.value.env_index == 0
    m.close()


def test_env_that_cannot_be_made_in_its_worker_is_named():
    # env 0 is made in the parent too (AsyncVectorEnv takes the spaces from it); env 1 fails in its worker
    with pytest.raises(EnvWorkerError, match='cannot make this env') as e:
        EnvManager([lambda: CountEnv(3), FailingMake()], 2, backend='subprocess')
    assert e.value.env_index == 1


def test_bad_backend_and_timeout():
    with pytest.raises(ValueError, match='backend must be one of'):
        EnvManager('CartPole-v1', 2, backend='threads')
    with pytest.raises(ValueError, match='step_timeout'):
        EnvManager('CartPole-v1', 2, backend='subprocess', step_timeout=0)


def scored_env():
    """Rewards t (raw) seen halved by a training-only wrapper; RecordEpisodeStatistics underneath."""
    env = gym.wrappers.RecordEpisodeStatistics(CountEnv(3))
    return gym.wrappers.TransformReward(env, halve)


def halve(r):
    return r / 2


@pytest.mark.parametrize('backend', BACKENDS)
def test_raw_score_reaches_episode_info_and_collector_logs(backend):
    from contexts import OnlineRLContext
    from middleware import StepCollector
    with make_mgr(backend, [scored_env, lambda: CountEnv(3)]) as m:
        col = StepCollector({'policy': {'collect': {'n_sample': 6}}}, lambda obs: np.zeros(len(obs), np.int64), m)
        ctx = OnlineRLContext()
        col(ctx)
    assert ctx.info_for_logging['collect_episode_return'] == [3.0, 6.0]   # what the learner saw
    assert ctx.info_for_logging['collect_score'] == [6.0]                 # env 0's raw score (1+2+3)


class ResetFails(CountEnv):
    """A 2-step episode env whose reset number `when` raises, hangs or kills its worker (when=1: the
    first reset; when=2: the auto-reset inside a step)."""

    def __init__(self, how, when):
        super().__init__(length=2)
        self.how, self.when, self.resets = how, when, 0

    def reset(self, seed=None, options=None):
        self.resets += 1
        if self.resets == self.when:
            if self.how == 'raise':
                raise_from_env_reset()
            elif self.how == 'hang':
                hang_in_env_step()
            else:
                os._exit(5)
        return super().reset(seed=seed, options=options)


def raise_from_env_reset():
    raise KeyError('reset broke')


@pytest.mark.parametrize('when', [1, 2])
@pytest.mark.parametrize('how', ['raise', 'hang', 'exit'])
def test_failing_reset_in_a_worker_is_reported_with_index_and_traceback(how, when):
    """A reset that fails -- the first one, or the auto-reset inside a step -- is reported like a
    failing step: the env's index, and the worker's traceback (its stack when it hangs)."""
    m = make_mgr('subprocess', [lambda: CountEnv(10), lambda: ResetFails(how, when)], step_timeout=1.0)
    try:
        with pytest.raises(EnvWorkerError) as e:
            m.reset()
            for _ in range(3):
                m.step(np.array([0, 0]))
        assert e.value.env_index == 1
        expected = {'raise': 'reset broke', 'hang': 'hung', 'exit': 'exit code 5'}[how]
        assert expected in str(e.value)
        if how == 'raise' or (how == 'hang' and sys.platform.startswith('linux')):
            assert 'reset' in e.value.worker_traceback
    finally:
        t0 = time.monotonic()
        m.close()
        assert time.monotonic() - t0 < 15


@pytest.mark.skipif(not hasattr(__import__('signal'), 'SIGALRM'), reason='needs SIGALRM')
def test_close_after_ctrl_c_in_a_step_with_a_hung_worker_and_no_timeout():
    """Ctrl-C while a worker hangs and there is no step timeout: close() still returns and no
    worker process is left."""
    import signal

    def interrupt(*_):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    m = make_mgr('subprocess', [lambda: CountEnv(10), lambda: CountEnv(10, fail='hang', fail_at=1)],
                 step_timeout=None)
    try:
        m.reset()
        signal.alarm(1)
        with pytest.raises(KeyboardInterrupt):
            m.step(np.array([0, 0]))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        t0 = time.monotonic()
        m.close()
    assert time.monotonic() - t0 < 15
    assert all(not p.is_alive() for p in m._backend._procs)


class DictActionEnv(CountEnv):
    """Actions are dicts ({'a': int}): they reach the workers as an object array, pickled as it is."""

    def __init__(self):
        super().__init__(length=4)
        self.action_space = gym.spaces.Dict({'a': gym.spaces.Discrete(3)})

    def step(self, action):
        return super().step(int(action['a']))


def test_dict_actions_and_spawned_workers_match_sync():
    actions = [np.array([{'a': i % 3}, {'a': (i + 1) % 3}, {'a': 2}], dtype=object) for i in range(9)]
    runs = []
    for backend, kw in (('sync', {}), ('subprocess', {'workers': 2, 'start_method': 'spawn'})):
        with EnvManager(DictActionEnv, 3, seed=5, backend=backend, **kw) as m:
            rec = [m.reset().copy()]
            for a in actions:
                s = m.step(a)
                rec += [s.next_obs, s.reward, s.terminated, m.obs.copy()]
            runs.append(rec)
    assert runs[0][-1][0, 0] == 1 and runs[0][-4][0, 1] == 2   # the actions reached the envs
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)
