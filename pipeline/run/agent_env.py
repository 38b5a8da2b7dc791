"""What the Python agents (:mod:`pipeline.run.agents`) accept as their env, and Stable-Baselines3's habits.

An agent makes several envs of its own (collector and evaluator ``EnvManager`` s, one to play), so what it takes
is a recipe for an env, turned into an :class:`EnvSource` by :func:`env_source`:

- a gymnasium id (``'CartPole-v1'``);
- a gymnasium ``Env`` made by ``gymnasium.make`` from a registered id, a gymnasium ``VectorEnv`` or a
  Stable-Baselines3 ``VecEnv`` of such envs: its ``spec`` gives the id, the ``make`` keyword arguments and the time
  limit (the object itself is not stepped; its ``render_mode`` and a vector env's ``num_envs`` are not used);
- a callable returning an env (a class, a function, a ``lambda``), called once per env.

Anything else (an env without a spec, one wrapped in wrappers a spec cannot repeat) is refused with one line
saying what to pass. :func:`sb3_policy_name` reads SB3's first argument (``'MlpPolicy'``) and
:func:`sb3_keyword_refusal` answers SB3 keywords with this project's call. Imports neither torch nor gymnasium
until an env object is looked at.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, NamedTuple, Optional

from ..config import find_keys
from ..config.policy_schemas import SCHEMAS
from ..config.schema import defaults

if TYPE_CHECKING:  # importing this module does not load gymnasium
    import gymnasium as gym

__all__ = ['EnvSource', 'env_source', 'sb3_policy_name', 'sb3_keyword_refusal', 'RECORDING_WRAPPERS']

#: wrappers that only record (episode statistics): an env's spec may name them; the agents' envs record their own
RECORDING_WRAPPERS = frozenset({'Monitor', 'RecordEpisodeStatistics', 'OrderEnforcing', 'PassiveEnvChecker'})
#: keyword arguments of a vector env's spec that describe the vector, not the env
_VECTOR_KWARGS = ('num_envs', 'vectorization_mode', 'vector_kwargs', 'wrappers')


class EnvSource(NamedTuple):
    """How an agent makes its env: ``env_id`` (the config's ``env.env_id``: a gymnasium id, or for a callable a
    name for it: its env's spec id or class name), ``kwargs`` (for ``gymnasium.make``), ``max_episode_steps``
    (None: the id's own limit) and ``maker`` (the callable the user gave, else None)."""

    env_id: str
    kwargs: Dict[str, object]
    max_episode_steps: Optional[int] = None
    maker: Optional[Callable[[], gym.Env]] = None


class EnvRefusal(ValueError):
    """What an agent cannot take as its env; the message is one line."""


def _name(obj: object) -> str:
    return type(obj).__name__


def _is_sb3_vec_env(obj: object) -> bool:
    return all(hasattr(obj, a) for a in ('num_envs', 'get_attr', 'step_async', 'step_wait', 'env_method'))


def _from_spec(spec: Any, what: str, agent: str) -> EnvSource:
    """The id, ``make`` kwargs and time limit of ``spec`` (a gymnasium ``EnvSpec``) of ``what``."""
    import gymnasium as gym  # lazy: only an env object needs it

    wrappers = [w.name for w in (getattr(spec, 'additional_wrappers', None) or ())
                if w.name not in RECORDING_WRAPPERS]
    if wrappers:
        raise EnvRefusal(f'{what} is wrapped in {", ".join(wrappers)}, which an agent does not repeat when it '
                         f'makes its envs from the spec {spec.id!r}: pass a callable that returns the wrapped env, '
                         f'e.g. agents.{agent}(lambda: {wrappers[-1]}(gym.make({spec.id!r})))')
    kwargs = {k: v for k, v in dict(spec.kwargs or {}).items() if k != 'render_mode' and k not in _VECTOR_KWARGS}
    limit = kwargs.pop('max_episode_steps', None) or spec.max_episode_steps
    registered = gym.registry.get(spec.id)
    if registered is not None and limit == registered.max_episode_steps:
        limit = None  # the id's own limit
    return EnvSource(spec.id, kwargs, limit)


def _refuse_specless(what: str, agent: str, example: str) -> EnvRefusal:
    return EnvRefusal(f'{what} has no spec (it was not made by gymnasium.make from a registered id), and an agent '
                      f'makes several envs of its own: pass the env id, or a callable that returns the env, '
                      f'e.g. agents.{agent}({example})')


def env_source(env: object, agent: str) -> EnvSource:
    """What ``env`` (an id, an env, a vector env or a callable; see the module doc) tells an agent named ``agent``
    (``'DQN'``, for the messages) about making its envs. Raises :class:`EnvRefusal` (one line) otherwise."""
    if isinstance(env, str):
        return EnvSource(env, {})
    if env is None or isinstance(env, (int, float, bool, bytes, Mapping, list, tuple)):
        raise EnvRefusal(f'env must be a gymnasium id (e.g. {"CartPole-v1"!r}), an env made by gymnasium.make, a '
                         f'vectorised env or a callable that returns an env; got {_name(env)} {env!r}')
    gym = _gymnasium_if_loaded(env)
    if gym is not None and isinstance(env, gym.Env):
        if env.spec is None:
            raise _refuse_specless(f'the env {_name(env.unwrapped)}', agent, _name(env.unwrapped))
        return _from_spec(env.spec, f'the env {_name(env.unwrapped)}', agent)
    if gym is not None and isinstance(env, gym.vector.VectorEnv):
        spec = env.spec or _first_spec(env)
        if spec is None:
            raise _refuse_specless(f'the vector env {_name(env)}', agent, 'lambda: MyEnv()')
        return _from_spec(spec, f'the vector env {_name(env)}', agent)
    if _is_sb3_vec_env(env):
        if hasattr(env, 'venv'):  # a VecEnvWrapper (VecNormalize, VecFrameStack, ...): its spec would drop it
            raise EnvRefusal(f'{_name(env)} wraps a vec env, which an agent does not repeat when it makes its '
                             f'envs: pass the env id (the agents\' settings name their own normalisation, '
                             f'e.g. PPO\'s policy.model.normalize_obs) or a callable that returns one env')
        spec = _first_spec(env)
        if spec is None:
            raise _refuse_specless(f'the vec env {_name(env)}', agent, 'lambda: MyEnv()')
        return _from_spec(spec, f'the vec env {_name(env)}', agent)
    if callable(env):
        return EnvSource('', {}, None, env)
    raise EnvRefusal(f'env must be a gymnasium id, an env made by gymnasium.make, a vectorised env or a callable '
                     f'that returns an env; got {_name(env)}')


def _gymnasium_if_loaded(obj: object) -> Any:
    """gymnasium, when ``obj`` could be a gymnasium object (it is loaded then); None for other objects."""
    if 'gymnasium' not in sys.modules:
        return None
    import gymnasium  # here: only once something else loaded it (this module does not)

    return gymnasium


def _first_spec(vec: Any) -> object:
    """The spec of a vector env's first env (``get_attr('spec')``), or None."""
    try:
        specs = vec.get_attr('spec')
    except Exception:  # noqa: BLE001 - any vector env that cannot say: treated as without a spec
        return None
    return specs[0] if specs else None


def maker_name(env: object) -> str:
    """The name an env made by a user's callable goes by in the config (``env.env_id``): its spec's id, else
    its class name (e.g. ``'MyEnv'``)."""
    spec_id = getattr(getattr(env, 'spec', None), 'id', None)
    if spec_id:
        return str(spec_id)
    return _name(getattr(env, 'unwrapped', env))


def time_limit(env: object) -> Optional[int]:
    """The time limit of an env made by a user's callable: its spec's ``max_episode_steps``, else that of a
    ``TimeLimit`` wrapper around it; None when it has none."""
    spec_limit = getattr(getattr(env, 'spec', None), 'max_episode_steps', None)
    if spec_limit:
        return int(spec_limit)
    while env is not None:
        limit = getattr(env, '_max_episode_steps', None)
        if isinstance(limit, int) and limit > 0:
            return limit
        env = getattr(env, 'env', None)
    return None


# ------------------------------------------------------------------ Stable-Baselines3's first argument
#: what to say for SB3 policy names other than 'MlpPolicy' (the agents' networks are MLPs on flat observations)
_OTHER_POLICIES = {
    'CnnPolicy': 'the agents take flat observations; for images (Atari) run examples/dqn_atari.py or '
                 'examples/ppo_atari.py, or drop the name: agents.{agent}(env) trains the MLP',
    'MultiInputPolicy': 'the agents take flat Box observations; flatten a Dict observation space: '
                        'agents.{agent}(lambda: gymnasium.wrappers.FlattenObservation(gymnasium.make(ID)))',
}


def sb3_policy_name(first: object) -> Optional[str]:
    """The Stable-Baselines3 policy name ``first`` gives (``'MlpPolicy'``, or an SB3 policy class's name), or
    None when ``first`` is not one (then it is the env)."""
    if isinstance(first, str):
        return first if first.endswith('Policy') and '-v' not in first and '/' not in first else None
    if isinstance(first, type) and first.__name__.endswith('Policy') and \
            str(getattr(first, '__module__', '')).startswith(('stable_baselines3', 'sb3_contrib')):
        return first.__name__
    return None


def sb3_policy_refusal(name: str, agent: str) -> Optional[str]:
    """None for ``'MlpPolicy'`` (the agents' default network: an MLP), else the one-line answer."""
    if name == 'MlpPolicy':
        return None
    why = _OTHER_POLICIES.get(name, "the agents' network is an MLP: give 'MlpPolicy' or no policy name, "
                                    "agents.{agent}(env)")
    return f'{name!r} is a Stable-Baselines3 policy name: {why.format(agent=agent)}'


# ------------------------------------------------------------------ Stable-Baselines3's keyword arguments
#: SB3 constructor keywords with no config key, and what to do instead ({agent}: the class name)
_SB3_KEYWORDS = {
    'policy_kwargs': 'the network sizes are config keys: {net}',
    'train_freq': "collection is per env step of every collector env: see policy.collect.n_sample and "
                  "policy.learn.update_per_collect (agents.{agent}.describe_config())",
    'create_eval_env': 'the agents evaluate on envs of their own (env.evaluator_env_num, env.n_evaluator_episode)',
    '_init_setup_model': 'the agent is built at once',
    'use_sde': 'no gSDE here',
    'replay_buffer_class': 'the replay buffer is chosen by policy.other.replay_buffer (priority=True: PER)',
    'callback': 'add middleware to a pipeline instead (docs/runtime.md), or call train() in steps',
}


def _nested(path: str, value: object) -> str:
    parts = path.split('.')
    text = repr(value)
    for p in reversed(parts):
        text = f'{{{p!r}: {text}}}'
    return text


def sb3_keyword_refusal(key: str, value: object, agent: str, algo: str, net: str) -> Optional[str]:
    """The one-line answer to a keyword ``key=value`` that ``agents.<agent>(...)`` does not take but
    Stable-Baselines3's constructor does: the config entry that sets it here (found in ``algo``'s schema, e.g.
    ``learning_rate`` -> ``policy.learn.learning_rate``, SB3's ``gamma`` -> ``policy.discount_factor``) or what to
    do instead; None for a keyword neither has (then Python's own TypeError is the answer)."""
    found, note = find_keys(defaults(SCHEMAS[algo]), key) if algo in SCHEMAS else ([], '')
    if found and (note or found[0].rsplit('.', 1)[-1] == key):
        also = f' (or {", ".join(found[1:])})' if len(found) > 1 else ''
        sb3 = f' ({note})' if note else ''
        return (f'agents.{agent}() takes no {key}=...: set the config key {found[0]}{also}{sb3}: agents.{agent}('
                f'env, config={_nested(found[0], value)}) (every key: agents.{agent}.describe_config())')
    if key in _SB3_KEYWORDS:
        return f'agents.{agent}() takes no {key}=... (Stable-Baselines3\'s): {_SB3_KEYWORDS[key].format(agent=agent, net=net)}'
    return None
