"""benchmarks/atari100k.py (a smoke run, Ctrl-C and resume, the golden learning path) and the lab's variants of it
(benchmarks/experiments/atari100k_variants.py). The page's report: tests/test_benchmarks_report.py."""
import importlib.util
import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_ATARI = all(importlib.util.find_spec(m) is not None for m in ('ale_py', 'cv2'))
needs_atari = pytest.mark.skipif(not HAVE_ATARI, reason="ale-py / opencv not installed (pip install 'rlpipe[atari]')")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, 'benchmarks', f'{name}.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def interrupt_at(bench, monkeypatch, step):
    """Make ``bench`` (benchmarks/atari100k.py) raise Ctrl-C's KeyboardInterrupt once a run reaches agent step
    ``step``; returns the function that restores the uninterrupted recorder."""
    orig = bench.CurveRecorder.__call__

    def interrupt(self, ctx):
        orig(self, ctx)
        if ctx.env_step == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(bench.CurveRecorder, '__call__', interrupt)
    return lambda: monkeypatch.setattr(bench.CurveRecorder, '__call__', orig)


@pytest.mark.slow
@needs_atari
@pytest.mark.timeout(180)
def test_smoke_run_writes_a_result(tmp_path):
    bench = _load('atari100k')
    assert bench.main(['--game', 'Pong', '--seed', '0', '--smoke', '--out', str(tmp_path), '--no-progress']) == 0
    with open(tmp_path / 'Pong_seed0.json') as f:
        r = json.load(f)
    assert r['smoke'] and r['game'] == 'Pong' and r['env_id'] == 'ALE/Pong-v5'
    assert r['agent_steps'] == 400 and r['frames'] == 1600
    assert 250 < r['updates'] <= 400 - 100                      # one update per step from step 100
    assert r['eval']['episodes'] == 1 and r['eval']['epsilon'] == 0.001
    assert -21 <= r['eval']['mean'] <= 21 and len(r['eval']['returns']) == 1
    assert r['settings']['nstep'] == 10 and r['settings']['target_update_freq'] == 1
    assert r['wall_s'] > 0 and r['cpu_s'] > 0 and r['versions']['torch'] != 'missing'
    assert r['machine']['cpus'] >= 1 and isinstance(r['curve']['points'], list)
    ph = r['update_phase']
    assert ph['from_step'] >= 100 and ph['steps'] == 400 - ph['from_step'] and ph['cpu_ms_per_step'] > 0
    cpu = r['cpu_curve']['points']                              # training CPU so far, every 100 smoke steps
    assert [s for s, _ in cpu] == [100, 200, 300, 400]
    assert 0 < cpu[0][1] < cpu[1][1] < cpu[2][1] < cpu[3][1] <= r['cpu_s']
    assert r['flush_denormal'] or platform.machine() not in ('x86_64', 'AMD64')  # x86 can flush them
    import torch
    assert torch.tensor([1e-40]).mul(1.0).item() > 0             # the process's default is back after the run
    assert not os.path.exists(tmp_path / 'Pong_seed0.ckpt')


@pytest.mark.slow
@needs_atari
@pytest.mark.timeout(240)
def test_ctrl_c_saves_a_checkpoint_and_the_same_command_resumes(tmp_path, monkeypatch):
    bench = _load('atari100k')
    resume = interrupt_at(bench, monkeypatch, 250)
    argv = ['--game', 'Breakout', '--seed', '1', '--smoke', '--out', str(tmp_path), '--no-progress']
    assert bench.main(argv) == 130
    assert os.path.exists(tmp_path / 'Breakout_seed1.ckpt') and os.path.exists(tmp_path / 'Breakout_seed1.buffer')
    assert not os.path.exists(tmp_path / 'Breakout_seed1.json')
    resume()
    assert bench.main(argv) == 0
    with open(tmp_path / 'Breakout_seed1.json') as f:
        r = json.load(f)
    assert r['agent_steps'] == 400
    assert 250 < r['updates'] <= 300                            # the counters went on from the checkpoint
    cpu = r['cpu_curve']['points']                              # the readings before Ctrl-C were kept
    assert [s for s, _ in cpu] == [100, 200, 300, 400]
    assert 0 < cpu[0][1] < cpu[1][1] < cpu[2][1] < cpu[3][1] <= r['cpu_s']
    assert not os.path.exists(tmp_path / 'Breakout_seed1.ckpt')


@pytest.mark.slow
@needs_atari
@pytest.mark.timeout(120)
def test_a_fixed_seed_run_is_repeatable(tmp_path):
    bench = _load('atari100k')
    out = []
    for k in range(2):
        argv = ['--game', 'Pong', '--seed', '3', '--smoke', '--steps', '160', '--out', str(tmp_path / str(k)),
                '--no-progress']
        assert bench.main(argv) == 0
        with open(tmp_path / str(k) / 'Pong_seed3.json') as f:
            out.append(json.load(f))
    a, b = out
    assert a['updates'] > 40
    assert a['weights_sha256'] == b['weights_sha256']          # same transitions, same updates
    assert a['eval']['returns'] == b['eval']['returns'] and a['curve'] == b['curve']


def test_every_stored_result_ran_the_settings_of_its_agent():
    """benchmarks/results/ holds the table agent's runs only, every one of ``AGENTS[TABLE_AGENT]``: a settings
    change without new runs, or another agent's result there, fails here; it has runs of every game."""
    import glob

    bench = _load('atari100k')
    assert list(bench.AGENTS) == [bench.TABLE_AGENT]       # the lab's variants live in benchmarks/experiments/
    results = os.path.join(ROOT, 'benchmarks', 'results')
    dirs = sorted(glob.glob(os.path.join(results, 'atari100k*')))
    assert [os.path.basename(d) for d in dirs] == [f'atari100k-{bench.TABLE_AGENT}']
    games = set()
    for path in sorted(glob.glob(os.path.join(dirs[0], '*.json'))):
        with open(path) as f:
            r = json.load(f)
        assert r['settings'] == bench.AGENTS[bench.TABLE_AGENT] and r['agent_preset'] == bench.TABLE_AGENT, path
        games.add(r['game'])
    assert games == set(bench.GAMES)


@needs_atari
@pytest.mark.timeout(120)
def test_the_learning_path_is_the_one_the_stored_results_ran(tmp_path):
    """A short fixed-seed run of the table agent gives the numbers recorded with the code that produced the
    stored results: a refactor of the data path, the network or the learner that changes a transition or an
    update fails here."""
    bench = _load('atari100k')
    assert_matches_golden(bench.main, 'drq_eps_narrow', 'atari100k_smoke_pong_seed3_drq_eps_narrow.json', tmp_path)


def assert_matches_golden(main, agent, golden_file, tmp_path, steps=160):
    """``main`` (an Atari-100k command line) runs ``agent`` for ``steps`` smoke steps on Pong seed 3 and gives the
    updates, evaluation and weight changes stored in ``tests/golden/<golden_file>``."""
    with open(os.path.join(ROOT, 'tests', 'golden', golden_file)) as f:
        golden = json.load(f)
    argv = ['--game', 'Pong', '--seed', '3', '--smoke', '--steps', str(steps), '--out', str(tmp_path), '--no-progress',
            '--agent', agent]
    assert main(argv) == 0
    with open(tmp_path / 'Pong_seed3.json') as f:
        r = json.load(f)
    assert r['updates'] == golden['updates']
    assert r['eval']['returns'] == golden['eval_returns'] and r['eval']['lengths'] == golden['eval_lengths']
    got = {name: (s, a) for name, s, a in r['weights_fingerprint']}
    assert sorted(got) == sorted(name for name, _, _ in golden['weights_fingerprint'])
    for name, s, a in golden['weights_fingerprint']:
        tol = 1e-4 * a + 1e-9  # rounding on another CPU or op order moves these by ~1e-6 of the scale
        assert abs(got[name][0] - s) <= tol and abs(got[name][1] - a) <= tol, (name, got[name], (s, a))


@pytest.mark.timeout(120)
def test_the_update_benchmark_times_the_network_of_the_agent_it_is_given(capsys):
    bench = _load('bench_atari100k_update')
    assert bench.main(['--rounds', '1', '--updates', '1', '--agent', 'drq_eps', '--device', 'cpu']) == 0
    out = capsys.readouterr().out
    assert 'the network of --agent drq_eps' in out
    rows = [line for line in out.splitlines() if line.startswith('| ') and not line.startswith('| row')]
    assert [r.split(' | ')[0] for r in rows] == ['| bare', '| bare+shift', '| rlpipe', '| rlpipe, 2 next-obs forwards']
    assert all(float(r.split(' | ')[1]) > 0 for r in rows)
    with pytest.raises(SystemExit):
        bench.main(['--agent', 'no_such_agent'])
    assert 'not an agent of benchmarks/atari100k.py' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(['--agent', 'drq_eps', '--channels-last'])
    assert "only the Nature encoders take channels_last" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_the_update_benchmark_adds_a_channels_last_row_on_request(capsys):
    bench = _load('bench_atari100k_update')
    assert bench.main(['--rounds', '1', '--updates', '1', '--channels-last', '--device', 'cpu']) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith('| ') and not line.startswith('| row')]
    assert [r.split(' | ')[0] for r in rows][-1] == '| rlpipe, channels-last' and float(rows[-1].split(' | ')[1]) > 0


@pytest.mark.multiprocess
@pytest.mark.slow
@needs_atari
@pytest.mark.timeout(240)
def test_sigterm_to_a_background_run_saves_a_checkpoint(tmp_path):
    """A run started in the background (SIGINT ignored, as a shell's `&` leaves it) still saves on SIGTERM."""
    import signal
    import subprocess
    import time

    cmd = [sys.executable, os.path.join(ROOT, 'benchmarks', 'atari100k.py'), '--game', 'Pong', '--seed', '2', '--smoke',
           '--steps', '50000', '--out', str(tmp_path), '--no-progress']
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        time.sleep(40)  # imports, env start-up: then it trains (50k steps take far longer)
        p.send_signal(signal.SIGTERM)
        out = p.communicate(timeout=90)[0]
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out[-2000:]
    assert 'interrupted at agent step' in out and (tmp_path / 'Pong_seed2.ckpt').exists(), out[-2000:]


def _variants():
    """benchmarks/experiments/atari100k_variants.py, freshly loaded, with a fresh benchmarks.atari100k under it."""
    sys.modules.pop('benchmarks.atari100k', None)
    spec = importlib.util.spec_from_file_location(
        'atari100k_variants', os.path.join(ROOT, 'benchmarks', 'experiments', 'atari100k_variants.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_atari
@pytest.mark.timeout(120)
def test_a_lab_variant_runs_through_the_table_runner_on_the_path_its_stored_results_ran(tmp_path):
    """``drq_eps`` (the DER encoder), run by the lab's script, gives the numbers recorded with the code that
    produced its stored results."""
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps', 'atari100k_smoke_pong_seed3_drq_eps.json', tmp_path)


@needs_atari
@pytest.mark.timeout(120)
def test_the_ez_greedy_variant_runs_the_learning_path_of_its_stored_results(tmp_path):
    """``drq_eps_narrow_ez`` (the candidate for the table: its runs are collected over several sessions) gives the
    numbers recorded with the code of its stored results, so runs made at different commits are one agent's."""
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_ez', 'atari100k_smoke_pong_seed3_drq_eps_narrow_ez.json', tmp_path)


@needs_atari
@pytest.mark.timeout(180)
def test_the_decay_only_ez_greedy_variant_runs_the_learning_path_of_its_stored_results(tmp_path):
    """``drq_eps_narrow_ez_decay`` (holds actions only while eps decays; its full runs are collected over several
    sessions) gives the numbers recorded with the code of its stored results. 400 smoke steps run past the end of
    the smoke decay, so holding after it (plain ez-greedy) or stopping well before it (cut-off 0.3) fails here; a
    small move of the cut-off leaves these draws alone and is caught by the settings check on stored runs below."""
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_ez_decay', 'atari100k_smoke_pong_seed3_drq_eps_narrow_ez_decay.json',
                          tmp_path, steps=400)


@needs_atari
@pytest.mark.timeout(180)
def test_the_warm_up_ez_greedy_variant_runs_the_learning_path_of_its_stored_results(tmp_path):
    """``drq_eps_narrow_ez_warmup`` (holds actions only in the warm-up) gives the numbers recorded with the code
    of its runs, over 400 smoke steps (past the smoke warm-up and decay)."""
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_ez_warmup',
                          'atari100k_smoke_pong_seed3_drq_eps_narrow_ez_warmup.json', tmp_path, steps=400)


@needs_atari
@pytest.mark.timeout(180)
def test_the_reset_variant_runs_the_learning_path_of_its_stored_results(tmp_path):
    """``drq_eps_narrow_reset`` (value and advantage branches reset every 100 updates in a smoke run) gives the
    numbers recorded with the code of its runs, over 400 smoke steps: two resets."""
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_reset', 'atari100k_smoke_pong_seed3_drq_eps_narrow_reset.json',
                          tmp_path, steps=400)
    with open(tmp_path / 'Pong_seed3.json') as f:
        r = json.load(f)
    assert r['resets'] == 2 and r['settings']['reset_every'] == 100 and r['settings']['reset_layers'] == ['adv', 'value']


@needs_atari
@pytest.mark.timeout(120)
def test_before_its_first_reset_the_reset_variant_is_the_table_agent(tmp_path):
    """160 smoke steps (60 updates, the first reset is after 100) give the table agent's golden numbers: a short run
    of the reset variant differs from the table agent's run of the same seed by the resets alone."""
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_reset', 'atari100k_smoke_pong_seed3_drq_eps_narrow.json', tmp_path)


@pytest.mark.slow
@needs_atari
@pytest.mark.timeout(240)
def test_a_resumed_reset_variant_does_not_reset_twice(tmp_path, monkeypatch):
    """A Ctrl-C checkpoint keeps the count of resets done, so the resumed run resets at the next multiple only."""
    import torch

    lab = _variants()
    bench = lab.atari100k
    resume = interrupt_at(bench, monkeypatch, 220)   # 120 updates: one reset done (after update 100)
    argv = ['--game', 'Pong', '--seed', '0', '--smoke', '--steps', '260', '--out', str(tmp_path), '--no-progress',
            '--agent', 'drq_eps_narrow_reset']
    assert lab.main(argv) == 130
    assert torch.load(tmp_path / 'Pong_seed0.ckpt', weights_only=True)['resets'] == {'resets': 1}
    resume()
    from middleware.reset import PeriodicReset
    calls = []
    real_reset = PeriodicReset.reset

    def spy(self):
        calls.append(True)
        real_reset(self)

    monkeypatch.setattr(PeriodicReset, 'reset', spy)
    assert lab.main(argv) == 0
    with open(tmp_path / 'Pong_seed0.json') as f:
        r = json.load(f)
    assert 120 < r['updates'] < 200 and r['resets'] == 1 and calls == []   # no reset before update 200


@needs_atari
@pytest.mark.timeout(120)
def test_the_intensity_variant_runs_the_learning_path_of_its_stored_results(tmp_path):
    """``drq_eps_narrow_intensity`` (the table agent plus intensity augmentation) gives the numbers recorded with
    the code of its runs, and its updates are not the table agent's: every weight tensor moved differently."""
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_intensity',
                          'atari100k_smoke_pong_seed3_drq_eps_narrow_intensity.json', tmp_path)
    with open(tmp_path / 'Pong_seed3.json') as f:
        r = json.load(f)
    table_smoke = lab.atari100k.agent_settings(lab.atari100k.build_parser().parse_args(['--smoke']))
    assert r['settings'] == dict(table_smoke, intensity_scale=0.05)   # the table agent's, plus the intensity
    with open(os.path.join(ROOT, 'tests', 'golden', 'atari100k_smoke_pong_seed3_drq_eps_narrow.json')) as f:
        table = {name: a for name, _, a in json.load(f)['weights_fingerprint']}
    assert r['updates'] > 40
    assert all(abs(a - table[name]) > 1e-4 * a for name, _, a in r['weights_fingerprint'])


@needs_atari
@pytest.mark.timeout(120)
def test_the_same_padding_variant_runs_the_learning_path_of_its_stored_results(tmp_path):
    """``drq_eps_narrow_same`` (the table agent's network with SAME padding, channels-last) gives the numbers
    recorded with the code of its runs, on a network with the 11x11 grid's 3,872 features."""
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_same', 'atari100k_smoke_pong_seed3_drq_eps_narrow_same.json',
                          tmp_path)
    with open(tmp_path / 'Pong_seed3.json') as f:
        r = json.load(f)
    table_smoke = lab.atari100k.agent_settings(lab.atari100k.build_parser().parse_args(['--smoke']))
    assert r['settings'] == dict(table_smoke, padding='same', channels_last=True)
    net = lab.atari100k.q_network(lab.VARIANTS['drq_eps_narrow_same'], 6)
    assert net.encoder.fc[0].in_features == 32 * 11 * 11


def _cpu_has_bf16() -> bool:
    """Whether oneDNN runs bfloat16 natively here (AVX-512 BF16 or AMX); elsewhere it emulates it, rounding otherwise."""
    import torch
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@needs_atari
@pytest.mark.timeout(120)
def test_the_bfloat16_same_padding_variant_runs_the_learning_path_of_its_stored_results(tmp_path):
    """``drq_eps_narrow_same_bf16`` (``drq_eps_narrow_same`` with its encoder in bfloat16 mixed precision) gives the
    numbers recorded with the code of its runs, and they are not ``drq_eps_narrow_same``'s float32 numbers."""
    if not _cpu_has_bf16():
        pytest.skip('this CPU emulates bfloat16 (no AVX-512 BF16): its rounding differs from the golden run\'s CPU')
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_same_bf16',
                          'atari100k_smoke_pong_seed3_drq_eps_narrow_same_bf16.json', tmp_path)
    with open(tmp_path / 'Pong_seed3.json') as f:
        r = json.load(f)
    table_smoke = lab.atari100k.agent_settings(lab.atari100k.build_parser().parse_args(['--smoke']))
    assert r['settings'] == dict(table_smoke, padding='same', channels_last=True, bfloat16=True)
    with open(os.path.join(ROOT, 'tests', 'golden', 'atari100k_smoke_pong_seed3_drq_eps_narrow_same.json')) as f:
        fp32 = {name: a for name, _, a in json.load(f)['weights_fingerprint']}
    assert any(abs(a - fp32[name]) > 1e-3 * a for name, _, a in r['weights_fingerprint'])


@needs_atari
@pytest.mark.timeout(180)
def test_the_bfloat16_warm_up_ez_greedy_variant_runs_the_learning_path_of_its_stored_results(tmp_path):
    """``drq_eps_narrow_same_bf16_ez_warmup`` (the bfloat16 SAME-padding network exploring as ``_ez_warmup``) gives
    the numbers recorded with the code of its runs over 400 smoke steps, with both variants' settings."""
    if not _cpu_has_bf16():
        pytest.skip('this CPU emulates bfloat16 (no AVX-512 BF16): its rounding differs from the golden run\'s CPU')
    lab = _variants()
    assert_matches_golden(lab.main, 'drq_eps_narrow_same_bf16_ez_warmup',
                          'atari100k_smoke_pong_seed3_drq_eps_narrow_same_bf16_ez_warmup.json', tmp_path, steps=400)
    with open(tmp_path / 'Pong_seed3.json') as f:
        r = json.load(f)
    table_smoke = lab.atari100k.agent_settings(lab.atari100k.build_parser().parse_args(['--smoke']))
    assert r['settings'] == dict(table_smoke, padding='same', channels_last=True, bfloat16=True,
                                 eps_repeat_exponent=2.0, eps_repeat_max=100, eps_repeat_min_eps=0.99)


@pytest.mark.slow
@needs_atari
@pytest.mark.timeout(240)
def test_an_interrupted_intensity_variant_keeps_its_generator(tmp_path, monkeypatch):
    """The Ctrl-C checkpoint holds the intensity generator's state and the resumed run restores it."""
    import torch

    from pipeline.data.augment import RandomIntensity

    lab = _variants()
    bench = lab.atari100k
    resume = interrupt_at(bench, monkeypatch, 200)
    argv = ['--game', 'Pong', '--seed', '0', '--smoke', '--steps', '240', '--out', str(tmp_path), '--no-progress',
            '--agent', 'drq_eps_narrow_intensity']
    assert lab.main(argv) == 130
    saved = torch.load(tmp_path / 'Pong_seed0.ckpt', weights_only=True)['intensity']['generator']
    assert not torch.equal(saved, torch.Generator().manual_seed(1).get_state())   # 100 updates drew from it
    resume()
    loaded = []
    real_load = RandomIntensity.load_state_dict

    def spy(self, state):
        loaded.append(state['generator'].clone())
        real_load(self, state)

    monkeypatch.setattr(RandomIntensity, 'load_state_dict', spy)
    assert lab.main(argv) == 0
    assert len(loaded) == 1 and torch.equal(loaded[0], saved)


@needs_atari
@pytest.mark.timeout(180)
def test_a_lab_variant_writes_to_the_lab_and_learns_its_noise(tmp_path, monkeypatch):
    lab = _variants()
    monkeypatch.setattr(lab, 'RESULTS_DIR', str(tmp_path / 'atari100k'))
    argv = ['--game', 'Pong', '--seed', '0', '--smoke', '--steps', '200', '--agent', 'drq_eps_noisy', '--no-progress']
    assert lab.main(argv) == 0
    assert sorted(os.listdir(tmp_path)) == ['atari100k-drq_eps_noisy']   # the lab's directory, nothing else
    with open(tmp_path / 'atari100k-drq_eps_noisy' / 'Pong_seed0.json') as f:
        r = json.load(f)
    assert r['agent_preset'] == 'drq_eps_noisy' and r['settings']['noisy_std'] == 0.1
    assert r['agent'] == 'DrQ(eps) + noisy head'
    moved = {name: abs_change for name, _, abs_change in r['weights_fingerprint']}
    sigmas = [n for n in moved if n.endswith('weight_sigma')]
    assert len(sigmas) == 4 and all(moved[n] > 0 for n in sigmas)   # both dueling branches, both layers


@pytest.mark.slow
@needs_atari
@pytest.mark.timeout(240)
def test_the_ez_greedy_variant_holds_its_actions_across_a_resume(tmp_path, monkeypatch, capsys):
    """``drq_eps_narrow_ez`` builds a collect mode with ez-greedy, and a Ctrl-C checkpoint keeps its held actions."""
    import torch

    lab = _variants()
    bench = lab.atari100k
    seen = {}
    resume = interrupt_at(bench, monkeypatch, 150)
    argv = ['--game', 'Freeway', '--seed', '0', '--smoke', '--steps', '200', '--out', str(tmp_path), '--no-progress',
            '--agent', 'drq_eps_narrow_ez']
    assert lab.main(argv) == 130
    assert 'resume with: python benchmarks/experiments/atari100k_variants.py --game Freeway' in capsys.readouterr().out
    state = torch.load(tmp_path / 'Freeway_seed0.ckpt', weights_only=True)
    left, held = state['collect_hold']
    assert len(left) == len(held) == 1 and 0 <= left[0] < 100 and 0 <= held[0] < 3
    resume()
    from pipeline.policy.dqn import DQNCollectMode
    real_forward = DQNCollectMode.forward

    def spy(self, obs, eps=0.0):
        seen.setdefault('first', (self.repeat_exponent, self.repeat_max, [h.tolist() for h in self.hold]))
        return real_forward(self, obs, eps)

    monkeypatch.setattr(DQNCollectMode, 'forward', spy)
    assert lab.main(argv) == 0
    assert seen['first'] == (2.0, 100, [left, held])   # resumed with the held action, not a fresh draw
    with open(tmp_path / 'Freeway_seed0.json') as f:
        r = json.load(f)
    assert r['agent_preset'] == 'drq_eps_narrow_ez' and r['settings']['eps_repeat_exponent'] == 2.0


def test_the_lab_script_runs_only_its_variants_and_needs_one(capsys):
    lab = _variants()
    for argv in (['--game', 'Pong'], ['--game', 'Pong', '--agent', lab.atari100k.TABLE_AGENT]):
        with pytest.raises(SystemExit):
            lab.build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert 'the following arguments are required: --agent' in err and 'invalid choice' in err
    args = lab.build_parser().parse_args(['--agent', 'drq_eps'])
    assert args.results_root == lab.RESULTS_DIR and args.results_root.startswith(
        os.path.join(ROOT, 'benchmarks', 'experiments', 'results'))


def test_an_interrupted_run_names_the_script_that_resumes_it():
    """The resume hint names the script that was run (the lab's variants are unknown to the table's runner) and
    drops ``--fresh``, which would start the run over."""
    lab = _variants()
    bench = lab.atari100k
    argv = ['--game', 'Road Runner', '--seed', '1', '--fresh', '--agent', 'drq_eps_narrow_ez']
    args = lab.build_parser().parse_args(argv)
    args.argv = argv
    assert bench.resume_command(args) == ("python benchmarks/experiments/atari100k_variants.py --game 'Road Runner' "
                                          "--seed 1 --agent drq_eps_narrow_ez")
    args = bench.build_parser().parse_args(['--fresh'])
    args.argv = ['--fresh']
    assert bench.resume_command(args) == 'python benchmarks/atari100k.py'


def test_every_stored_lab_result_ran_the_settings_of_its_variant():
    import glob

    lab = _variants()
    checked = {}
    for d in sorted(glob.glob(lab.RESULTS_DIR + '-*')):
        agent = os.path.basename(d)[len('atari100k-'):]
        assert agent in lab.VARIANTS, f'{d}: no variant {agent!r} in benchmarks/experiments/atari100k_variants.py'
        for path in sorted(glob.glob(os.path.join(d, '*.json'))):
            with open(path) as f:
                r = json.load(f)
            assert r['settings'] == lab.VARIANTS[agent] and r.get('agent_preset', agent) == agent, path
            assert r['agent'] == lab.VARIANT_NAMES[agent], path   # runs older than the field agent_preset
            checked[agent] = checked.get(agent, 0) + 1
    # none lost: drq_eps 3 seeds x 5 games, drq_eps_noisy Freeway seed 0; the ez-greedy variants collect their
    # runs over several sessions (so far drq_eps_narrow_ez: 10, drq_eps_narrow_ez_decay: 5; drq_eps_narrow_ez_warmup: all 25);
    # drq_eps_narrow_intensity: Pong seeds 0-4 (the short check's 1 and 2, then the 5-seed plan's 0, 3 and 4)
    # drq_eps_narrow_same: its diagnostic, Pong seed 1
    assert checked.pop('drq_eps') == 15 and checked.pop('drq_eps_noisy') == 1
    assert checked.pop('drq_eps_narrow_ez') >= 10 and checked.pop('drq_eps_narrow_ez_decay') >= 5
    assert checked.pop('drq_eps_narrow_ez_warmup') == 25 and checked.pop('drq_eps_narrow_intensity') == 5
    assert checked.pop('drq_eps_narrow_same') == 1
    # drq_eps_narrow_same_bf16: its Pong screen, seeds 0, 2, 3 and 4, then seed 1 and Boxing seeds 0 (rerun within
    # the CPU budget: the same weights), 1, 2, 3 and 4, then Breakout seeds 0-4
    assert checked.pop('drq_eps_narrow_same_bf16') == 15
    # drq_eps_narrow_same_bf16_ez_warmup: its plan's Freeway seeds 0-2
    assert checked.pop('drq_eps_narrow_same_bf16_ez_warmup') == 3
    assert not checked, checked


def test_an_agent_setting_init_gets_that_initialisation():
    torch = pytest.importorskip('torch')
    lab = _variants()
    torch.manual_seed(0)
    xavier = lab.atari100k.q_network(lab.VARIANTS['drq_eps_narrow_xavier'], 3)
    plain = lab.atari100k.q_network(lab.atari100k.AGENTS[lab.atari100k.TABLE_AGENT], 3)
    assert all(torch.all(m.bias == 0) for m in xavier.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
    assert not torch.all(plain.adv.bias == 0)


@pytest.mark.slow
@needs_atari
@pytest.mark.timeout(180)
def test_freeway_exploration_probe_tells_ez_greedy_from_eps_greedy(capsys):
    """benchmarks/experiments/freeway_exploration.py: on seed 0, ez-greedy's held actions cross the road within
    700 agent steps; eps-greedy's single random steps do not."""
    spec = importlib.util.spec_from_file_location(
        'freeway_exploration', os.path.join(ROOT, 'benchmarks', 'experiments', 'freeway_exploration.py'))
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    assert probe.table_eps(0) == 1.0 and probe.table_eps(1600) == 1.0 and probe.table_eps(6600) == pytest.approx(0.01)
    assert probe.main(['--seeds', '0', '--steps', '700']) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith('eps-greedy: points per seed [0.0]') and '0 of 1 seeds scored' in out[0]
    assert out[1].startswith('ez-greedy, exponent 2.0') and '1 of 1 seeds scored' in out[1]


def test_a_result_names_the_cpu_model_and_whether_it_runs_bfloat16_natively(tmp_path):
    from benchmarks import run_facts

    info = tmp_path / 'cpuinfo'
    info.write_text('processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: fpu avx2 avx512f avx512_bf16\n\n'
                    'processor\t: 1\nmodel name\t: Some CPU 9000\nflags\t\t: fpu avx2\n')
    assert run_facts.cpu_model(str(info)) == ('Some CPU 9000', True)
    info.write_text('processor\t: 0\nmodel name\t: Old CPU\nflags\t\t: fpu avx2 avx512f\n')
    assert run_facts.cpu_model(str(info)) == ('Old CPU', False)
    assert run_facts.cpu_model(str(tmp_path / 'missing')) == (None, None)
    m = run_facts.machine(None)
    assert {'cpu_model', 'avx512_bf16', 'cpus'} <= set(m)


@needs_atari
@pytest.mark.multiprocess
def test_bench_cpu_memory_pairs_runs_that_end_with_the_same_weights():
    # benchmarks/bench_cpu_memory.py: one round of two short runs (with glibc's thresholds raised, and without)
    out = subprocess.run([sys.executable, os.path.join(ROOT, 'benchmarks', 'bench_cpu_memory.py'), '--rounds', '1',
                          '--steps', '1650', '--game', 'Pong', '--seed', '3'], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'round 1: retained ' in out.stdout and 'same weights' in out.stdout, out.stdout
    assert 'median over 1 rounds: ' in out.stdout, out.stdout
