"""The one place a policy (or a learner) gets the config values its config does not set: its schema.

A config made by ``pipeline.config.compile_config`` (or ``merge_config`` over a policy's default config)
holds every key of the policy's schema, so :func:`policy_config` returns its ``policy`` section as it is.
A config written by hand (a dict with some keys, e.g. in a test or a script) gets the schema's default
(:mod:`pipeline.config.policy_schemas`, :mod:`pipeline.offline.schemas`) for every key it lacks, so a policy
behaves the same whether or not its config went through the schema: policies and learners then read
``cfg[key]``, never ``cfg.get(key, default)`` with a second default that could disagree.

Middleware that reads a policy's keys from a config it cannot fill (it does not know the policy) uses
:func:`config_value`: a missing key is one line naming the key and how to get a complete config.
"""
from __future__ import annotations

import copy
from typing import Any, Dict, Mapping

from easydict import EasyDict

from ..config.schema import Spec, defaults

__all__ = ['MissingConfigKey', 'policy_config', 'with_defaults', 'config_value']


class MissingConfigKey(KeyError):
    """A config lacks a key that is read: the message (one line) names the key and what to do."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0]) if self.args else ''


def _lacks(schema: Mapping, cfg: Mapping) -> bool:
    """Whether ``cfg`` lacks a key (at any depth) that ``schema`` declares."""
    for key, node in schema.items():
        if key not in cfg:
            return True
        if not isinstance(node, Spec) and isinstance(cfg[key], Mapping) and _lacks(node, cfg[key]):
            return True
    return False


def _filled(schema: Mapping, cfg: Mapping) -> Dict[str, object]:
    out = dict(cfg)
    for key, node in schema.items():
        if key not in out:
            out[key] = copy.deepcopy(node.default) if isinstance(node, Spec) else defaults(node)
        elif not isinstance(node, Spec) and isinstance(out[key], Mapping):
            out[key] = _filled(node, out[key])
    return out


def with_defaults(schema: Mapping, cfg: Mapping) -> Mapping:
    """``cfg`` with the default of every key ``schema`` declares and ``cfg`` lacks (recursively).

    ``cfg`` itself when it lacks none (a config from ``compile_config``); else a new ``EasyDict`` (``cfg`` is
    not modified). Values are not checked: ``compile_config`` does that.
    """
    if not _lacks(schema, cfg):
        return cfg
    return EasyDict(_filled(schema, cfg))


def policy_config(cfg: Mapping, schema: Mapping) -> Mapping:
    """The ``policy`` section of ``cfg`` (a full config or the section itself) with ``schema``'s defaults
    (``schema`` is a full config schema, e.g. ``DQN_CONFIG``) for the keys it lacks."""
    section = cfg['policy'] if 'policy' in cfg else cfg
    if not isinstance(section, Mapping):
        raise MissingConfigKey(f'policy: expected a config section (a mapping), got {type(section).__name__}; '
                               f'build the config with pipeline.config.compile_config(user, policy=...)')
    return with_defaults(schema['policy'], section)


def config_value(cfg: Mapping, path: str, policy: str) -> Any:
    """``cfg`` at the dotted ``path`` (e.g. ``'policy.learn.normalize_reward'``); a :class:`MissingConfigKey`
    naming it, and saying to build the config with ``compile_config(user, policy=policy)``, when it is missing."""
    node: object = cfg
    for part in path.split('.'):
        if not isinstance(node, Mapping) or part not in node:
            raise MissingConfigKey(f'the config has no {path}: build it with pipeline.config.compile_config(user, '
                                   f'policy={policy!r}), which sets every default, or set {path}')
        node = node[part]
    return node
