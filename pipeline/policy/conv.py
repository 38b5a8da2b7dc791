"""The Nature-DQN convolutional encoder (Mnih et al., 2015) and a Q-network on it for Atari.

Inputs are stacked frames ``[B, C, 84, 84]`` of pixel values in 0..255 (uint8 as stored, or the
same values as float: collect modes convert observations to float32 before the model); the encoder
scales them to [0, 1] itself. ``NatureCNN`` is a plain ``nn.Module`` with ``output_dim``, usable by
any policy's model (DQN here; actor-critic heads for PPO take its features the same way).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch
from torch import nn

from .noisy import NoisyLinear
from .ppo_model import ActorCriticModel, RunningMeanStd

__all__ = ['NatureCNN', 'DataEfficientCNN', 'AtariQNetwork', 'AtariActorCritic']


class NatureCNN(nn.Module):
    """Conv 32x8x8/4 -> 64x4x4/2 -> 64x3x3/1 -> Linear ``feature_dim`` (ReLU after each).

    Args:
        in_channels: stacked frames (4).
        feature_dim: size of the output features (512).
        input_hw: frame height and width (84, 84); the flattened conv size follows from it.
        channels: output channels of the three convs ((32, 64, 64); (16, 32, 32) is the same
            network at half width).
        padding: ``'valid'`` (no padding: 84 -> 20 -> 9 -> 7, as in the Nature DQN) or ``'same'``
            (TensorFlow's and JAX's SAME rule, the padding of Dopamine's networks: each conv's output is
            ``ceil(input / stride)``, zeros split evenly with the odd one after: 84 -> 21 -> 11 -> 11).
        channels_last: keep the conv weights and activations in channels-last memory format (NHWC), which
            oneDNN's CPU convolutions run faster; the features are the same up to float rounding.
        bfloat16: run the convs and the feature layer under ``torch.autocast`` in bfloat16 (mixed precision:
            the weights, their gradients and the optimiser stay float32; the products are bfloat16 with float32
            accumulation) and return float32 features. Faster products on a CPU with AVX-512 BF16 (or AMX); on a CPU
            without it oneDNN emulates bfloat16, slower than float32.
    """

    def __init__(self, in_channels: int = 4, feature_dim: int = 512, input_hw: Sequence[int] = (84, 84),
                 channels: Sequence[int] = (32, 64, 64), padding: str = 'valid', channels_last: bool = False,
                 bfloat16: bool = False) -> None:
        super().__init__()
        if in_channels < 1 or feature_dim < 1:
            raise ValueError(f'NatureCNN needs in_channels >= 1 and feature_dim >= 1, got {in_channels}, {feature_dim}')
        channels = tuple(channels)
        if len(channels) != 3 or not all(isinstance(c, int) and c >= 1 for c in channels):
            raise ValueError(f'NatureCNN needs channels = three positive ints (one per conv), got {channels!r}')
        if padding not in ('valid', 'same'):
            raise ValueError(f"NatureCNN's padding must be 'valid' or 'same', got {padding!r}")
        c1, c2, c3 = channels
        self.in_channels = in_channels
        self.output_dim = feature_dim
        self.channels_last = bool(channels_last)
        self.mixed_bfloat16 = bool(bfloat16)  # (not self.bfloat16: that is nn.Module.bfloat16())
        layers: list = []
        hw = tuple(int(n) for n in input_hw)
        for c_in, c_out, k, stride in ((in_channels, c1, 8, 4), (c1, c2, 4, 2), (c2, c3, 3, 1)):
            pad: Tuple[int, int] = (0, 0)
            if padding == 'same':
                (top, bottom), (left, right) = [_same_padding(n, k, stride) for n in hw]
                if (top, left) == (bottom, right):
                    pad = (top, left)                                  # even: the conv pads itself
                else:
                    layers.append(nn.ZeroPad2d((left, right, top, bottom)))
                hw = tuple(-(-n // stride) for n in hw)
            layers += [nn.Conv2d(c_in, c_out, k, stride=stride, padding=pad), nn.ReLU()]
        self.conv = nn.Sequential(*layers, nn.Flatten())
        if self.channels_last:
            for m in self.conv:
                if isinstance(m, nn.Conv2d):
                    m.weight.data = m.weight.data.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            n_flat = self.conv(torch.zeros(1, in_channels, *input_hw)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n_flat, feature_dim), nn.ReLU())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Features ``[B, feature_dim]`` for pixels ``[B, C, H, W]`` in 0..255."""
        if obs.dim() != 4 or obs.shape[1] != self.in_channels:
            raise ValueError(f'NatureCNN expects [B, {self.in_channels}, H, W] frames, got shape {tuple(obs.shape)}')
        x = obs.float() * (1.0 / 255.0)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        if not self.mixed_bfloat16:
            return self.fc(self.conv(x))
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            features = self.fc(self.conv(x))
        return features.float()


def _same_padding(size: int, kernel: int, stride: int) -> Tuple[int, int]:
    """(before, after) zeros for one dimension under the SAME rule: output ``ceil(size / stride)``."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class DataEfficientCNN(nn.Module):
    """The data-efficient Rainbow encoder (van Hasselt et al., 2019): conv 32x5x5/5 -> 64x5x5/5
    (ReLU after each), flattened (64x3x3 = 576 features for 84x84 frames). About a quarter of the
    Nature CNN's multiply-adds, for low-data Atari (Atari-100k) on CPU.

    Args:
        in_channels: stacked frames (4).
        input_hw: frame height and width (84, 84).
    """

    def __init__(self, in_channels: int = 4, input_hw: Sequence[int] = (84, 84)) -> None:
        super().__init__()
        if in_channels < 1:
            raise ValueError(f'DataEfficientCNN needs in_channels >= 1, got {in_channels}')
        self.in_channels = in_channels
        self.conv = nn.Sequential(
            nn.Conv2d(in_channels, 32, 5, stride=5), nn.ReLU(),
            nn.Conv2d(32, 64, 5, stride=5), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            self.output_dim = int(self.conv(torch.zeros(1, in_channels, *input_hw)).shape[1])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Features ``[B, output_dim]`` for pixels ``[B, C, H, W]`` in 0..255."""
        if obs.dim() != 4 or obs.shape[1] != self.in_channels:
            raise ValueError(f'DataEfficientCNN expects [B, {self.in_channels}, H, W] frames, got shape '
                             f'{tuple(obs.shape)}')
        return self.conv(obs.float() * (1.0 / 255.0))


class AtariQNetwork(nn.Module):
    """Q-values ``[B, action_shape]`` from a conv encoder: a linear head (the Nature DQN), or a
    dueling head (``Q = V + A - mean(A)``, one hidden layer of ``hidden`` units per branch).

    ``encoder='nature'``: :class:`NatureCNN` with ``feature_dim`` features and ``encoder_channels``
    conv channels (default (32, 64, 64)); dueling branches' hidden default 512.
    ``padding``, ``channels_last`` and ``bfloat16``: :class:`NatureCNN`'s (``'same'``: Dopamine's 11x11 final
    grid; ``bfloat16``: the encoder in mixed precision, the value and advantage layers in float32).
    ``encoder='der'``: :class:`DataEfficientCNN`; the linear head then has one hidden layer of
    ``hidden`` units too (default 256), as in data-efficient Rainbow; ``feature_dim``,
    ``encoder_channels``, ``padding``, ``channels_last`` and ``bfloat16`` are unused.
    ``hidden=0``: the dueling branches are single linear layers on the encoder's features (Dopamine's
    network: Nature convs -> ``feature_dim`` -> value and advantage).
    ``noisy_std``: the head's linear layers become :class:`~pipeline.policy.noisy.NoisyLinear` with
    this ``sigma0`` (0.5 in Rainbow, 0.1 in data-efficient Rainbow): noisy-net exploration, fresh noise
    on every forward pass; None (default): plain linear layers.
    ``init``: ``'torch'`` (default) keeps PyTorch's default initialisation; ``'xavier'`` sets every conv
    and plain linear layer to Xavier-uniform weights and zero biases (the initialisation of Dopamine's
    JAX networks); noisy layers keep their own.
    """

    def __init__(self, action_shape: int, in_channels: int = 4, dueling: bool = False,
                 feature_dim: int = 512, encoder: str = 'nature', hidden: Optional[int] = None,
                 noisy_std: Optional[float] = None, encoder_channels: Sequence[int] = (32, 64, 64),
                 init: str = 'torch', padding: str = 'valid', channels_last: bool = False,
                 bfloat16: bool = False) -> None:
        super().__init__()
        if init not in ('torch', 'xavier'):
            raise ValueError(f"init must be 'torch' or 'xavier', got {init!r}")
        if not isinstance(action_shape, int) or action_shape < 1:
            raise ValueError(f'action_shape must be a positive int, got {action_shape!r}')
        if encoder not in ('nature', 'der'):
            raise ValueError(f"encoder must be 'nature' or 'der', got {encoder!r}")
        self.action_shape = action_shape
        self.dueling = dueling
        if encoder == 'nature':
            self.encoder: nn.Module = NatureCNN(in_channels, feature_dim, channels=encoder_channels, padding=padding,
                                                channels_last=channels_last, bfloat16=bfloat16)
            hidden = 512 if hidden is None else hidden
        else:
            if padding != 'valid' or channels_last or bfloat16:
                raise ValueError("padding, channels_last and bfloat16 are the Nature encoder's settings; encoder='der' "
                                 "takes none of them (drop them, or use encoder='nature')")
            self.encoder = DataEfficientCNN(in_channels)
            hidden = 256 if hidden is None else hidden
        if not isinstance(hidden, int) or hidden < 0:
            raise ValueError(f'hidden must be an int >= 0 (0: linear dueling branches), got {hidden!r}')
        if noisy_std is not None and not noisy_std > 0:
            raise ValueError(f'noisy_std must be > 0 (or None for plain linear layers), got {noisy_std!r}')
        self.noisy_std = noisy_std

        def linear(n_in: int, n_out: int) -> nn.Module:
            return nn.Linear(n_in, n_out) if noisy_std is None else NoisyLinear(n_in, n_out, sigma0=noisy_std)

        n = self.encoder.output_dim
        if dueling and hidden == 0:
            self.adv = linear(n, action_shape)
            self.value = linear(n, 1)
        elif dueling:
            self.adv = nn.Sequential(linear(n, hidden), nn.ReLU(), linear(hidden, action_shape))
            self.value = nn.Sequential(linear(n, hidden), nn.ReLU(), linear(hidden, 1))
        elif encoder == 'nature' or hidden == 0:
            self.head = linear(n, action_shape)
        else:
            self.head = nn.Sequential(linear(n, hidden), nn.ReLU(), linear(hidden, action_shape))
        if init == 'xavier':
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:  # (every layer here has one)
                        nn.init.zeros_(m.bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = self.encoder(obs)
        if self.dueling:
            a = self.adv(x)
            return self.value(x) + a - a.mean(dim=-1, keepdim=True)
        return self.head(x)


class AtariActorCritic(ActorCriticModel):
    """PPO's actor-critic for Atari: one :class:`NatureCNN` trunk shared by a policy head (logits,
    orthogonal init 0.01) and a value head (init 1.0), as in the PPO Atari setups of Stable-Baselines3
    and CleanRL. An ``ActorCriticModel`` (``pipeline.policy.ppo_model``), so ``PPOPolicy(cfg, obs_space, act_space,
    model=...)`` takes it."""

    continuous = False
    obs_norm = None

    def __init__(self, action_dim: int, in_channels: int = 4, feature_dim: int = 512) -> None:
        super().__init__()
        if not isinstance(action_dim, int) or action_dim < 1:
            raise ValueError(f'action_dim must be a positive int, got {action_dim!r}')
        self.action_dim = action_dim
        self.encoder = NatureCNN(in_channels, feature_dim)
        self.pi_head = nn.Linear(feature_dim, action_dim)
        self.v_head = nn.Linear(feature_dim, 1)
        for m in self.encoder.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(m.weight, math.sqrt(2))
                if m.bias is not None:  # (every layer here has one)
                    nn.init.zeros_(m.bias)
        for head, gain in ((self.pi_head, 0.01), (self.v_head, 1.0)):
            nn.init.orthogonal_(head.weight, gain)
            nn.init.zeros_(head.bias)
        self.ret_norm = RunningMeanStd(())

    def forward(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.encoder(obs)
        return self.pi_head(x), self.v_head(x).squeeze(-1)

    def policy_out(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi_head(self.encoder(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v_head(self.encoder(obs)).squeeze(-1)
