"""`import middleware` stays light: torch, the replay buffers and the policies load where they are used."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.multiprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_import_middleware_loads_no_torch_buffers_or_policies():
    code = ("import sys, middleware; heavy = ['torch', 'gymnasium', 'treetensor', 'tensorboard', 'pipeline.data', "
            "'pipeline.policy', 'pipeline.learner']; print([m for m in heavy if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
