"""`rlpipe run`: nodes as local processes with roles, clean stop on SIGTERM, children die with the
launcher, clear errors for bad options, auto-recover."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from parallel_helpers import ROOT, free_ports

pytestmark = pytest.mark.multiprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_cmd(n, *extra):
    ports = ",".join(map(str, free_ports(n)))
    return [sys.executable, "-m", "pipeline.run.cli", "run", "--package", HERE, "--main",
            "parallel_launch_main.main", "--parallel-workers", str(n), "--ports", ports,
            "--startup-interval", "0.05", "--heartbeat-timeout", "2", "--stop-grace", "5", *extra]


def _env(tmp_path, **extra):
    env = dict(os.environ)
    env.pop("RLPIPE_KEY", None)  # the launcher makes its own
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["RLPIPE_TEST_OUT"] = str(tmp_path)
    env.update(extra)
    return env


def _results(tmp_path):
    return {r["node"]: r for r in (json.loads(p.read_text()) for p in tmp_path.glob("node-*.json"))}


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_files(tmp_path, pattern, n, timeout=30):
    end = time.monotonic() + timeout
    while len(list(tmp_path.glob(pattern))) < n and time.monotonic() < end:
        time.sleep(0.05)
    return len(list(tmp_path.glob(pattern))) >= n


def test_run_three_workers_with_default_roles(tmp_path):
    p = subprocess.run(_run_cmd(3, "--", "--seed", "3"), env=_env(tmp_path), cwd=ROOT, capture_output=True,
                       text=True, timeout=90)
    assert p.returncode == 0, p.stderr
    res = _results(tmp_path)
    assert sorted(res) == [0, 1, 2]
    assert [res[i]["roles"] for i in range(3)] == [["learner"], ["collector"], ["evaluator"]]
    for i in range(3):
        assert res[i]["active"] and res[i]["seen"] == [j for j in range(3) if j != i]
        assert res[i]["argv"] == ["--seed", "3"]  # main sees only its own arguments
        assert res[i]["cwd"] == ROOT != HERE  # nodes run where the user started, not in --package
    assert res[0]["launch_id"] and len({res[i]["launch_id"] for i in range(3)}) == 1  # they share one run folder


def test_star_ipc_with_explicit_roles_and_labels(tmp_path):
    cmd = _run_cmd(2, "--protocol", "ipc", "--topology", "star", "--roles", "learner,evaluator:collector",
                   "--node-ids", "3,4")
    p = subprocess.run(cmd, env=_env(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr
    res = _results(tmp_path)
    assert res[3]["roles"] == ["evaluator", "learner"] and res[4]["roles"] == ["collector"]
    assert res[3]["seen"] == [4] and res[4]["seen"] == [3]


def test_sigterm_stops_every_node(tmp_path):
    proc = subprocess.Popen(_run_cmd(2), env=_env(tmp_path, RLPIPE_TEST_HANG="1"), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_files(tmp_path, "hanging-*", 2)
        pids = [r["pid"] for r in _results(tmp_path).values()]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode != 0  # the nodes were interrupted
        assert "stopping all nodes" in err
        end = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_children_die_when_the_launcher_is_killed(tmp_path):
    proc = subprocess.Popen(_run_cmd(2), env=_env(tmp_path, RLPIPE_TEST_HANG="1"), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = []
    try:
        assert _wait_files(tmp_path, "hanging-*", 2)
        pids = [r["pid"] for r in _results(tmp_path).values()]
        proc.kill()  # SIGKILL: the launcher cannot clean up
        proc.wait(5)
        end = time.monotonic() + 15
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids)
    finally:
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_auto_recover_restarts_a_failing_node(tmp_path):
    marker = tmp_path / "failed-once"
    env = _env(tmp_path, RLPIPE_TEST_FAIL_ONCE=str(marker))
    p = subprocess.run(_run_cmd(2, "--auto-recover", "--max-retries", "2"), env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr
    assert marker.exists() and "restarting it (attempt 1 of 2)" in p.stderr
    res = _results(tmp_path)
    assert res[0]["seen"] == [1] and res[1]["seen"] == [0]


def test_per_role_entry_scripts_join_with_attach_to(tmp_path):
    """One `rlpipe run` per role, as on two machines: the learner listens, the collector attaches."""
    p0, p1 = free_ports(2)
    base = [sys.executable, "-m", "pipeline.run.cli", "run", "--package", HERE, "--main",
            "parallel_launch_main.main", "--heartbeat-timeout", "2", "--stop-grace", "5"]
    env = _env(tmp_path, RLPIPE_KEY="ab" * 32, RLPIPE_TEST_PEERS="1")
    learner = subprocess.Popen(base + ["--roles", "learner", "--node-ids", "0", "--ports", str(p0),
                                       "--startup-timeout", "0"], env=env, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    collector = subprocess.Popen(base + ["--roles", "collector", "--node-ids", "1", "--ports", str(p1),
                                         "--attach-to", f"tcp://127.0.0.1:{p0}"], env=env, cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for p in (learner, collector):
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
    finally:
        for p in (learner, collector):
            if p.poll() is None:
                p.kill()
                p.wait(5)
    res = _results(tmp_path)
    assert res[0]["roles"] == ["learner"] and res[0]["seen"] == [1]
    assert res[1]["roles"] == ["collector"] and res[1]["seen"] == [0]


@pytest.mark.parametrize("args, message", [
    (["--roles", "learner:collector:evaluator"], "--roles lists 3 node groups"),
    (["--node-ids", "1,1"], "--node-ids must be unique"),
    (["--roles", "learner:colector"],
     "unknown role 'colector' (node 1 of 2); valid roles: learner, collector, evaluator, fetcher"),
    (["--roles", "lerner,collector"], "unknown role 'lerner'; valid roles: learner, collector"),
    (["--advertise", "tcp://10.0.0.1:5000"], "names a port, but 2 nodes are started here: give the host only"),
    (["--advertise", "http://10.0.0.1"], "give a host (e.g. 10.0.0.1"),
    (["--address", "10.11.12.13"], "no shared key for a run across machines"),
    (["--attach-to", "tcp://127.0.0.1:1"], "no shared key"),
    (["--package", "/nonexistent-dir"], "is not a directory"),
])
def test_bad_options_are_clear_errors(tmp_path, args, message):
    p = subprocess.run(_run_cmd(2, *args), env=_env(tmp_path), cwd=ROOT, capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 2 and message in p.stderr, p.stderr


def test_one_node_on_a_named_loopback_address_without_a_key_is_refused(tmp_path):
    """Issue 27 item 9: it made a random key and waited forever for peers that cannot know it."""
    p = subprocess.run(_run_cmd(1, "--address", "127.0.0.1", "--roles", "learner"), env=_env(tmp_path), cwd=ROOT,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--address 127.0.0.1 with one node" in lines[0] and "RLPIPE_KEY" in lines[0]


def test_a_node_ends_with_its_atexit_handlers_run_its_output_flushed_and_its_exit_code(tmp_path):
    """The worker skips the interpreter's teardown after its main (issue 27 item 7); what must still happen does."""
    cmd = _run_cmd(2)
    cmd[cmd.index("parallel_launch_main.main")] = "exit_main.main"
    p = subprocess.run(cmd, env=_env(tmp_path), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 3, p.stderr
    assert "last words of node 0" in p.stdout and "last words of node 1" in p.stdout
    assert (tmp_path / "atexit-0").read_text() == "ran" and (tmp_path / "atexit-1").read_text() == "ran"


def _ipc_leftovers(tmp):
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))


def test_ipc_run_leaves_nothing_in_the_temp_folder_after_a_clean_stop(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.run(_run_cmd(2, "--protocol", "ipc"), env=_env(tmp_path, TMPDIR=str(tmp)), cwd=ROOT,
                       capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, p.stderr
    assert len(_results(tmp_path)) == 2
    assert _ipc_leftovers(tmp) == []  # no rlpipe-* folder, no node-*.sock


@pytest.mark.parametrize("how", ["launcher SIGKILL", "node SIGKILL then launcher SIGTERM"])
def test_ipc_files_are_removed_when_the_launcher_or_a_node_is_killed(tmp_path, how):
    """SIGKILL of the launcher: its nodes stop (they die with it) and remove their sockets and folder. A node
    killed with SIGKILL cannot clean up: its launcher removes what it left when it stops."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(_run_cmd(2, "--protocol", "ipc"), env=_env(tmp_path, RLPIPE_TEST_HANG="1",
                                                                       TMPDIR=str(tmp)),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pids = []
    try:
        assert _wait_files(tmp_path, "hanging-*", 2)
        pids = [r["pid"] for r in _results(tmp_path).values()]
        assert len(list(tmp.rglob("node-*.sock"))) == 2
        if how == "launcher SIGKILL":
            proc.kill()
        else:
            os.kill(pids[0], signal.SIGKILL)
            time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        end = time.monotonic() + 30
        while (any(_alive(p) for p in pids) or _ipc_leftovers(tmp)) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids)
        assert _ipc_leftovers(tmp) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.slow
def test_nodes_with_different_keys_say_so_and_exit_with_an_error(tmp_path):
    """Two launchers as on two machines, with different RLPIPE_KEY: both name the other side ("peer at ADDR
    signs with a different key") and exit with an error after the startup timeout instead of running alone."""
    p0, p1 = free_ports(2)
    base = [sys.executable, "-m", "pipeline.run.cli", "run", "--package", HERE, "--main",
            "parallel_launch_main.main", "--heartbeat-timeout", "2", "--stop-grace", "5", "--startup-timeout", "3"]
    a = subprocess.Popen(base + ["--roles", "learner", "--node-ids", "0", "--ports", str(p0)],
                         env=_env(tmp_path, RLPIPE_KEY="ab" * 32, RLPIPE_TEST_PEERS="1"), cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(base + ["--roles", "collector", "--node-ids", "1", "--ports", str(p1), "--attach-to",
                                 f"tcp://127.0.0.1:{p0}"],
                         env=_env(tmp_path, RLPIPE_KEY="cd" * 32, RLPIPE_TEST_PEERS="1"), cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errs = []
    try:
        for p in (a, b):
            errs.append(p.communicate(timeout=120)[1])
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait(5)
    err_a, err_b = errs
    assert a.returncode == 2 and b.returncode == 2, err_a[-3000:] + err_b[-3000:]
    assert "peer at 127.0.0.1 signs with a different key" in err_a, err_a[-3000:]
    assert f"peer at tcp://127.0.0.1:{p0} signs with a different key" in err_b, err_b[-3000:]
    for err in errs:
        assert "no peer could be authenticated" in err and "set the same RLPIPE_KEY" in err
        assert "Traceback" not in err
