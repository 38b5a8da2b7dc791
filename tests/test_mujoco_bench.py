"""benchmarks/mujoco_vs_sb3.py: smoke runs of each framework write results that report.py reads."""
import importlib.util
import json
import math
import os
import re

import pytest

pytestmark = pytest.mark.bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: an absolute path of a machine (issue 47: stored results are portable)
ABSOLUTE = re.compile(r'"/|[ =]/(?:work|tmp|home|root|Users|var|opt)/')
needs_mujoco = pytest.mark.skipif(importlib.util.find_spec('mujoco') is None,
                                  reason="mujoco not installed (pip install 'rlpipe[mujoco]')")
needs_sb3 = pytest.mark.skipif(importlib.util.find_spec('stable_baselines3') is None,
                               reason="stable-baselines3 not installed (pip install -e '.[bench]')")


def _load():
    spec = importlib.util.spec_from_file_location('mujoco_vs_sb3', os.path.join(ROOT, 'benchmarks', 'mujoco_vs_sb3.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(r, algo, framework, steps):
    assert r['algo'] == algo and r['env'] == 'Hopper-v5' and r['seed'] == 1 and r['framework'] == framework
    assert r['smoke'] and r['env_steps'] == steps and r['eval_episodes'] == 2 and len(r['returns']) == 2
    assert math.isfinite(r['final_return']) and r['final_return'] == pytest.approx(sum(r['returns']) / 2)
    assert r['wall'] > 0 and r['cpu_s'] > 0 and r['versions']['torch'] != 'missing'
    xs = [p[0] for p in r['curve']['points']]
    assert xs and xs == sorted(xs) and xs[-1] <= steps
    assert not ABSOLUTE.search(json.dumps(r)), 'a result names an absolute path of the machine that ran it'
    assert re.fullmatch('[0-9a-f]{64}', r['weights_sha256'])


def assert_matches_golden(r, algo):
    """A smoke result ``r`` (Hopper-v5 seed 1) follows the learning path stored in
    ``tests/golden/mujoco_smoke_<algo>_Hopper-v5_seed1.json``: the same evaluation returns and learning curve.
    The stored full runs are only what they claim if the code still takes the path they ran."""
    with open(os.path.join(ROOT, 'tests', 'golden', f'mujoco_smoke_{algo}_Hopper-v5_seed1.json')) as f:
        golden = json.load(f)
    why = f'{algo} no longer follows the learning path of its stored results: see the golden file\'s "about"'
    assert r['returns'] == pytest.approx(golden['returns'], rel=1e-6), why
    flat = [v for point in r['curve']['points'] for v in point]
    assert flat == pytest.approx([v for point in golden['curve'] for v in point], rel=1e-6), why


@pytest.mark.multiprocess
@pytest.mark.slow
@needs_mujoco
@needs_sb3
@pytest.mark.timeout(240)
def test_sac_smoke_of_both_frameworks(tmp_path):
    bench = _load()
    assert bench.main(['--algo', 'sac', '--env', 'Hopper-v5', '--seed', '1', '--smoke', '--with-sb3',
                       '--out', str(tmp_path)]) == 0
    digests = []
    for fw in ('rlpipe', 'sb3'):
        with open(tmp_path / f'sac_Hopper-v5_{fw}_seed1.json') as f:
            r = json.load(f)
        _check(r, 'sac', fw, 1000)
        assert r['settings']['random_steps'] == 300 and r['settings']['hidden'] == [256, 256]
        digests.append(r['weights_sha256'])
        if fw == 'rlpipe':
            assert_matches_golden(r, 'sac')
    assert digests[0] != digests[1]     # each framework's own trained weights
    with open(tmp_path / 'sac_Hopper-v5_rlpipe_seed1.json') as f:
        cfg = json.load(f)['rlpipe_config']['config']['policy']
    assert cfg['learn']['learning_starts'] == 300 and cfg['collect']['random_collect_size'] == 300
    assert cfg['model']['actor_hidden_size_list'] == [256, 256]


@needs_mujoco
@pytest.mark.timeout(180)
def test_ppo_smoke_runs_with_the_rl_zoo_settings(tmp_path):
    bench = _load()
    assert bench.main(['--algo', 'ppo', '--env', 'Hopper-v5', '--seed', '1', '--smoke', '--out', str(tmp_path)]) == 0
    with open(tmp_path / 'ppo_Hopper-v5_rlpipe_seed1.json') as f:
        r = json.load(f)
    _check(r, 'ppo', 'rlpipe', 2048)
    assert_matches_golden(r, 'ppo')
    cfg = r['rlpipe_config']['config']['policy']
    assert cfg['model'] == {'hidden': [256, 256], 'log_std_init': -2.0, 'normalize_obs': True, 'activation': 'relu',
                            'ortho_init': False}
    assert (cfg['discount_factor'], cfg['gae_lambda'], cfg['collect']['n_steps']) == (0.999, 0.99, 512)
    learn = cfg['learn']
    assert (learn['batch_size'], learn['n_epochs'], learn['lr_schedule'], learn['normalize_reward']) == (
        32, 5, 'constant', True)


def test_bad_eval_episodes_is_one_line():
    bench = _load()
    with pytest.raises(SystemExit, match='--eval-episodes must be >= 1'):
        bench.main(['--eval-episodes', '0'])


def test_no_stored_result_names_an_absolute_path():
    """Issue 47: the stored results (every benchmark's JSON) name no folder of the machine that ran them; the
    benchmark writes the repository-relative script and ``<workdir>`` for its temporary folder."""
    found = []
    walks = [os.walk(os.path.join(ROOT, *d)) for d in (('benchmarks', 'results'), ('benchmarks', 'experiments'))]
    for folder, _, files in (w for walk in walks for w in walk):
        for name in files:
            if name.endswith('.json'):
                with open(os.path.join(folder, name)) as f:
                    m = ABSOLUTE.search(f.read())
                if m:
                    found.append(f'{name}: ...{m.group(0)}...')
    assert found == [], found
    mod = _load()
    assert mod.portable({'command': f'{ROOT}/examples/x.py --exp-name /tmp/abc/run', 'n': [1, '/tmp/abc/y']},
                        '/tmp/abc') == {'command': 'examples/x.py --exp-name <workdir>/run', 'n': [1, '<workdir>/y']}


def test_the_weights_digest_is_of_every_byte_in_order():
    """``run_facts.weights_sha256``: the SHA-256 of the tensors' bytes in the order given (the Atari results'
    digest since the first run), so one changed weight or a swapped order gives another digest."""
    import hashlib

    import torch

    spec = importlib.util.spec_from_file_location('run_facts', os.path.join(ROOT, 'benchmarks', 'run_facts.py'))
    run_facts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_facts)
    a, b = torch.arange(6.0).reshape(2, 3), torch.ones(4, requires_grad=True)
    want = hashlib.sha256(a.numpy().tobytes() + b.detach().numpy().tobytes()).hexdigest()
    assert run_facts.weights_sha256([a, b]) == want == run_facts.weights_sha256([a.t().contiguous().t(), b])
    assert run_facts.weights_sha256([b, a]) != want
    a[1, 2] += 1e-6
    assert run_facts.weights_sha256([a, b]) != want


@needs_sb3
@needs_mujoco
def test_sb3_curve_evaluations_are_seeded_by_the_run_seed():
    """A rerun of an SB3 SAC run evaluates the same curve episodes (its reset noise comes from the run's seed)."""
    import numpy as np

    bench = _load()

    def first_observations(seed):
        env = bench.curve_eval_env('Hopper-v5', seed)
        try:
            return np.stack([env.reset()[0] for _ in range(3)])
        finally:
            env.close()

    a, b, other = first_observations(1), first_observations(1), first_observations(2)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[0], a[1])       # later resets go on from the seed, not back to it
    assert not np.array_equal(a, other)
