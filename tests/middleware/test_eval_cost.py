"""Evaluation that costs less than training (issue 48): the running-mean stop and the evaluation budget
(``eval_cost_ratio``) of ``interaction_evaluator``."""
import numpy as np
import pytest

from contexts import OnlineRLContext
from middleware import interaction_evaluator
from middleware.functional.evaluator import episode_step_limit, run_eval_episodes
from pipeline import task
from pipeline.config import compile_config
from pipeline.envs import EnvManager

from eval_envs import cycle_env, greedy


def test_the_running_mean_stop_ends_an_evaluation_once_the_finished_episodes_average_below_the_target():
    # target mean 9 over 4 episodes (bound 10): 10, 7 -> running mean 8.5 < 9: stop after 17 env steps, while
    # "out of reach" alone would run all four (17 + 2 * 10 = 37 >= 36 could still pass)
    res = run_eval_episodes(greedy, cycle_env([10, 7, 10, 10]), 4, target_mean=9, max_episode_return=10,
                            min_running_mean=9)
    assert not res.complete and res.returns.tolist() == [10.0, 7.0] and res.env_steps == 17
    reach = run_eval_episodes(greedy, cycle_env([10, 7, 10, 10]), 4, target_mean=9, max_episode_return=10)
    assert reach.complete and reach.env_steps == 37
    # the same episodes in another order pass: the mean stays >= 9 after every episode
    res = run_eval_episodes(greedy, cycle_env([10, 10, 10, 7]), 4, target_mean=9, max_episode_return=10,
                            min_running_mean=9)
    assert res.complete and res.returns.mean() == 9.25


def test_the_running_mean_stop_never_passes_what_the_mean_fails_and_a_stopped_mean_is_below_the_target():
    rng = np.random.default_rng(1)
    stopped = passed = 0
    for _ in range(200):
        per_env = [rng.integers(1, 11, size=6).tolist()]
        n, target = int(rng.integers(1, 8)), float(rng.uniform(4, 10))
        full = run_eval_episodes(greedy, cycle_env(*per_env), n)
        rm = run_eval_episodes(greedy, cycle_env(*per_env), n, target_mean=target, max_episode_return=10,
                               min_running_mean=target)
        assert rm.returns.tolist() == full.returns.tolist()[:len(rm.returns)] and rm.env_steps <= full.env_steps
        if rm.complete and rm.returns.mean() >= target:
            passed += 1
            assert full.returns.mean() >= target  # "solved" keeps its meaning: 10 (here n) episodes, mean >= target
        if not rm.complete:
            stopped += 1
            assert rm.returns.mean() < target  # an evaluation stopped early never reports a value at the target
    assert stopped > 20 and passed > 20


def eval_cfg(env_id='CartPole-v1', freq=10, stop=475, n=10, max_episode_steps=None):
    env = {'env_id': env_id, 'n_evaluator_episode': n, 'stop_value': stop}
    if max_episode_steps:
        env['max_episode_steps'] = max_episode_steps
    return compile_config({'env': env, 'policy': {'eval': {'evaluator': {'eval_freq': freq}}}})


def test_episode_step_limit():
    assert episode_step_limit('CartPole-v1') == 500
    assert episode_step_limit('CartPole-v1', 200) == 200
    assert episode_step_limit('NoSuchEnv-v0') is None and episode_step_limit(lambda: None) is None


def test_an_evaluation_starts_only_when_its_worst_case_keeps_evaluation_below_training():
    env = EnvManager('CartPole-v1', 1, seed=0)  # always-left: ~10-step episodes; worst case 10 x 500 = 5000
    ev = interaction_evaluator(eval_cfg(), greedy, env, max_episode_return='auto', snapshot=False,
                               eval_cost_ratio=1.0)
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        ev(ctx)
        assert ctx.last_eval_iter == 0 and ev.evaluations == 1  # the untrained policy, as before
        first = ev.env_steps

        def step(train_iter, env_step):
            nonlocal ctx
            ctx = ctx.renew()
            ctx.train_iter, ctx.env_step = train_iter, env_step
            ev(ctx)
            if ctx.last_eval_iter == train_iter and train_iter:
                assert ev.env_steps < ctx.env_step  # whenever a later evaluation ran: below training
            return ctx.last_eval_iter

        assert step(10, 4000) == 0                # due, but first + 5000 >= 4000 training env steps
        assert step(20, first + 5000) == 0        # equal: not below
        assert step(30, first + 5001) == 30       # now it fits
        spent = ev.env_steps
        assert step(40, spent + 5000) == 30 and step(50, spent + 5001) == 50
    env.close()


def test_a_resumed_evaluator_counts_training_from_its_resume():
    env = EnvManager('CartPole-v1', 1, seed=0)
    ev = interaction_evaluator(eval_cfg(), greedy, env, max_episode_return='auto', snapshot=False,
                               eval_cost_ratio=1.0)
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        ctx.train_iter, ctx.env_step, ctx.last_eval_iter = 1000, 100_000, 990  # restored counters
        ev(ctx)
        assert ev.evaluations == 0  # the resumed run does not start by evaluating, and has not trained yet
        ctx = ctx.renew()
        ctx.train_iter, ctx.env_step = 1010, 104_000
        ev(ctx)
        assert ev.evaluations == 0  # 4,000 env steps trained since the resume: less than 5,000
        ctx = ctx.renew()
        ctx.train_iter, ctx.env_step = 1020, 105_001
        ev(ctx)
        assert ev.evaluations == 1
    env.close()


def test_the_budget_needs_a_time_limit_and_a_positive_ratio(caplog):
    env = EnvManager('CartPole-v1', 1, seed=0)
    ev = interaction_evaluator(eval_cfg(env_id='NoSuchEnv-v0'), greedy, env, eval_cost_ratio=1.0)
    assert 'time limit is unknown' in caplog.text  # no wait (said once), as max_episode_return='auto' without one
    with task.start(ctx=OnlineRLContext()):
        ev(task.ctx)
        task.ctx.train_iter, task.ctx.env_step = 10, 40
        ev(task.ctx)
        assert ev.evaluations == 2
    with pytest.raises(ValueError, match='> 0'):
        interaction_evaluator(eval_cfg(), greedy, env, eval_cost_ratio=0)
    assert interaction_evaluator(eval_cfg(env_id='NoSuchEnv-v0', max_episode_steps=50), greedy, env,
                                 eval_cost_ratio=1.0) is not None
    env.close()
