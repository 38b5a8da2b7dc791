"""Pipeline nodes as Ray actors (``rlpipe run --backend ray``): events exactly once over the bus, finish
reaches every node, a killed node actor is reported and, with restarts, comes back.

Runs on a local Ray (2 CPUs, no dashboard); skipped with a visible reason without the ray extra.
"""
import os
import subprocess
import sys

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install rlpipe[ray])")

from pipeline.parallel.ray_launch import run_on_ray  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ITEMS = 30
pytestmark = pytest.mark.timeout(300)
FAST = dict(heartbeat_interval=0.2, heartbeat_timeout=3.0, startup_timeout=60.0)


@pytest.fixture(scope="module")
def local_ray():
    path = os.pathsep.join([HERE, ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


def _small(**kw):
    cpus = {"learner": 0.25, "collector": 0.25, "evaluator": 0.25}
    return run_on_ray("ray_node_main.main", 4, package=HERE, roles="learner:collector:collector:evaluator",
                      cpus=cpus, **FAST, **kw)


def test_node_actors_exchange_every_item_once_and_finish_reaches_all(local_ray):
    results = _small(env={"RLPIPE_TEST_COLLECTORS": "2"})
    assert set(results) == {0, 1, 2, 3}, results
    learner = results[0]
    assert learner["roles"] == ["learner"]
    assert learner["got"] == sorted((c, i) for c in (1, 2) for i in range(ITEMS))  # each item exactly once
    for i in (1, 2):
        assert results[i]["roles"] == ["collector"] and results[i]["sent"] == ITEMS
        assert results[i]["finished"], "the learner's finish did not reach collector %d" % i
    assert results[3]["roles"] == ["evaluator"] and results[3]["finished"]


def test_a_killed_node_actor_is_reported_and_restarted(local_ray):
    env = {"RLPIPE_TEST_COLLECTORS": "1", "RLPIPE_TEST_KILL_NODE": "2"}
    # without restarts: node 2's death is reported (an exception in its slot), the rest finish
    results = _small(env=env)
    assert isinstance(results[2], ray.exceptions.RayActorError), results[2]
    assert results[0]["got"] == [(1, i) for i in range(ITEMS)]
    # with a restart: node 2 runs again with RLPIPE_RESTARTS=1 and delivers all of its items
    env["RLPIPE_TEST_COLLECTORS"] = "2"
    results = _small(env=env, max_restarts=1)
    assert results[2]["restarts"] == 1 and results[2]["sent"] == ITEMS
    assert results[0]["got"] == sorted((c, i) for c in (1, 2) for i in range(ITEMS))


def test_cli_backend_ray_runs_the_entry_script(tmp_path):
    env = dict(os.environ, RLPIPE_TEST_COLLECTORS="1", PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "pipeline.parallel.cli", "run", "--backend", "ray", "--package", HERE,
           "--main", "ray_node_main.main", "--parallel-workers", "3", "--learner-cpus", "0.25",
           "--collector-cpus", "0.25", "--evaluator-cpus", "0.25", "--heartbeat-timeout", "3"]
    p = subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "node 0 finished" in p.stderr and "node 2 finished" in p.stderr


def test_cli_refuses_options_the_ray_backend_cannot_honour():
    cmd = [sys.executable, "-m", "pipeline.parallel.cli", "run", "--backend", "ray", "--main", "x.main",
           "--attach-to", "tcp://127.0.0.1:5000"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])))
    assert p.returncode == 2 and "--attach-to" in p.stderr
