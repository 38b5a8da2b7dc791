"""The checkpoint pair of a resuming benchmark (benchmarks/checkpoint_pair.py, used by benchmarks/atari100k.py; issue
45, item 5): a save killed at any point leaves a complete pair that resume uses; a damaged or missing file with no
complete pair to fall back to is one line naming the file and --fresh, never a traceback."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip('torch')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAVE_ATARI = all(importlib.util.find_spec(m) is not None for m in ('ale_py', 'cv2'))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks import checkpoint_pair as cp  # noqa: E402

pytestmark = pytest.mark.bench


REAL_REMOVE = cp._remove


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs (the test turns clean-up off too)."""


def _buffer_writer(n, cut=None):
    """Writes a buffer-like torch file of ``n`` items; with ``cut``, only that fraction of it, then dies."""
    def write(path):
        torch.save({'items': torch.arange(1000 * n), 'n': n}, path)
        if cut is not None:
            with open(path, 'rb') as f:
                data = f.read()
            with open(path, 'wb') as f:
                f.write(data[:int(len(data) * cut)])
            raise Killed
    return write


def _stem(tmp_path):
    return str(tmp_path / 'Pong_seed0')


def _buffer_n(path):
    return torch.load(path, weights_only=True)['n']


def _files(tmp_path):
    return sorted(os.listdir(tmp_path))


def test_a_save_writes_the_pair_under_the_final_names_and_resume_finds_it(tmp_path):
    stem = _stem(tmp_path)
    assert cp.find_pair(stem) is None                                   # nothing saved: a fresh start
    cp.save_pair(stem, {'step': 1}, _buffer_writer(1))
    cp.save_pair(stem, {'step': 2}, _buffer_writer(2))
    assert _files(tmp_path) == ['Pong_seed0.buffer', 'Pong_seed0.ckpt']
    pair = cp.find_pair(stem)
    assert pair.note is None and pair.state['step'] == 2 and _buffer_n(pair.buffer) == 2
    assert torch.load(stem + '.ckpt', weights_only=True)['step'] == 2


# every point a kill can hit in a save: while each new file is written, before each rename, before each removal
KILL_POINTS = ['write buffer', 'write ckpt'] + [f'replace {i}' for i in range(4)] + [f'remove {i}' for i in range(2)]


@pytest.mark.parametrize('point', KILL_POINTS)
def test_a_save_killed_at_any_point_leaves_a_complete_pair_that_resume_uses(tmp_path, monkeypatch, point):
    stem = _stem(tmp_path)
    cp.save_pair(stem, {'step': 1}, _buffer_writer(1))
    counts = {'replace': 0, 'remove': 0}
    real_replace, real_remove, real_save = os.replace, cp._remove, torch.save

    def replace(src, dst):
        if point == f'replace {counts["replace"]}':
            raise Killed
        counts['replace'] += 1
        real_replace(src, dst)

    def remove(path):
        if point == f'remove {counts["remove"]}':
            raise Killed
        counts['remove'] += 1
        if path.endswith('.old'):
            real_remove(path)                     # the clean-up of a failed write does not run after a kill

    def save(obj, path, *a, **kw):
        real_save(obj, path, *a, **kw)
        if point == 'write ckpt' and str(path).endswith('.ckpt.new'):
            with open(path, 'rb') as f:
                data = f.read()
            with open(path, 'wb') as f:
                f.write(data[:len(data) // 3])
            raise Killed

    monkeypatch.setattr(cp.os, 'replace', replace)
    monkeypatch.setattr(cp, '_remove', remove)
    monkeypatch.setattr(torch, 'save', save)
    with pytest.raises(Killed):
        cp.save_pair(stem, {'step': 2}, _buffer_writer(2, cut=0.5 if point == 'write buffer' else None))
    monkeypatch.undo()

    pair = cp.find_pair(stem)
    # the new pair once both of its files were whole, the previous one before: never an error, never a mix
    expected = 1 if point.startswith('write') else 2
    assert pair.state['step'] == expected and _buffer_n(pair.buffer) == expected, (point, _files(tmp_path))
    if (pair.ckpt, pair.buffer) == cp.paths(stem):
        assert pair.note is None
    else:
        assert pair.note == (f'warning: the last save did not finish; resuming from the newest complete save, '
                             f'{pair.ckpt} with {pair.buffer}')
    cp.settle(stem, pair)
    assert _files(tmp_path) == ['Pong_seed0.buffer', 'Pong_seed0.ckpt']
    again = cp.find_pair(stem)
    assert again.note is None and again.state['step'] == expected and _buffer_n(again.buffer) == expected


def test_a_failed_write_removes_its_files_and_keeps_the_previous_pair(tmp_path):
    stem = _stem(tmp_path)
    cp.save_pair(stem, {'step': 1}, _buffer_writer(1))

    def full_disk(path):
        with open(path, 'wb') as f:
            f.write(b'PK\x03\x04 partial')
        raise OSError(28, 'No space left on device')

    with pytest.raises(OSError):
        cp.save_pair(stem, {'step': 2}, full_disk)
    assert _files(tmp_path) == ['Pong_seed0.buffer', 'Pong_seed0.ckpt']
    assert cp.find_pair(stem).state['step'] == 1


def _error(stem):
    with pytest.raises(SystemExit) as e:
        cp.find_pair(stem)
    msg = str(e.value.code)
    assert '\n' not in msg and msg.endswith('; rerun with --fresh to start over'), msg
    return msg


def test_an_empty_ckpt_with_nothing_to_fall_back_to_is_one_line_naming_it_and_fresh(tmp_path):
    stem = _stem(tmp_path)
    cp.save_pair(stem, {'step': 1}, _buffer_writer(1))
    open(stem + '.ckpt', 'wb').close()                                  # what a kill during the old save left
    assert _error(stem) == f'error: {stem}.ckpt is damaged (empty: 0 bytes); rerun with --fresh to start over'


def test_an_empty_ckpt_falls_back_to_the_previous_complete_pair_in_one_line(tmp_path):
    stem, elsewhere = _stem(tmp_path), str(tmp_path / 'elsewhere')
    cp.save_pair(elsewhere, {'step': 1}, _buffer_writer(1))
    cp.save_pair(stem, {'step': 2}, _buffer_writer(2))
    for src, dst in zip(cp.paths(elsewhere), cp.paths(stem)):
        shutil.move(src, dst + '.old')                                  # the previous pair, still aside
    open(stem + '.ckpt', 'wb').close()                                  # the newest damaged after the save
    pair = cp.find_pair(stem)
    assert pair.state['step'] == 1 and pair.ckpt == stem + '.ckpt.old' and pair.buffer == stem + '.buffer.old'
    assert pair.note == (f'warning: {stem}.ckpt is damaged (empty: 0 bytes); resuming from the newest complete save, '
                         f'{stem}.ckpt.old with {stem}.buffer.old')


def test_a_missing_buffer_beside_a_good_ckpt_is_one_line_naming_the_buffer(tmp_path):
    stem = _stem(tmp_path)
    cp.save_pair(stem, {'step': 1}, _buffer_writer(1))
    os.remove(stem + '.buffer')
    assert _error(stem) == f'error: {stem}.buffer is missing; rerun with --fresh to start over'


def test_a_truncated_buffer_is_one_line_naming_it(tmp_path):
    stem = _stem(tmp_path)
    cp.save_pair(stem, {'step': 1}, _buffer_writer(50))
    with open(stem + '.buffer', 'r+b') as f:
        f.truncate(17_000)
    assert _error(stem) == (f'error: {stem}.buffer is damaged (truncated or not a torch file: 17,000 bytes); '
                            'rerun with --fresh to start over')


def test_a_buffer_of_another_save_is_not_paired_with_the_ckpt(tmp_path):
    stem = _stem(tmp_path)
    cp.save_pair(stem, {'step': 1}, _buffer_writer(1))
    _buffer_writer(2)(stem + '.buffer')                                 # the buffer of another save
    assert _error(stem) == (f'error: {stem}.buffer is damaged (it is not the buffer saved with {stem}.ckpt); '
                            'rerun with --fresh to start over')


def test_a_pair_written_before_the_pairing_was_recorded_still_resumes_and_is_checked(tmp_path):
    stem = _stem(tmp_path)
    torch.save({'step': 7}, stem + '.ckpt')                             # what the benchmark wrote until now
    _buffer_writer(7)(stem + '.buffer')
    pair = cp.find_pair(stem)
    assert pair.note is None and pair.state['step'] == 7 and pair.buffer == stem + '.buffer'
    os.remove(stem + '.buffer')
    assert _error(stem) == f'error: {stem}.buffer is missing; rerun with --fresh to start over'


def test_a_ckpt_that_is_not_a_safe_torch_file_is_named(tmp_path):
    stem = _stem(tmp_path)
    with open(stem + '.ckpt', 'wb') as f:
        f.write(b'not a checkpoint at all')
    assert _error(stem) == (f'error: {stem}.ckpt is damaged (truncated or not a torch file: 23 bytes); '
                            'rerun with --fresh to start over')


def _bench(out, *extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]))
    cmd = [sys.executable, os.path.join(ROOT, 'benchmarks', 'atari100k.py'), '--game', 'Pong', '--seed', '0', '--smoke',
           '--out', str(out), '--no-progress', *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_benchmark_given_a_damaged_checkpoint_says_so_in_one_line(tmp_path):
    """Before any env is built (no Atari extra needed): an empty .ckpt, then a good .ckpt without its .buffer."""
    stem = _stem(tmp_path)
    open(stem + '.ckpt', 'wb').close()
    r = _bench(tmp_path)
    assert r.returncode == 1 and 'Traceback' not in r.stderr, r.stderr[-3000:]
    assert r.stderr.strip() == (f'error: {stem}.ckpt is damaged (empty: 0 bytes); rerun with --fresh to start over')
    torch.save({'agent': {}, 'steps': 400}, stem + '.ckpt')
    r = _bench(tmp_path)
    assert r.returncode == 1 and 'Traceback' not in r.stderr, r.stderr[-3000:]
    assert r.stderr.strip() == f'error: {stem}.buffer is missing; rerun with --fresh to start over'
    assert os.path.exists(stem + '.ckpt')                              # nothing was removed


def _load_bench():
    spec = importlib.util.spec_from_file_location('atari100k', os.path.join(ROOT, 'benchmarks', 'atari100k.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_ATARI, reason="ale-py / opencv not installed (pip install 'rlpipe[atari]')")
@pytest.mark.timeout(180)
def test_a_benchmark_save_killed_midway_keeps_the_previous_checkpoint_and_resume_uses_it(tmp_path, monkeypatch,
                                                                                           capsys):
    bench = _load_bench()
    orig = bench.CurveRecorder.__call__
    stop_at = {'step': 120}

    def interrupt(self, ctx):
        orig(self, ctx)
        if ctx.env_step == stop_at['step']:
            raise KeyboardInterrupt

    monkeypatch.setattr(bench.CurveRecorder, '__call__', interrupt)
    argv = ['--game', 'Pong', '--seed', '0', '--smoke', '--steps', '200', '--out', str(tmp_path), '--no-progress']
    assert bench.main(argv) == 130                                      # saved at step 120
    stem = _stem(tmp_path)
    assert torch.load(stem + '.ckpt', weights_only=True)['env_step'] == 120

    stop_at['step'] = 160                                               # resumed, stopped at 160, killed saving
    real_save = torch.save

    def killed_writing_the_ckpt(obj, path, *a, **kw):
        if '.ckpt' in str(path):
            with open(path, 'wb') as f:
                f.write(b'PK\x03\x04')
            raise Killed
        return real_save(obj, path, *a, **kw)

    monkeypatch.setattr(torch, 'save', killed_writing_the_ckpt)
    monkeypatch.setattr(cp, '_remove', lambda path: None)
    with pytest.raises(Killed):
        bench.main(argv)
    monkeypatch.setattr(torch, 'save', real_save)
    monkeypatch.setattr(cp, '_remove', REAL_REMOVE)
    assert torch.load(stem + '.ckpt', weights_only=True)['env_step'] == 120   # the previous checkpoint is whole

    monkeypatch.setattr(bench.CurveRecorder, '__call__', orig)
    capsys.readouterr()
    assert bench.main(argv) == 0
    out = capsys.readouterr()
    assert f'resumed from {stem}.ckpt at agent step 120' in out.out
    assert not [f for f in os.listdir(tmp_path) if not f.endswith('.json')]   # checkpoint and leftovers removed

