"""The evaluator's early stop (a stop value out of reach) and its training-episode screen."""
import numpy as np
import pytest

from contexts import OnlineRLContext
from middleware import episode_return_bound, interaction_evaluator
from middleware.functional.evaluator import run_eval_episodes
from pipeline import task
from pipeline.config import compile_config
from pipeline.envs import EnvManager

from eval_envs import cycle_env, greedy


def test_an_evaluation_stops_as_soon_as_the_target_is_out_of_reach():
    # bound 10 per episode, target mean 9 over 4 episodes (36): a first episode of 3 leaves at most 33
    res = run_eval_episodes(greedy, cycle_env([3, 10, 10, 10]), 4, target_mean=9, max_episode_return=10)
    assert not res.complete and res.returns.tolist() == [3.0] and res.env_steps == 3
    # without the bound (or the target) the same evaluation runs all its episodes
    full = run_eval_episodes(greedy, cycle_env([3, 10, 10, 10]), 4, target_mean=9)
    assert full.complete and full.returns.tolist() == [3.0, 10.0, 10.0, 10.0] and full.env_steps == 33
    # one short episode that the others can still make up for: no stop (8 + 10 + 10 + 10 = 38 >= 36)
    res = run_eval_episodes(greedy, cycle_env([8, 10, 10, 10]), 4, target_mean=9, max_episode_return=10)
    assert res.complete and res.returns.mean() == 9.5


@pytest.mark.parametrize('n_envs', [1, 3])
def test_an_early_stop_never_stops_an_evaluation_that_would_pass(n_envs):
    rng = np.random.default_rng(0)
    stopped = passed = 0
    for _ in range(150):
        per_env = [rng.integers(1, 11, size=6).tolist() for _ in range(n_envs)]
        n, target = int(rng.integers(1, 8)), float(rng.uniform(4, 10))
        full = run_eval_episodes(greedy, cycle_env(*per_env), n)
        early = run_eval_episodes(greedy, cycle_env(*per_env), n, target_mean=target, max_episode_return=10)
        assert early.returns.tolist() == full.returns.tolist()[:len(early.returns)]  # same episodes, in order
        assert early.env_steps <= full.env_steps
        if full.returns.mean() >= target:
            passed += 1
            assert early.complete and early.env_steps == full.env_steps
        if not early.complete:
            stopped += 1
            assert full.returns.mean() < target
            assert early.returns.sum() + (n - len(early.returns)) * 10 < target * n
    assert stopped > 10 and passed > 10  # both cases were exercised


def test_episode_return_bound_from_the_env_registration():
    assert episode_return_bound('CartPole-v1') == 500.0
    assert episode_return_bound('CartPole-v0') == 200.0
    assert episode_return_bound('CartPole-v1', max_episode_steps=100) == 100.0
    assert episode_return_bound('Pendulum-v1') == 0.0
    assert episode_return_bound('MountainCarContinuous-v0') is None  # not known: no early stop
    assert episode_return_bound(lambda: None) is None


def eval_cfg(env_id='CartPole-v1', freq=10, stop=475, n=10):
    return compile_config({'env': {'env_id': env_id, 'n_evaluator_episode': n, 'stop_value': stop},
                           'policy': {'eval': {'evaluator': {'eval_freq': freq}}}})


def test_evaluator_auto_bound_stops_a_doomed_cartpole_evaluation_and_counts_its_steps():
    env = EnvManager('CartPole-v1', 1, seed=0)
    ev = interaction_evaluator(eval_cfg(), greedy, env, max_episode_return='auto', snapshot=False)
    with task.start(ctx=OnlineRLContext()):
        ev(task.ctx)  # always-left: every episode ends after ~10 steps, so 475 is out of reach after one
        out = task.ctx.eval_output
        assert not out['complete'] and len(out['episode_return']) == 1
        assert ev.env_steps == out['env_steps'] == int(out['episode_length'].sum()) < 20
    env.close()
    with pytest.raises(ValueError, match="'auto'"):
        interaction_evaluator(eval_cfg(), greedy, env, max_episode_return='max')


def test_evaluator_waits_for_good_training_episodes_or_the_longest_gap():
    env = EnvManager('CartPole-v1', 1, seed=0)
    ev = interaction_evaluator(eval_cfg(freq=10), greedy, env, max_episode_return='auto', snapshot=False,
                               min_collect_return=475, collect_window=2, max_eval_gap=30)
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        ev(ctx)
        assert ctx.last_eval_iter == 0  # the first call evaluates
        runs = [ev.env_steps]

        def step(train_iter, returns=None):
            nonlocal ctx
            ctx = ctx.renew()
            ctx.train_iter = train_iter
            ctx.info_for_logging = {'collect_episode_return': returns} if returns else {}
            ev(ctx)
            runs.append(ev.env_steps)
            return ctx.last_eval_iter

        assert step(10, [500.0]) == 0       # due, but only one good training episode so far
        assert step(12, [300.0]) == 0       # the last two: 500, 300
        assert step(15, [480.0]) == 0       # 300, 480
        assert step(16, [499.0]) == 16      # 480, 499: both >= 475
        assert step(20, [500.0, 500.0]) == 16  # screened, but not eval_freq iterations yet
        assert step(40, [10.0]) == 16       # gap 24 < max_eval_gap 30
        assert step(46) == 46               # gap 30: evaluates without the screen
        assert runs[-1] > runs[-2] and runs[4] > runs[3] and runs[1] == runs[0]
    env.close()
