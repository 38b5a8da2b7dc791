"""Configuration: each policy's schema (defaults, types, ranges), a checked merge, ``--set`` overrides.

Usage::

    from pipeline.config import compile_config
    cfg = compile_config({'env': {'env_id': 'CartPole-v1', 'stop_value': 475}}, policy='dqn')
    cfg.policy.learn.batch_size  # -> 64

The schema language (:mod:`.schema`: ``Int``, ``Float``, ``Choice``, ..., ``defaults``, ``check``), the built-in
policies' schemas (:mod:`.policy_schemas`: ``DQN_CONFIG``, ``PPO_CONFIG``, ``SAC_CONFIG``) and the merge, the
check and the overrides (:mod:`.compile`, whose names are importable from here). Importing this package loads
neither torch nor gymnasium: a policy's module is imported when its config is compiled.
"""
from .compile import (FREE_FORM_KEYS, RENAMED_KEYS, SB3_NAMES, ConfigError, apply_overrides, check_user_config,
                      compile_config, config_table, find_keys, flatten_keys, format_config_table,
                      get_default_config, get_schema, merge_config, parse_override,
                      register_policy_config)

__all__ = [
    'ConfigError', 'get_default_config', 'get_schema', 'merge_config', 'compile_config',
    'register_policy_config', 'apply_overrides', 'parse_override', 'flatten_keys',
    'FREE_FORM_KEYS', 'RENAMED_KEYS', 'check_user_config', 'config_table', 'format_config_table', 'find_keys',
    'SB3_NAMES',
]
