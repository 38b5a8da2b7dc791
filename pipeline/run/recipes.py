"""The settings and pipelines of the DQN, PPO and SAC examples, shared by the example scripts
(``examples/dqn_cartpole.py``, ``ppo_cartpole.py``, ``sac_mujoco.py``) and the Python agents
(:mod:`pipeline.run.agents`): both train with the same config and the same middleware, in the same order.

Importing this module loads neither torch nor gymnasium (the examples' ``--help`` answers at once): the
middleware (which loads numpy) and the replay buffers are imported where a pipeline is built.
Each ``use_*`` function adds an algorithm's middleware to the running task, inside
``with task.start(...)``; the caller adds the checkpointer, the logger and the termination check after it::

    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        use_dqn(cfg, policy, buffer_, collector_env, evaluator_env)
        task.use(ckpt)
        task.use(logger)
        task.use(termination_checker(max_env_step=...))
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Dict, Optional

from easydict import EasyDict

from ..runtime import task

if TYPE_CHECKING:  # these load torch and gymnasium, which importing this module does not
    from middleware.functional.evaluator import EvaluatorMiddleware

    from ..data import DequeBuffer
    from ..data.protocols import ReplayBuffer
    from ..envs import EnvManager
    from ..policy import DQNPolicy
    from ..policy.ppo import PPOPolicy
    from ..policy.sac import SACPolicy

__all__ = ['DQN_CARTPOLE', 'PPO_CARTPOLE', 'sac_policy_settings', 'dqn_buffer', 'use_dqn', 'use_ppo', 'use_sac',
           'EVAL_MIN_COLLECT_RETURN', 'EVAL_COLLECT_WINDOW', 'MAX_EVAL_GAP', 'EVAL_COST_RATIO',
           'EVAL_RUNNING_MEAN_STOP']

# DQN settings that learn CartPole-v1 (see examples/dqn_cartpole.py and benchmarks/bench_cartpole_solve.py):
# a small Q-net with LayerNorm (it keeps TD learning stable at this update rate and learning rate 2.5e-3),
# one update per env step (4 envs, 4 updates per pipeline step), a soft target update (theta 0.05) after every
# update, 3-step double-DQN returns with discount 0.99 bootstrapping through the 500-step time limit (a
# truncation is not a terminal) and a quick exploration decay (eps ~0.1 after 3,000 env steps).
DQN_CARTPOLE: Dict[str, Any] = {
    'exp_name': 'cartpole_dqn',
    'env': {
        'env_id': 'CartPole-v1',
        'collector_env_num': 4,
        'evaluator_env_num': 1,     # episodes one after another: see EVAL_RUNNING_MEAN_STOP below
        'n_evaluator_episode': 10,
        'stop_value': 475,
    },
    'policy': {
        'discount_factor': 0.99,
        'nstep': 3,
        'model': {'encoder_hidden_size_list': [128, 128, 64], 'dueling': True, 'layer_norm': True},
        'learn': {
            'update_per_collect': 4,
            'batch_size': 64,
            'learning_rate': 2.5e-3,
            'target_update_type': 'soft',
            'target_theta': 0.05,
            'truncation_as_terminal': False,
            'grad_clip': 10.0,
            'learning_starts': 500,
        },
        'collect': {'n_sample': 4},
        'eval': {'evaluator': {'eval_freq': 500}},
        'other': {
            'eps': {'type': 'exp', 'start': 1.0, 'end': 0.05, 'decay': 1000},
            'replay_buffer': {'replay_buffer_size': 50000},
        },
    },
}

#: When DQN evaluates (cost; solved always means 10 complete evaluation episodes with a mean >= the stop value).
#: At most every eval_freq train iterations, and only when each of the last EVAL_COLLECT_WINDOW training
#: episodes returned at least EVAL_MIN_COLLECT_RETURN -- or when MAX_EVAL_GAP iterations passed.
EVAL_MIN_COLLECT_RETURN: Optional[float] = 475.0
EVAL_COLLECT_WINDOW = 2
MAX_EVAL_GAP: Optional[int] = 5000
#: And (after the first evaluation, of the untrained policy) only when the evaluation env steps so far plus this
#: one's worst case (10 episodes x the 500-step time limit) stay below EVAL_COST_RATIO x the training env steps:
#: a run that solves has spent fewer env steps evaluating than training (docs/benchmarks.md, seeds 0-9).
EVAL_COST_RATIO: Optional[float] = 1.0
#: The episodes of an evaluation run one after another, and it stops as soon as the mean of the finished ones is
#: below the stop value: it passes only if that mean is >= 475 after every episode, the 10th included (False:
#: it stops only once a mean of 475 over 10 is out of reach, CartPole-v1 paying at most 500 per episode).
EVAL_RUNNING_MEAN_STOP = True

# PPO settings: RL-Zoo's CartPole-v1 PPO (8 envs x 32 steps = 256 rows per rollout, minibatch 256, 20 epochs,
# gamma 0.98, GAE lambda 0.8, lr 1e-3 and clip range 0.2 decaying linearly to 0 over 100k env steps).
PPO_CARTPOLE: Dict[str, Any] = {
    'exp_name': 'cartpole_ppo',
    'env': {'env_id': 'CartPole-v1', 'collector_env_num': 8, 'evaluator_env_num': 5,
            'n_evaluator_episode': 10, 'stop_value': 475},
    'policy': {
        'discount_factor': 0.98,
        'gae_lambda': 0.8,
        'learn': {'n_epochs': 20, 'batch_size': 256, 'learning_rate': 1e-3, 'clip_range': 0.2,
                  'ent_coef': 0.0, 'total_env_steps': 100_000},
        'collect': {'n_steps': 32},
        'eval': {'evaluator': {'eval_freq': 4}},
    },
}


def sac_policy_settings(env_num: int = 1) -> Dict[str, Any]:
    """SAC's ``policy`` section for MuJoCo (the common settings): 256x256 actor and twin critics, Adam 3e-4,
    batch 256, discount 0.99, soft target update 0.005, learned temperature, 1M replay, 10k uniform-random
    steps first, one update per env step (``update_per_collect`` = ``n_sample`` = ``env_num``)."""
    return copy.deepcopy({
        'discount_factor': 0.99,
        'model': {'actor_hidden_size_list': [256, 256], 'critic_hidden_size_list': [256, 256]},
        'learn': {'update_per_collect': env_num, 'batch_size': 256, 'learning_rate_actor': 3e-4,
                  'learning_rate_critic': 3e-4, 'learning_rate_alpha': 3e-4, 'target_theta': 0.005,
                  'init_alpha': 1.0, 'truncation_as_terminal': False, 'learning_starts': 10_000},
        'collect': {'n_sample': env_num, 'random_collect_size': 10_000},
        'eval': {'evaluator': {'eval_freq': 20_000}},
        'other': {'replay_buffer': {'replay_buffer_size': 1_000_000}},
    })


def dqn_buffer(cfg: EasyDict) -> DequeBuffer:
    """DQN's replay buffer: uniform, or prioritized (a ``PrioritizedSampler``) when
    ``policy.other.replay_buffer.priority``."""
    from ..data import DequeBuffer, PrioritizedSampler  # lazy: the replay buffers load torch

    rb = cfg.policy.other.replay_buffer
    sampler = None
    if rb.priority:
        sampler = PrioritizedSampler(alpha=rb.priority_power_factor, beta=rb.IS_weight_power_factor,
                                     anneal=rb.IS_weight_anneal_train_iter, is_weight=rb.priority_IS_weight)
    return DequeBuffer(rb.replay_buffer_size, seed=cfg.seed, sampler=sampler)


def use_dqn(cfg: EasyDict, policy: DQNPolicy, buffer_: ReplayBuffer, collector_env: EnvManager,
            evaluator_env: EnvManager,
            min_collect_return: Optional[float] = EVAL_MIN_COLLECT_RETURN) -> EvaluatorMiddleware:
    """Add DQN's middleware to the running task: exchangers (no-ops in one process), eps-greedy, the step
    collector, n-step returns, the buffer, the learner and, after it, the evaluator (returned: its
    ``env_steps`` counts the evaluation env steps). ``min_collect_return``: a due evaluation waits until
    the last training episodes returned this much (or ``MAX_EVAL_GAP`` iterations passed); None: no wait."""
    from middleware import (ContextExchanger, ModelExchanger, OffPolicyLearner, StepCollector,  # lazy: see above
                            data_pusher, eps_greedy_handler, interaction_evaluator, nstep_reward_enhancer)

    # Under `rlpipe run` every node has its own id, so the collectors explore differently seeded envs.
    collector_env.seed(cfg.seed + 1000 * task.router.node_id)
    evaluator = interaction_evaluator(cfg, policy.eval_mode, evaluator_env,
                                      max_episode_return='auto',  # 500 on CartPole-v1: stop a doomed evaluation
                                      # the screen reads this node's training episodes: none without collectors
                                      min_collect_return=min_collect_return
                                      if task.has_role('collector') else None,
                                      max_eval_gap=MAX_EVAL_GAP, collect_window=EVAL_COLLECT_WINDOW,
                                      eval_cost_ratio=EVAL_COST_RATIO, running_mean_stop=EVAL_RUNNING_MEAN_STOP)
    task.use(ContextExchanger())  # under `rlpipe run --parallel-workers N`; no-ops in one process
    task.use(ModelExchanger(policy.model))
    task.use(eps_greedy_handler(cfg))
    task.use(StepCollector(cfg, policy.collect_mode, collector_env))
    task.use(nstep_reward_enhancer(cfg))
    task.use(data_pusher(cfg, buffer_))
    task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer_))
    task.use(evaluator)  # after the learner: the weights it evaluates are the ones saved at the end
    return evaluator


def use_ppo(cfg: EasyDict, policy: PPOPolicy, collector_env: EnvManager, evaluator_env: EnvManager) -> None:
    """Add PPO's middleware to the running task: the rollout exchanger (a no-op in one process), the
    evaluator, the rollout collector, GAE and the on-policy trainer."""
    from middleware import (OnPolicyTrainer, RolloutCollector, RolloutExchanger, gae_estimator,  # lazy: see above
                            interaction_evaluator)

    # Under `rlpipe run` every node has its own id, so collectors run differently seeded envs.
    collector_env.seed(cfg.seed + 1000 * task.router.node_id)
    # Multi-process: weights out, rollouts in, stale rollouts refused; a no-op in one process.
    task.use(RolloutExchanger(policy.model))
    task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
    task.use(RolloutCollector(cfg, policy.collect_mode, collector_env))
    task.use(gae_estimator(cfg, policy.model))
    task.use(OnPolicyTrainer(cfg, policy.learn_mode))


def use_sac(cfg: EasyDict, policy: SACPolicy, buffer_: ReplayBuffer, collector_env: EnvManager, evaluator_env: EnvManager,
            overlap: bool = False) -> None:
    """Add SAC's middleware to the running task: the evaluator, the step collector (``overlap``: step one
    half of subprocess envs while the policy acts for the other), the buffer and the learner."""
    from middleware import OffPolicyLearner, StepCollector, data_pusher, interaction_evaluator  # lazy: see above

    task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
    task.use(StepCollector(cfg, policy.collect_mode, collector_env, overlap=overlap))
    task.use(data_pusher(cfg, buffer_))
    task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer_))
