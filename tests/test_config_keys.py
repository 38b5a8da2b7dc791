"""Finding the right config key (issue 48, part 2): a leaf name that exists deeper in the tree (or under
Stable-Baselines3's name) is answered with its full key, and every entry point prints every key with its default,
type and range: the examples' ``--list-config`` (their own settings as defaults, no torch loaded, exit 0) and
``agents.<Algo>.describe_config()``."""
import os
import subprocess
import sys

import pytest

from pipeline.config import check_user_config, config_table, find_keys, format_config_table
from pipeline.config.policy_schemas import DQN_CONFIG
from pipeline.config.schema import defaults

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: every example whose parser is example_parser (add_env_flags too), with its policy
EXAMPLES = {'dqn_cartpole': 'DQN', 'her_bitflip': 'DQN', 'her_point': 'SAC', 'dqn_rnd': 'DQN', 'ppo_cartpole': 'PPO',
            'ppo_pendulum': 'PPO', 'ppo_mujoco': 'PPO', 'dqn_atari': 'DQN', 'ppo_atari': 'PPO', 'sac_mujoco': 'SAC'}


@pytest.mark.parametrize('user, policy, meant', [
    ({'learning_rate': 1e-3}, 'dqn', "learning_rate: unknown key (did you mean 'policy.learn.learning_rate'?)"),
    ({'policy': {'learning_rate': 1e-3}}, 'ppo', "(did you mean 'policy.learn.learning_rate'?)"),
    ({'batchsize': 32}, 'dqn', "(did you mean 'policy.learn.batch_size'?)"),
    ({'learn': {'n_epochs': 3}}, 'ppo', "learn: unknown key (did you mean 'policy.learn'?)"),
    ({'replay_buffer_size': 10}, 'sac', "'policy.other.replay_buffer.replay_buffer_size'"),
    ({'gamma': 0.9}, 'ppo', "(did you mean 'policy.discount_factor'? that is Stable-Baselines3's 'gamma')"),
    ({'target_update_interval': 9}, 'dqn', "'policy.learn.target_update_freq'? that is Stable-Baselines3's "
                                           "'target_update_interval', in train iterations, not env steps"),
    ({'policy': {'learn': {'learnig_rate': 1}}}, 'dqn', "learnig_rate: unknown key (did you mean 'learning_rate'"),
])
def test_a_leaf_name_is_answered_with_its_full_key(user, policy, meant):
    problems = check_user_config(user, policy)
    assert len(problems) == 1 and meant in problems[0], problems


def test_find_keys_prefers_keys_under_where_the_name_was_written():
    tree = defaults(DQN_CONFIG)
    assert find_keys(tree, 'learning_rate') == (['policy.learn.learning_rate'], '')
    assert find_keys(tree, 'eval_freq', 'policy.') == (['policy.eval.evaluator.eval_freq'], '')
    assert find_keys(tree, 'zzz') == ([], '')


@pytest.mark.multiprocess
def test_set_with_a_bare_leaf_names_the_full_key_and_exits_2(tmp_path):
    p = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'dqn_cartpole.py'), '--set',
                        'learning_rate=1e-3'], capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 2 and p.stderr.strip() == (
        "error: learning_rate: unknown key (did you mean 'policy.learn.learning_rate'?)"), p.stderr
    assert not os.listdir(tmp_path)


def _list_config(name, *argv):
    """``python examples/NAME.py --list-config ARGV`` in a fresh interpreter: (exit status, stdout, torch loaded)."""
    script = os.path.join(ROOT, 'examples', f'{name}.py')
    code = ('import runpy, sys\n'
            f'sys.argv = [{script!r}, "--list-config", *{list(argv)!r}]\n'
            'try:\n'
            f'    runpy.run_path({script!r}, run_name="__main__")\n'
            'except SystemExit as e:\n'
            '    code = e.code\n'
            'else:\n'
            '    code = "no exit"\n'
            'print("EXIT", code, "TORCH" if "torch" in sys.modules else "NO-TORCH")\n')
    p = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert p.returncode == 0, p.stderr
    *lines, last = p.stdout.strip().splitlines()
    return last, lines, p.stderr


def _values(lines):
    return {line.split()[0]: line.split()[1] for line in lines[2:]}


@pytest.mark.multiprocess
@pytest.mark.parametrize('name', sorted(EXAMPLES))
def test_every_example_lists_every_key_with_its_own_defaults_and_exits_0(name):
    last, lines, err = _list_config(name)
    assert last in ('EXIT 0 NO-TORCH', 'EXIT None NO-TORCH'), (last, err[-500:])
    assert lines[0].startswith(f'# every {EXAMPLES[name]} config key of this run') and lines[1].split() == [
        'key', 'default', 'allowed']
    values = _values(lines)
    schema_keys = [k for k, _, _ in config_table(EXAMPLES[name].lower())]
    assert list(values) == schema_keys  # every key, in the schema's order
    assert "'" in values['env.env_id'] and values['seed'] == '0'


@pytest.mark.multiprocess
def test_the_listed_default_is_what_the_example_uses():
    from pipeline.run.recipes import DQN_CARTPOLE

    _, lines, _ = _list_config('dqn_cartpole')
    values = _values(lines)
    assert values['policy.learn.learning_rate'] == repr(DQN_CARTPOLE['policy']['learn']['learning_rate'])
    assert values['policy.learn.learning_rate'] != repr(DQN_CONFIG['policy']['learn']['learning_rate'].default)
    assert values['env.env_id'] == "'CartPole-v1'" and values['policy.other.replay_buffer.priority'] == 'False'
    _, lines, _ = _list_config('dqn_cartpole', '--per', '--seed', '3', '--set', 'policy.learn.batch_size=32')
    values = _values(lines)
    assert (values['policy.other.replay_buffer.priority'], values['seed'], values['policy.learn.batch_size']) == (
        'True', '3', '32')
    _, lines, _ = _list_config('ppo_mujoco', '--env', 'HalfCheetah-v5')
    assert _values(lines)['policy.collect.n_steps'] == '2048'  # the example's defaults for other MuJoCo ids
    assert 'an int >= 1' in [line for line in lines if line.startswith('policy.collect.n_steps')][0]
    last, _, err = _list_config('dqn_cartpole', '--set', 'learning_rate=1')
    assert last == 'EXIT 2 NO-TORCH' and "did you mean 'policy.learn.learning_rate'" in err


@pytest.mark.parametrize('cls, key, value', [('DQN', 'policy.learn.learning_rate', '0.0025'),
                                             ('PPO', 'policy.collect.n_steps', '32'),
                                             ('SAC', 'env.env_id', "'Pendulum-v1'")])
def test_the_agents_describe_their_config(cls, key, value):
    from pipeline.run import agents

    agent = getattr(agents, cls)
    lines = agent.describe_config().splitlines()
    assert lines[0].startswith(f'# agents.{cls}: every config key') and lines[1].split() == ['key', 'default',
                                                                                              'allowed']
    row = [line.split(None, 2) for line in lines if line.startswith(key + ' ')][0]
    assert row[1] == value and row[2]
    assert len(lines) - 2 == len(config_table(agent.algo))
    over = agent.describe_config({'seed': 7}).splitlines()
    assert [line.split()[1] for line in over if line.startswith('seed ')] == ['7']


def test_the_table_is_aligned_text():
    text = format_config_table([('a.b', 1, 'an int'), ('c', 'x', 'a str')], '# h')
    assert text.splitlines() == ['# h', 'key  default  allowed', 'a.b  1        an int', "c    'x'      a str"]
