"""A short PPO run improves CartPole's return (the full solve is examples/ppo_cartpole.py).

Measured on the sampling policy's episodes: the untrained greedy policy of a near-zero policy head
can balance CartPole by chance, so a greedy 'before' figure proves nothing.
"""
import numpy as np

from contexts import OnlineRLContext
from middleware import OnPolicyTrainer, RolloutCollector, gae_estimator, termination_checker
from pipeline import task
from pipeline.envs import EnvManager
from pipeline.policy.ppo import PPOPolicy, make_ppo_config


def test_short_ppo_run_improves_cartpole_return():
    cfg = make_ppo_config({'seed': 0})  # RL-Zoo settings: 8 envs x 32 steps, 20 epochs of 256 rows
    env = EnvManager('CartPole-v1', 8, seed=0)
    policy = PPOPolicy(cfg, env.observation_space, env.action_space, seed=0)
    kls = []
    returns = []  # per rollout: the returns of the episodes the sampling policy finished

    def record(ctx):
        returns.append(list(ctx.info_for_logging.get('collect_episode_return', ())))
        kls.append(ctx.train_output[0]['approx_kl'])

    with task.start(ctx=OnlineRLContext()):
        task.use(RolloutCollector(cfg, policy.collect_mode, env))
        task.use(gae_estimator(cfg, policy.model))
        task.use(OnPolicyTrainer(cfg, policy.learn_mode))
        task.use(record)
        task.use(termination_checker(max_env_step=8192))
        task.run(max_step=100)
        ctx = task.ctx
    assert ctx.env_step == 8192 and ctx.train_iter == 32
    assert policy.learn_mode.num_minibatch_updates_lifetime == 32 * 20
    assert len(kls) == 32 and np.isfinite(kls).all() and max(kls) > 0
    first = np.mean(sum(returns[:3], []))   # a near-uniform random policy: ~20
    last = np.mean(sum(returns[-8:], []))
    assert first < 40, first
    assert last > max(50.0, 2.5 * first), (first, last)
    env.close()
