"""Noisy linear layers (Fortunato et al., 2018, "Noisy Networks for Exploration"), factorised noise.

A :class:`NoisyLinear` computes ``y = x (mu_W + sigma_W * eps_W)^T + mu_b + sigma_b * eps_b`` with
learned ``mu`` and ``sigma`` and factorised Gaussian noise ``eps_W = f(eps_out) f(eps_in)^T``,
``eps_b = f(eps_out)``, ``f(v) = sign(v) sqrt(|v|)`` (the variant Rainbow and data-efficient Rainbow
use). Fresh noise is drawn from torch's global generator on every forward pass while the layer is
noisy, one draw shared by the rows of a batch; the noisy weight matrix is never built: the layer
computes ``x mu_W^T + ((x * f(eps_in)) sigma_W^T) * f(eps_out)``.

Exploration by noise replaces (or adds to) eps-greedy: a Q-network with noisy layers acts with noise
while collecting and learns ``sigma`` by gradient descent. Evaluation uses the mean weights:
:func:`noise_off` turns the noise of every noisy layer in a module off for a ``with`` block (this is
what ``DQNPolicy``'s eval mode does); :func:`has_noise` tells whether a module has noisy layers.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator, List

import torch
from torch import nn

__all__ = ['NoisyLinear', 'noisy_layers', 'has_noise', 'noise_off']


def _scaled_noise(n: int, like: torch.Tensor) -> torch.Tensor:
    v = torch.randn(n, dtype=like.dtype, device=like.device)
    return v.sign() * v.abs().sqrt()


class NoisyLinear(nn.Module):
    """A linear layer with factorised Gaussian noise on its weights and bias.

    Args:
        in_features, out_features: as ``nn.Linear``.
        sigma0: initial noise scale; ``sigma`` starts at ``sigma0 / sqrt(in_features)`` (0.5 in Rainbow,
            0.1 in data-efficient Rainbow).
        bias: learn a bias (with its own noise).

    ``self.noisy`` (True) switches the noise; with it off the layer is ``nn.Linear`` with ``mu``.
    """

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5, bias: bool = True) -> None:
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f'NoisyLinear needs in_features >= 1 and out_features >= 1, got {in_features}, '
                             f'{out_features}')
        if not sigma0 > 0:
            raise ValueError(f'NoisyLinear needs sigma0 > 0 (0.5 in Rainbow, 0.1 in DER), got {sigma0}')
        self.in_features, self.out_features, self.sigma0 = int(in_features), int(out_features), float(sigma0)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        if bias:
            self.bias_mu = nn.Parameter(torch.empty(out_features))
            self.bias_sigma = nn.Parameter(torch.empty(out_features))
        else:
            self.register_parameter('bias_mu', None)
            self.register_parameter('bias_sigma', None)
        self.noisy = True
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``mu ~ U(-1/sqrt(in), 1/sqrt(in))``, ``sigma = sigma0 / sqrt(in)`` (Fortunato et al., factorised)."""
        bound = 1.0 / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(self.sigma0 * bound)
            if self.bias_mu is not None:
                self.bias_mu.uniform_(-bound, bound)
                self.bias_sigma.fill_(self.sigma0 * bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.linear(x, self.weight_mu, self.bias_mu)
        if not self.noisy:
            return y
        eps_in = _scaled_noise(self.in_features, self.weight_mu)
        eps_out = _scaled_noise(self.out_features, self.weight_mu)
        y = y + nn.functional.linear(x * eps_in, self.weight_sigma) * eps_out
        if self.bias_sigma is not None:
            y = y + self.bias_sigma * eps_out
        return y

    def extra_repr(self) -> str:
        return (f'in_features={self.in_features}, out_features={self.out_features}, sigma0={self.sigma0}, '
                f'bias={self.bias_mu is not None}, noisy={self.noisy}')


def noisy_layers(module: nn.Module) -> List[NoisyLinear]:
    """Every :class:`NoisyLinear` in ``module`` (itself included)."""
    return [m for m in module.modules() if isinstance(m, NoisyLinear)]


def has_noise(module: nn.Module) -> bool:
    """Whether ``module`` holds a :class:`NoisyLinear`."""
    return any(isinstance(m, NoisyLinear) for m in module.modules())


@contextlib.contextmanager
def noise_off(module: nn.Module) -> Iterator[nn.Module]:
    """``with noise_off(model): ...``: the noisy layers of ``module`` use their mean weights inside
    the block, and are set back as they were after it (also on an exception)."""
    layers = noisy_layers(module)
    before = [m.noisy for m in layers]
    for m in layers:
        m.noisy = False
    try:
        yield module
    finally:
        for m, was in zip(layers, before):
            m.noisy = was
