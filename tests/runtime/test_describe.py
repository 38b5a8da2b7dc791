"""task.describe(), rlpipe describe, and the wiring check on every example pipeline (issue 13)."""
import glob
import io
import os
import subprocess
import sys

import pytest

from pipeline import task
from pipeline.run.describe import DescribeOnly, describe_main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYOUT = {0: ["learner"], 1: ["collector"], 2: ["evaluator"]}
# examples that need an optional extra: (module to import, the extra that installs it)
NEEDS_EXTRA = {"dqn_atari": ("ale_py", "atari"), "ppo_atari": ("ale_py", "atari"), "ppo_mujoco": ("mujoco", "mujoco"),
               "sac_mujoco": ("mujoco", "mujoco"), "offline_mujoco": ("mujoco", "mujoco")}


def test_describe_dqn_cartpole_single_and_multi_node(tmp_path, capsys):
    d = describe_main("examples.dqn_cartpole.main", ["--set", "env.collector_env_num=1"], ROOT,
                      out=str(tmp_path / "pipe"))
    names = [r.name for r in d.rows]
    assert names.index("StepCollector") < names.index("data_pusher") < names.index("OffPolicyLearner")
    assert d.problems == {0: []}
    text = capsys.readouterr().out
    assert "| reads" in text and "every read is written before it or kept" in text
    assert (tmp_path / "pipe.mmd").read_text().startswith("flowchart LR")
    d = describe_main("examples.dqn_cartpole.main", [], ROOT, nodes=LAYOUT, stream=io.StringIO())
    assert "transitions" in d.bus[(1, 0)] and d.bus[(0, 2)] == ["train_iter"]
    assert all(p == [] for p in d.problems.values())
    assert [r.nodes for r in d.rows if r.name == "OffPolicyLearner"] == [[0]]
    assert 'subgraph node1["node 1: collector"]' in d.mermaid() and "cluster_2" in d.dot()


@pytest.mark.multiprocess
@pytest.mark.parametrize("example", sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "examples", "*.py"))))
def test_every_example_pipeline_is_wired(example):
    """Single process and learner/collector/evaluator nodes: no read left unwritten."""
    if example in NEEDS_EXTRA:
        module, extra = NEEDS_EXTRA[example]
        pytest.importorskip(module, reason=f"examples/{example}.py needs the {extra} extra: pip install -e '.[{extra}]'")
    found = []

    def instead_of_run(t):
        found.append((t.describe(stream=io.StringIO()), t.describe(nodes=LAYOUT, stream=io.StringIO())))
        raise DescribeOnly()

    sys.path.insert(0, ROOT)
    task.instead_of_run = instead_of_run
    try:
        from pipeline.runtime.entry import load_main
        argv, sys.argv = sys.argv, [example]
        try:
            load_main(f"examples.{example}.main")()
        except DescribeOnly:
            pass
        finally:
            sys.argv = argv
    finally:
        task.instead_of_run = None
        sys.path.remove(ROOT)
    (single, multi), = found
    assert single.problems == {0: []} and all(p == [] for p in multi.problems.values()), (single.problems,
                                                                                          multi.problems)


@pytest.mark.multiprocess
def test_rlpipe_describe_command(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "pipeline.run.cli", "describe", "--package", ROOT, "--main",
                          "examples.hello_pipeline.main", "--roles", "learner:collector", "--out", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "bus: node 1 -> node 0: transitions" in out.stdout
    assert (tmp_path / "d.mmd").exists()
    assert "transitions stored" not in out.stdout  # no step ran


@pytest.mark.multiprocess
@pytest.mark.slow
def test_rlpipe_describe_leaves_no_run_folder_behind(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT, TMPDIR=str(tmp))
    out = subprocess.run([sys.executable, "-m", "pipeline.run.cli", "describe", "--package", ROOT, "--main",
                          "examples.dqn_cartpole.main"], capture_output=True, text=True, timeout=120, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "dqn_collector" in out.stdout or "collector" in out.stdout
    assert list(tmp.iterdir()) == [] and not (tmp_path / "cartpole_dqn").exists(), (list(tmp.iterdir()),
                                                                                     list(tmp_path.iterdir()))


def test_describe_shows_a_miswired_pipeline():
    from pipeline import for_all_roles

    @for_all_roles(reads=["transitions"])
    def needs_data(ctx):
        pass

    with task.start():
        task.use(needs_data)
        d = task.describe(stream=io.StringIO())
    assert len(d.problems[0]) == 1 and "needs_data reads ctx.transitions" in d.problems[0][0]
    assert "problem: " in d.table()


def test_readme_shows_the_current_describe_output_of_dqn_cartpole():
    """The runtime guide's table for examples/dqn_cartpole.py is what `rlpipe describe` prints today."""
    with open(os.path.join(ROOT, "docs", "runtime.md")) as f:
        readme = f.read()
    after = readme[readme.index("For `examples/dqn_cartpole.py`:"):]
    shown, bus = after.split("```")[1].strip("\n"), after.split("```")[3].strip("\n")
    out = io.StringIO()
    describe_main("examples.dqn_cartpole.main", [], ROOT, stream=out)
    assert shown in out.getvalue(), out.getvalue()
    out = io.StringIO()
    describe_main("examples.dqn_cartpole.main", [], ROOT, nodes=LAYOUT, stream=out)
    assert bus and all(line in out.getvalue().splitlines() for line in bus.splitlines()), out.getvalue()
