"""Q-network for DQN: an MLP encoder followed by a plain or dueling head."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Type, Union

import torch
from torch import nn

__all__ = ['DQNModel', 'mlp']


def mlp(sizes: Sequence[int], activation: Type[nn.Module] = nn.ReLU, last_activation: bool = True,
        layer_norm: bool = False) -> nn.Sequential:
    """``Linear`` layers between consecutive ``sizes`` with ``activation`` after each
    (after the last one too when ``last_activation``); with ``layer_norm`` a ``LayerNorm`` comes
    between each such ``Linear`` and its activation."""
    layers: List[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_activation:
            if layer_norm:
                layers.append(nn.LayerNorm(sizes[i + 1]))
            layers.append(activation())
    return nn.Sequential(*layers)


class DQNModel(nn.Module):
    """Maps a batch of observations ``[B, *obs_shape]`` to Q-values ``[B, action_shape]``.

    Args:
        obs_shape: int or shape of one observation (flattened for the MLP).
        action_shape: number of discrete actions.
        encoder_hidden_size_list: encoder layer sizes, e.g. ``[128, 128, 64]``.
        dueling: dueling head (``Q = V + A - mean(A)``) instead of a plain linear head.
        head_hidden_size: hidden size of the head (default: the last encoder size).
        head_layer_num: hidden layers in each head branch before the output layer.
        activation: activation class.
        layer_norm: a ``LayerNorm`` before every hidden activation (encoder and head branches).
            It keeps TD learning stable with fast target updates and many updates per env step
            (``examples/dqn_cartpole.py`` uses it).

    With the defaults this is DI-engine's CartPole Q-net: 4 -> 128 -> 128 -> 64, then advantage
    and value branches 64 -> 64 -> out.
    """

    def __init__(self, obs_shape: Union[int, Sequence[int]], action_shape: int,
                 encoder_hidden_size_list: Sequence[int] = (128, 128, 64), dueling: bool = True,
                 head_hidden_size: Optional[int] = None, head_layer_num: int = 1,
                 activation: Type[nn.Module] = nn.ReLU, layer_norm: bool = False) -> None:
        super().__init__()
        obs_dim = obs_shape if isinstance(obs_shape, int) else int(math.prod(obs_shape))
        if obs_dim < 1 or not isinstance(action_shape, int) or action_shape < 1:
            raise ValueError(f'DQNModel needs obs_shape >= 1 and an int action_shape >= 1; got '
                             f'obs_shape={obs_shape!r}, action_shape={action_shape!r}')
        if not encoder_hidden_size_list:
            raise ValueError('encoder_hidden_size_list must name at least one layer, e.g. [128, 128, 64]')
        self.obs_dim = obs_dim
        self.action_shape = action_shape
        self.dueling = dueling
        self.encoder = mlp([obs_dim, *encoder_hidden_size_list], activation, layer_norm=layer_norm)
        feat = encoder_hidden_size_list[-1]
        hidden = head_hidden_size or feat
        branch = [feat] + [hidden] * head_layer_num
        if dueling:
            self.adv = nn.Sequential(mlp(branch, activation, layer_norm=layer_norm), nn.Linear(branch[-1], action_shape))
            self.value = nn.Sequential(mlp(branch, activation, layer_norm=layer_norm), nn.Linear(branch[-1], 1))
        else:
            self.head = nn.Sequential(mlp(branch, activation, layer_norm=layer_norm),
                                      nn.Linear(branch[-1], action_shape))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, action_shape]`` for observations ``[B, *obs_shape]``."""
        if obs.dim() > 2:
            obs = obs.flatten(1)
        x = self.encoder(obs)
        if self.dueling:
            a = self.adv(x)
            return self.value(x) + a - a.mean(dim=-1, keepdim=True)
        return self.head(x)
