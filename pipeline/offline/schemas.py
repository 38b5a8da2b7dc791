"""The config schemas of the offline learners (BC, discrete CQL, IQL): every key's default, type and range.

Torch-free, like :mod:`pipeline.config.policy_schemas`. ``pipeline.config.compile_config(user, policy='bc')``
(``'cql'``, ``'iql'``) merges and checks a user's overrides against them. In offline configs
``policy.eval.evaluator.eval_freq`` counts train iterations (minibatch updates) between evaluations.
"""
from __future__ import annotations

import copy

from ..config.schema import Bool, Choice, Float, Int, IntList, SchemaTree, Shape, Str, env_section, run_section
from ..config.policy_schemas import DQN_CONFIG, device_keys

__all__ = ['BC_CONFIG', 'CQL_CONFIG', 'IQL_CONFIG']

BC_CONFIG: SchemaTree = {
    **run_section('bc'),
    'env': env_section(None, collector_env_num=1, evaluator_env_num=4, n_evaluator_episode=10, stop_value=None),
    'policy': {
        'type': Str('bc'),
        **device_keys(),
        'model': {
            'obs_shape': Shape(None, optional=True),
            'action_shape': Shape(None, optional=True),        # actions for discrete, action dims for continuous
            'action_type': Choice('discrete', ('discrete', 'continuous')),
            'hidden_size_list': IntList([256, 256], item_min=1),
        },
        'learn': {
            'batch_size': Int(256, min=1),
            'learning_rate': Float(1e-3, gt=0, max=1),
            'grad_clip': Float(None, gt=0, optional=True),
        },
        'eval': {'evaluator': {'eval_freq': Int(1000, min=1)}},
    },
}

# Discrete CQL is DQN's config plus ``cql_alpha``: the learner is DQN's with the CQL(H) term added.
CQL_CONFIG: SchemaTree = copy.deepcopy(DQN_CONFIG)
CQL_CONFIG.update(run_section('cql'))
# no stop value by default: an evaluator would end an offline run at the first evaluation that reaches it
CQL_CONFIG['env'] = env_section(None, collector_env_num=1, evaluator_env_num=4, n_evaluator_episode=10, stop_value=None)
CQL_CONFIG['policy']['type'] = Str('cql')
CQL_CONFIG['policy']['learn']['cql_alpha'] = Float(1.0, min=0)        # weight of logsumexp Q - Q(s, a_data)
CQL_CONFIG['policy']['learn']['batch_size'] = Int(256, min=1)
CQL_CONFIG['policy']['learn']['truncation_as_terminal'] = Bool(False)  # offline: a time-limit end bootstraps
CQL_CONFIG['policy']['eval']['evaluator']['eval_freq'] = Int(1000, min=1)

IQL_CONFIG: SchemaTree = {
    **run_section('iql'),
    'env': env_section(None, collector_env_num=1, evaluator_env_num=4, n_evaluator_episode=10, stop_value=None),
    'policy': {
        'type': Str('iql'),
        **device_keys(),
        'discount_factor': Float(0.99, min=0, max=1),
        'model': {
            'obs_shape': Shape(None, optional=True),
            'action_shape': Shape(None, optional=True),
            'actor_hidden_size_list': IntList([256, 256], item_min=1),
            'critic_hidden_size_list': IntList([256, 256], item_min=1),
        },
        'learn': {
            'batch_size': Int(256, min=1),
            'learning_rate_actor': Float(3e-4, gt=0, max=1),
            'learning_rate_critic': Float(3e-4, gt=0, max=1),
            'learning_rate_value': Float(3e-4, gt=0, max=1),
            'expectile': Float(0.7, gt=0, lt=1),       # tau of the value's expectile loss (0.5: mean)
            'beta': Float(3.0, gt=0),                  # inverse temperature of the advantage weights
            'max_weight': Float(100.0, gt=0),          # advantage weights are clipped to this
            'target_theta': Float(0.005, gt=0, max=1),
            'grad_clip': Float(None, gt=0, optional=True),
            'truncation_as_terminal': Bool(False),
        },
        'eval': {'evaluator': {'eval_freq': Int(1000, min=1)}},
    },
}
