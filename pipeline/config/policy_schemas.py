"""The config schemas of the built-in policies (DQN, PPO, SAC): every key's default, type and range.

They live here, apart from the policies, so that importing them loads neither torch nor gymnasium:
``pipeline.config.check_user_config`` checks a user's overrides against them before anything heavy
is imported (an example refuses a misspelled ``--set`` key at once). The policy modules re-export
them (``pipeline.policy.dqn.DQN_CONFIG`` is :data:`DQN_CONFIG`).
"""
from __future__ import annotations

from typing import Dict

from .schema import (Bool, Choice, Device, Float, FreeForm, Int, IntList, SchemaTree, Shape, Spec, Str, env_section,
                     run_section)

__all__ = ['DQN_CONFIG', 'PPO_CONFIG', 'SAC_CONFIG', 'OPTIMIZER_NAMES', 'SCHEMAS', 'device_keys']

#: the optimizers a DQN config may name (``policy.learn.optimizer``)
OPTIMIZER_NAMES = ('adam', 'adamw', 'sgd', 'rmsprop')



def device_keys() -> Dict[str, Spec]:
    """The ``policy`` keys that say where a policy runs (:mod:`pipeline.device`): ``device`` (where it trains,
    and acts in one process: ``'auto'`` picks the GPU when there is one) and ``acting_device`` (where a node
    of a multi-node run that does not learn acts; unset: the CPU)."""
    return {'device': Device('auto'), 'acting_device': Device(None, optional=True)}


# DQN's config: every key's default, type and range (DI-engine 0.5.3's CartPole DQN settings where
# they apply). ``pipeline.config.compile_config(user, policy='dqn')`` merges and checks against it.
DQN_CONFIG: SchemaTree = {
    **run_section('cartpole_dqn'),
    'env': env_section('CartPole-v0', collector_env_num=8, evaluator_env_num=5, n_evaluator_episode=5, stop_value=195),
    'policy': {
        'type': Str('dqn'),
        **device_keys(),
        'discount_factor': Float(0.97, min=0, max=1),
        'nstep': Int(1, min=1),
        'model': {
            'obs_shape': Shape(None, optional=True),             # inferred from the env when None
            'action_shape': Int(None, min=1, optional=True),     # inferred from the env when None
            'encoder_hidden_size_list': IntList([128, 128, 64], item_min=1),
            'dueling': Bool(True),
            'head_hidden_size': Int(None, min=1, optional=True),  # defaults to the last encoder size
            'head_layer_num': Int(1, min=0),
            'layer_norm': Bool(False),                          # LayerNorm before each hidden activation
            'extra': FreeForm(),
        },
        'learn': {
            'update_per_collect': Int(5, min=1),
            'batch_size': Int(64, min=1),
            'learning_rate': Float(1e-3, gt=0, max=1),
            'optimizer': Choice('adam', OPTIMIZER_NAMES, ignore_case=True),
            'optimizer_kwargs': FreeForm(),
            'double_dqn': Bool(True),
            'loss': Choice('mse', ('mse', 'huber')),
            'target_update_type': Choice('hard', ('hard', 'soft')),
            'target_update_freq': Int(100, min=1),     # hard update: every this many train iterations
            'target_theta': Float(None, gt=0, max=1, optional=True),  # soft: target <- theta*online + (1-theta)*target
            'grad_clip': Float(None, gt=0, optional=True),  # max global grad norm, None for no clipping
            'truncation_as_terminal': Bool(True),      # DI-engine treats a time-limit end as terminal
            'learning_starts': Int(64, min=0),         # fetch nothing until the buffer holds this many
        },
        'collect': {
            'n_sample': Int(8, min=1),
            'n_episode': Int(8, min=1),                # used by EpisodeCollector
            'unroll_len': Int(1, min=1),
        },
        'eval': {'evaluator': {'eval_freq': Int(40, min=1)}},
        'other': {
            'eps': {
                'type': Choice('exp', ('exp', 'linear')),
                'start': Float(0.95, min=0, max=1),
                'end': Float(0.1, min=0, max=1),
                'decay': Int(10000, min=1),
                # ez-greedy: a random action is held for n ~ zeta(repeat_exponent) steps (None: plain eps-greedy)
                'repeat_exponent': Float(None, gt=1, optional=True),
                'repeat_max': Int(100, min=1),                   # the cap on n
                'repeat_min_eps': Float(0.0, min=0, max=1),      # holds start only while eps is above this
            },
            'replay_buffer': {
                'replay_buffer_size': Int(20000, min=1),
                'priority': Bool(False),
                'priority_IS_weight': Bool(False),
                'priority_power_factor': Float(0.6, min=0, max=1),
                'IS_weight_power_factor': Float(0.4, min=0, max=1),
                'IS_weight_anneal_train_iter': Int(100000, min=1),
            },
        },
    },
}

# PPO's config: every key's default, type and range (RL-Zoo's CartPole-v1 settings: 8 envs x 32 steps,
# batch 256, 20 epochs, gamma 0.98, lambda 0.8, lr 1e-3 and clip 0.2 both decaying linearly to 0 over
# ``total_env_steps``). ``compile_config(user, policy='ppo')`` (or ``make_ppo_config``) checks against it.
PPO_CONFIG: SchemaTree = {
    **run_section('cartpole_ppo'),
    'env': env_section('CartPole-v1', collector_env_num=8, evaluator_env_num=5, n_evaluator_episode=10,
                       stop_value=475),
    'policy': {
        'type': Str('ppo'),
        **device_keys(),
        'discount_factor': Float(0.98, min=0, max=1),
        'gae_lambda': Float(0.8, min=0, max=1),
        'model': {'hidden': IntList([64, 64], item_min=1), 'log_std_init': Float(0.0, min=-20, max=2),
                  'normalize_obs': Bool(False),
                  'activation': Choice('tanh', ('tanh', 'relu')),   # of the hidden layers
                  'ortho_init': Bool(True)},   # orthogonal init (SB3's MlpPolicy); False: torch's default init
        'learn': {
            'n_epochs': Int(20, min=1),
            'batch_size': Int(256, min=1),             # minibatch rows
            'learning_rate': Float(1e-3, gt=0, max=1),
            'lr_schedule': Choice('linear', ('linear', 'constant')),   # 'linear': to 0 at total_env_steps
            'clip_range': Float(0.2, gt=0, lt=1),
            'clip_schedule': Choice('linear', ('linear', 'constant')),
            'clip_range_vf': Float(None, gt=0, optional=True),  # value clipping around the rollout's values
            'vf_coef': Float(0.5, min=0),
            'ent_coef': Float(0.0, min=0),
            'normalize_advantage': Bool(True),         # per minibatch
            'max_grad_norm': Float(0.5, gt=0, optional=True),  # global gradient norm clip
            'target_kl': Float(None, gt=0, optional=True),     # stop the epochs once approx-KL > 1.5 * target_kl
            'normalize_reward': Bool(False),           # scale rewards by the running std of discounted returns
            'adam_eps': Float(1e-5, gt=0, max=1),
            'total_env_steps': Int(100_000, min=1),    # horizon of the linear schedules
        },
        'collect': {'n_steps': Int(32, min=1)},
        'eval': {'evaluator': {'eval_freq': Int(4, min=1)}},  # in train iterations (rollouts)
    },
}

# SAC's config: every key's default, type and range; ``compile_config(user, policy='sac')`` checks against it.
SAC_CONFIG: SchemaTree = {
    **run_section("sac"),
    "env": env_section(None, collector_env_num=4, evaluator_env_num=4, n_evaluator_episode=20, stop_value=None),
    "policy": {
        "type": Str("sac"),
        **device_keys(),
        "discount_factor": Float(0.98, min=0, max=1),
        "model": {
            "obs_shape": Shape(None, optional=True),
            "action_shape": Shape(None, optional=True),
            "actor_hidden_size_list": IntList([128, 128], item_min=1),
            "critic_hidden_size_list": IntList([128, 128], item_min=1),
        },
        "learn": {
            "update_per_collect": Int(16, min=1),
            "batch_size": Int(128, min=1),
            "learning_rate_actor": Float(1e-3, gt=0, max=1),
            "learning_rate_critic": Float(1e-3, gt=0, max=1),
            "learning_rate_alpha": Float(1e-3, gt=0, max=1),
            "target_theta": Float(0.05, gt=0, max=1),
            "init_alpha": Float(0.2, gt=0, max=1e3),
            "auto_alpha": Bool(True),
            "target_entropy": Float(None, optional=True),  # default: -action_dim
            "grad_clip": Float(None, gt=0, optional=True),
            "truncation_as_terminal": Bool(False),
            "learning_starts": Int(256, min=0),
        },
        "collect": {"n_sample": Int(64, min=1), "n_episode": Int(8, min=1), "random_collect_size": Int(1000, min=0)},
        "eval": {"evaluator": {"eval_freq": Int(200, min=1)}},
        "other": {"replay_buffer": {"replay_buffer_size": Int(100000, min=1)}},
    },
}

#: policy name -> its schema
SCHEMAS: Dict[str, SchemaTree] = {'dqn': DQN_CONFIG, 'ppo': PPO_CONFIG, 'sac': SAC_CONFIG}
