"""Every script of benchmarks/ starts: ``--help`` prints its usage and exits 0 without running anything. Most
of them have no smoke run in the suite (they print timings for a person to read), so this is what notices a
broken import or argument parser before someone runs one for an hour."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / 'benchmarks').rglob('*.py') if "__name__ == '__main__'" in p.read_text()
                 or '__name__ == "__main__"' in p.read_text())


def test_the_benchmark_scripts_are_found():
    names = {p.name for p in SCRIPTS}
    assert {'bench_dqn.py', 'bench_mac.py', 'atari100k.py', 'report.py', 'atari100k_variants.py'} <= names


@pytest.mark.multiprocess
@pytest.mark.parametrize('script', SCRIPTS, ids=lambda p: str(p.relative_to(ROOT / 'benchmarks')))
def test_help_prints_usage_and_runs_nothing(script, tmp_path):
    # from another directory: a script that finds the package only from the repository root fails here
    out = subprocess.run([sys.executable, str(script), '--help'], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith('usage:'), out.stdout[:500]
    assert list(tmp_path.iterdir()) == []  # nothing written
