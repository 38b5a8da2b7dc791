"""Ray stays an optional extra: no module of rlpipe imports it unless a Ray path is used, and the Ray launcher
says which extra to install when it is missing (these tests hide Ray, so they run with or without it;
``LearnerGroup`` and refs without Ray: tests/learner/test_state_and_group.py, test_update_inputs.py)."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))

IMPORT_ALL = r"""
import importlib, pkgutil, sys
skipped = []
for top in ("contexts", "pipeline", "middleware"):
    pkg = importlib.import_module(top)
    for info in pkgutil.walk_packages(pkg.__path__, top + "."):
        try:
            importlib.import_module(info.name)
        except ImportError as e:  # an optional extra that is not installed (envpool, ale, ...)
            if "ray" in str(e).lower():
                raise
            skipped.append(info.name)
print("RAY_LOADED" if "ray" in sys.modules else "NO_RAY", len(skipped))
"""


def test_no_module_imports_ray_at_import_time():
    p = subprocess.run([sys.executable, "-c", IMPORT_ALL], env=ENV, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[0] == "NO_RAY", p.stdout


HIDE_RAY = "import sys; sys.modules['ray'] = None; "


def test_run_on_ray_and_the_cli_name_the_extra_without_ray(tmp_path):
    code = HIDE_RAY + ("from pipeline.run.ray_launch import run_on_ray\n"
                       "try:\n    run_on_ray('x.main', 2)\nexcept ImportError as e:\n    print(e)")
    p = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120)
    assert "pip install rlpipe[ray]" in p.stdout and "--backend ray" in p.stdout, p.stdout + p.stderr[-2000:]
    code = HIDE_RAY + ("from pipeline.run.cli import main\n"
                       "sys.exit(main(['run', '--backend', 'ray', '--main', 'x.main', '--parallel-workers', '2']))")
    p = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path))
    assert p.returncode == 2 and "pip install rlpipe[ray]" in p.stderr, p.stderr[-2000:]

