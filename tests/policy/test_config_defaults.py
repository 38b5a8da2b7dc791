"""The config schema is the only source of defaults (issue 25): a policy built from a config that lacks a key
behaves as one built from the schema's defaults, every key a policy reads is in its schema, and a key a
middleware cannot fill is one line naming it."""
import copy

import gymnasium as gym
import pytest
import torch

from pipeline.config import compile_config, get_schema
from pipeline.config.schema import Spec, iter_specs, spec_at
from pipeline.offline.bc import BCPolicy
from pipeline.offline.cql import DiscreteCQLPolicy
from pipeline.offline.cql_continuous import ContinuousCQLPolicy
from pipeline.offline.iql import IQLPolicy
from pipeline.policy.config_defaults import MissingConfigKey, config_value, policy_config
from pipeline.policy.dqn import DQNLearner, DQNPolicy
from pipeline.policy.ppo import PPOPolicy
from pipeline.policy.sac import SACPolicy

BOX4, DISCRETE2 = gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2)

# policy name -> how to build it from a config (shapes given as arguments, so any config section works)
BUILD = {
    'dqn': lambda cfg: DQNPolicy(cfg, obs_shape=4, action_shape=2, seed=0),
    'cql': lambda cfg: DiscreteCQLPolicy(cfg, obs_shape=4, action_shape=2, seed=0),
    'sac': lambda cfg: SACPolicy(cfg, obs_shape=3, action_shape=2, seed=0),
    'cql_continuous': lambda cfg: ContinuousCQLPolicy(cfg, obs_shape=3, action_shape=2, seed=0),
    'ppo': lambda cfg: PPOPolicy(cfg, BOX4, DISCRETE2, seed=0),
    'iql': lambda cfg: IQLPolicy(cfg, obs_shape=3, action_shape=2, seed=0),
    'bc': lambda cfg: BCPolicy(cfg, obs_shape=3, action_shape=2, seed=0),
}
SIMPLE = (bool, int, float, str, type(None))


def _plain(obj):
    return {k: v for k, v in vars(obj).items() if isinstance(v, SIMPLE)}


def effective(policy):
    """What a policy does with its config: its modes' settings, optimizers, schedules and initial weights."""
    learner = policy.learn_mode
    out = {'learner': _plain(learner), 'collect': _plain(policy.collect_mode), 'eval': _plain(policy.eval_mode),
           'device': str(policy.device),
           'optimizers': {mid: (type(o).__name__, [{k: v for k, v in g.items() if k != 'params'}
                                                   for g in o.param_groups])
                          for mid, o in learner.optimizers.items()},
           'schedules': {name: [float(fn(t)) for t in (0, 1_000, 60_000)] for name, fn in
                         [*learner.optim.schedules.items(),
                          *[(k, v) for k, v in vars(learner).items() if k.endswith('_schedule') and callable(v)]]}}
    out['weights'] = {name: {k: v.tolist() for k, v in net.state_dict().items()}
                      for name, net in policy.networks().items()}
    return out


def _to_dict(x):
    return {k: _to_dict(v) for k, v in x.items()} if isinstance(x, dict) else copy.deepcopy(x)


def _without(section, path):
    """A plain-dict copy of ``section`` without the key at the dotted ``path``."""
    out = _to_dict(section)
    node = out
    *parents, leaf = path.split('.')
    for p in parents:
        node = node[p]
    del node[leaf]
    return out


@pytest.mark.parametrize('name', sorted(BUILD))
def test_a_config_lacking_any_key_behaves_as_the_schema_default(name):
    """One key at a time left out of the schema's default config (a hand-written config that does not set
    it), and the whole section left empty: the policy must act as with the schema's value. Before issue 25
    DQN read truncation_as_terminal with a default of False (schema True), SAC target_theta 0.005 (schema
    0.05) and random_collect_size 0 (schema 1000), PPO max_grad_norm None (schema 0.5)."""
    cfg = compile_config({}, policy=name)
    want = effective(BUILD[name](cfg))
    cases = [(f'without policy.{path}', {'policy': _without(cfg.policy, path)})
             for path, _ in iter_specs(get_schema(name)['policy'])] + [('an empty policy section', {})]
    wrong = []
    for what, partial in cases:
        try:
            got = effective(BUILD[name](partial))
        except KeyError as e:
            wrong.append(f'{what}: KeyError {e}')
            continue
        if got != want:
            diff = {part: {k: (v, got[part].get(k)) for k, v in want[part].items() if got[part].get(k) != v}
                    for part in ('learner', 'collect', 'eval') if got[part] != want[part]}
            wrong.append(f'{what}: differs {diff or "(optimizers, schedules or weights)"}')
    assert not wrong, f'{name} built from a config lacking a key does not act as the schema default:\n' + \
        '\n'.join(wrong)


def test_bare_dqn_learner_uses_the_schema_truncation_as_terminal():
    cfg = compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 2}}})
    assert cfg.policy.learn.truncation_as_terminal is True                  # the schema's value
    bare = {'policy': {'discount_factor': 0.97, 'learn': {'learning_rate': 1e-3}}}
    net = torch.nn.Linear(4, 2)
    assert DQNLearner(net, bare).truncation_as_terminal is DQNPolicy(cfg).learn_mode.truncation_as_terminal


def test_a_complete_config_is_used_as_it_is_and_a_partial_one_is_not_modified():
    cfg = compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 2}}})
    assert DQNPolicy(cfg).cfg is cfg.policy
    partial = {'policy': {'learn': {'batch_size': 8}}}
    section = policy_config(partial, DQNPolicy.config_schema)
    assert partial == {'policy': {'learn': {'batch_size': 8}}}
    assert section['learn']['batch_size'] == 8 and section['learn']['truncation_as_terminal'] is True


class Recording(dict):
    """A config section that notes the dotted path of every key read from it."""

    def __init__(self, data, reads, prefix=''):
        super().__init__({k: Recording(v, reads, f'{prefix}{k}.') if isinstance(v, dict) else v
                          for k, v in data.items()})
        self._reads, self._prefix = reads, prefix

    def __getitem__(self, key):
        self._reads.add(self._prefix + str(key))
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._reads.add(self._prefix + str(key))
        return super().get(key, default)


@pytest.mark.parametrize('name', sorted(BUILD))
def test_every_key_a_policy_reads_is_in_its_schema(name):
    reads = set()
    cfg = compile_config({}, policy=name)
    policy = BUILD[name](Recording(cfg.policy, reads))
    effective(policy)
    schema = get_schema(name)['policy']
    assert reads, 'nothing was read through the recording config'
    missing = []
    for path in sorted(reads):
        try:
            spec_at(schema, path)
        except (KeyError, TypeError):
            missing.append(path)
    assert not missing, f'{name} reads keys its schema does not declare: {missing}'
    leaves = {p for p, s in iter_specs(schema) if isinstance(s, Spec)}
    assert reads & leaves


def test_a_missing_key_a_middleware_reads_is_one_line_naming_it():
    from middleware.onpolicy import gae_estimator

    bare = {'policy': {'discount_factor': 0.99, 'gae_lambda': 0.95, 'learn': {}}}
    with pytest.raises(MissingConfigKey) as e:
        gae_estimator(bare)
    msg = str(e.value)
    assert '\n' not in msg and 'policy.learn.normalize_reward' in msg and 'compile_config' in msg
    assert config_value({'a': {'b': 3}}, 'a.b', 'dqn') == 3
    with pytest.raises(KeyError):  # still a KeyError for callers that catch one
        config_value({'a': 1}, 'a.b', 'dqn')
