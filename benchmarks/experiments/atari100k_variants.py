"""Atari-100k with an agent the lab tried beside the table's: ``benchmarks/atari100k.py`` with one of these.

    python benchmarks/experiments/atari100k_variants.py --game Freeway --seed 0 --agent drq_eps_noisy
    python benchmarks/experiments/atari100k_variants.py --game Pong --seed 3 --smoke --agent drq_eps --out /tmp/res

Every flag is ``benchmarks/atari100k.py``'s (protocol, checkpoints, the result's fields: its docstring);
``--agent`` is required and picks one of :data:`VARIANTS`, whose results go to
``benchmarks/experiments/results/atari100k-<agent>/``. The candidates for the table among them
(``benchmarks/report.py``'s ``CANDIDATE_AGENTS``) have their runs on docs/benchmarks.md; what each one scored
and why it lost: benchmarks/experiments/NOTES.md.

- ``drq_eps``: the table agent's DrQ(eps) settings on data-efficient Rainbow's encoder (two 5x5 stride-5
  convs, 256 hidden units per dueling branch); the table's agent until 2026-12-03.
- ``drq_eps_noisy``: ``drq_eps`` with a noisy-net dueling head (``NoisyLinear``, sigma0 0.1 as in
  data-efficient Rainbow): fresh noise on every forward pass while collecting and learning, the mean
  weights in the final evaluation.
- ``drq_eps_nature``: the network of Dopamine's DrQ(eps) config at full width (convs 32/64/64, 512 features).
- ``drq_eps_narrow_xavier``: the table agent initialised as Dopamine's networks are (Xavier-uniform weights,
  zero biases).
- ``drq_eps_narrow_ez``: the table agent exploring with temporally-extended eps-greedy ("ez-greedy", Dabney et
  al. 2021; ``policy.other.eps.repeat_exponent``): an exploratory action is held for n ~ zeta(2) steps, at
  most 100. A candidate for Freeway, where eps-greedy's single random steps rarely get the chicken across.
- ``drq_eps_narrow_ez_decay``: ``drq_eps_narrow_ez`` whose holds start only while eps is above 0.02
  (``policy.other.eps.repeat_min_eps``), i.e. during the warm-up and the decay (agent steps 0-6,550); eps-greedy,
  as the table agent, after it.
- ``drq_eps_narrow_ez_warmup``: ``drq_eps_narrow_ez`` whose holds start only while eps is above 0.99, i.e. in
  the uniform-random warm-up and the first ~50 steps of the decay (agent steps 0-1,650).
- ``drq_eps_narrow_reset``: the table agent whose last layers (the value and advantage branches) are
  re-initialised, with fresh Adam moments, every 20,000 updates (``middleware.reset.PeriodicReset``): resets
  against the primacy bias (Nikishin et al. 2022), here at replay ratio 1. Smoke runs reset every 100 updates.
- ``drq_eps_narrow_intensity``: the table agent with Dopamine's DrQ(eps) intensity augmentation after the shift:
  every image of obs and next obs in a batch multiplied by 1 + 0.05 clip(N(0, 1), -2, 2)
  (``pipeline.data.augment.RandomIntensity``).
- ``drq_eps_narrow_same``: the table agent's network with Dopamine's SAME padding (an 11x11 final grid, 3,872
  features into the 256-unit layer, where the table agent's VALID convs end at 7x7 and 1,568), run in
  channels-last memory format for speed. A diagnostic for Pong: its updates cost more than the 45-minute budget
  allows.
- ``drq_eps_narrow_same_bf16``: ``drq_eps_narrow_same`` with its convs and feature layer in bfloat16 mixed precision
  (``NatureCNN(..., bfloat16=True)``): on a CPU with AVX-512 BF16 its update costs about the table agent's.
- ``drq_eps_narrow_same_bf16_ez_warmup``: ``drq_eps_narrow_same_bf16`` exploring as ``drq_eps_narrow_ez_warmup``
  does (ez-greedy holds only in the warm-up): the bfloat16 SAME-padding network with the warm-up's exploration.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import atari100k  # noqa: E402  (after ROOT is on sys.path)

#: Results of ``--agent <agent>`` go to ``RESULTS_DIR + '-<agent>'``.
RESULTS_DIR = os.path.join(ROOT, 'benchmarks', 'experiments', 'results', 'atari100k')

_TABLE = atari100k.AGENTS[atari100k.TABLE_AGENT]
#: DrQ(eps)'s settings on the DER encoder: the table agent without its encoder's settings.
DRQ_EPS: Dict[str, Any] = dict({k: v for k, v in _TABLE.items() if k not in ('encoder_channels', 'feature_dim', 'hidden')},
                               encoder='der')

#: ``drq_eps_narrow_ez_warmup``'s exploration: ez-greedy holds that start only while eps is above 0.99.
_EZ_WARMUP: Dict[str, Any] = dict(eps_repeat_exponent=2.0, eps_repeat_max=100, eps_repeat_min_eps=0.99)
#: ``drq_eps_narrow_same_bf16``'s network: SAME padding, channels-last, convs and feature layer in bfloat16.
_SAME_BF16: Dict[str, Any] = dict(padding='same', channels_last=True, bfloat16=True)

#: The lab's agents: settings and the name their results carry.
VARIANTS: Dict[str, Dict[str, Any]] = {
    'drq_eps': DRQ_EPS,
    'drq_eps_noisy': dict(DRQ_EPS, noisy_std=0.1),
    'drq_eps_nature': dict(DRQ_EPS, encoder='nature', feature_dim=512, hidden=0),
    'drq_eps_narrow_xavier': dict(_TABLE, init='xavier'),
    'drq_eps_narrow_ez': dict(_TABLE, eps_repeat_exponent=2.0, eps_repeat_max=100),
    'drq_eps_narrow_ez_decay': dict(_TABLE, eps_repeat_exponent=2.0, eps_repeat_max=100, eps_repeat_min_eps=0.02),
    'drq_eps_narrow_ez_warmup': dict(_TABLE, **_EZ_WARMUP),
    'drq_eps_narrow_reset': dict(_TABLE, reset_every=20_000, reset_layers=['adv', 'value']),
    'drq_eps_narrow_intensity': dict(_TABLE, intensity_scale=0.05),
    'drq_eps_narrow_same': dict(_TABLE, padding='same', channels_last=True),
    'drq_eps_narrow_same_bf16': dict(_TABLE, **_SAME_BF16),
    'drq_eps_narrow_same_bf16_ez_warmup': dict(_TABLE, **_SAME_BF16, **_EZ_WARMUP),
}
VARIANT_NAMES: Dict[str, str] = {
    'drq_eps': 'DrQ(eps)', 'drq_eps_noisy': 'DrQ(eps) + noisy head',
    'drq_eps_nature': 'DrQ(eps) on the Nature encoder',
    'drq_eps_narrow_xavier': 'DrQ(eps) on the half-width Nature encoder, Xavier init',
    'drq_eps_narrow_ez': 'DrQ(eps) on the half-width Nature encoder, ez-greedy',
    'drq_eps_narrow_ez_decay': 'DrQ(eps) on the half-width Nature encoder, ez-greedy while eps decays',
    'drq_eps_narrow_ez_warmup': 'DrQ(eps) on the half-width Nature encoder, ez-greedy in the warm-up',
    'drq_eps_narrow_reset': 'DrQ(eps) on the half-width Nature encoder, last layers reset every 20k updates',
    'drq_eps_narrow_intensity': 'DrQ(eps) on the half-width Nature encoder, shift and intensity augmentation',
    'drq_eps_narrow_same': 'DrQ(eps) on the half-width Nature encoder with SAME padding',
    'drq_eps_narrow_same_bf16': 'DrQ(eps) on the half-width Nature encoder with SAME padding, bfloat16 encoder',
    'drq_eps_narrow_same_bf16_ez_warmup': 'DrQ(eps) on the half-width Nature encoder with SAME padding, bfloat16 '
                                          'encoder, ez-greedy in the warm-up',
}


def register() -> None:
    """Add :data:`VARIANTS` to ``benchmarks/atari100k.py``'s ``AGENTS`` (and their names to ``AGENT_NAMES``)."""
    atari100k.AGENTS.update(VARIANTS)
    atari100k.AGENT_NAMES.update(VARIANT_NAMES)


def build_parser() -> argparse.ArgumentParser:
    """``benchmarks/atari100k.py``'s command line, ``--agent`` one of :data:`VARIANTS` (required)."""
    return atari100k.build_parser(agents=sorted(VARIANTS), default_agent=None, results_root=RESULTS_DIR, doc=__doc__,
                                  script='benchmarks/experiments/atari100k_variants.py')


def main(argv: Optional[List[str]] = None) -> int:
    register()
    return atari100k.main(argv, parser=build_parser())


if __name__ == '__main__':
    sys.exit(main())
