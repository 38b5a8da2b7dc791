"""The smoke recipes of docs/envs.md ("Smoke runs"), run as written: each Atari and MuJoCo example with
``--smoke`` trains briefly, evaluates, writes its checkpoints and exits 0, in under a minute. Skipped,
with the reason shown, without the example's extra."""
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXTRAS = {'atari': ['ale_py', 'cv2'], 'mujoco': ['mujoco']}
NEEDS = {'dqn_atari': 'atari', 'ppo_atari': 'atari', 'sac_mujoco': 'mujoco', 'ppo_mujoco': 'mujoco'}
BUDGET = 90  # seconds: the recipes promise under a minute; the margin is for a loaded shared machine


def recipes():
    """example name -> the command of the smoke block of docs/envs.md (``python examples/X.py --smoke ...``)."""
    text = open(os.path.join(ROOT, 'docs', 'envs.md')).read()
    section = text.split('### Smoke runs', 1)[1].split('\n#', 1)[0]
    block = re.search(r'```bash\n(.*?)```', section, re.S).group(1)
    found = {}
    for line in block.splitlines():
        words = shlex.split(line.split('#')[0])
        if words:
            found[os.path.basename(words[1])[:-len('.py')]] = words
    return found


def test_the_docs_have_one_smoke_recipe_per_atari_and_mujoco_example():
    found = recipes()
    assert sorted(found) == sorted(NEEDS)
    for name, words in found.items():
        assert words[:2] == ['python', f'examples/{name}.py'] and '--smoke' in words, words
    readme = open(os.path.join(ROOT, 'README.md')).read()
    for name in NEEDS:   # the examples table names the flag too
        row = next(line for line in readme.splitlines() if line.startswith(f'| `python examples/{name}.py'))
        assert '--smoke' in row, row


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize('name', sorted(NEEDS))
def test_smoke_recipe_runs_as_written(name, tmp_path):
    missing = [m for m in EXTRAS[NEEDS[name]] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs the '{NEEDS[name]}' extra (pip install -e '.[{NEEDS[name]}]'): {', '.join(missing)} "
                    f"not installed")
    words = recipes()[name]
    cmd = [sys.executable, os.path.join(ROOT, words[1]), *words[2:]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]))
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    wall = time.perf_counter() - t0
    assert p.returncode == 0, f'{shlex.join(words)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}'
    run_dirs = [d for d in tmp_path.iterdir() if d.is_dir()]
    assert len(run_dirs) == 1, run_dirs
    ckpt = run_dirs[0] / '1' / 'ckpt'
    assert (ckpt / 'final.pth.tar').is_file() and (ckpt / 'eval.pth.tar').is_file(), list(ckpt.iterdir())
    assert 'watch it:' in p.stdout and '--play' in p.stdout, p.stdout[-1000:]
    assert wall < BUDGET, f'{shlex.join(words)} took {wall:.0f} s (the docs promise under a minute)'
