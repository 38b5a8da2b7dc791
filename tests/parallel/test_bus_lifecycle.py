"""How multi-node runs end (issue 11 defects 2 and 9), with real processes on loopback:

- a finish reaches every node whatever the topology (a star, an ``attach_to`` chain: two hops away);
- a node leaving ``with task.start()`` ends its peers' runs;
- a node that peers believe dead (paused past the heartbeat timeout) still gets their finish;
- a node whose every peer is gone ends its run within ``peerless_timeout`` (``task.run`` and a
  ``task.wait_for`` without a timeout are released).
Each node runs up to 6000 steps of 10 ms (a minute) unless a finish stops it; nothing asserts speed.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from parallel_helpers import ROOT, env, finish, tcp_group, wait_until

pytestmark = pytest.mark.multiprocess

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 240  # a hang guard only


def start(cfg, **extra_env):
    return subprocess.Popen([sys.executable, os.path.join(HERE, "lifecycle_node.py"), json.dumps(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env(), **extra_env},
                            cwd=ROOT)


def results(procs):
    return finish(procs, TIMEOUT)


def group_cfg(group, i, **router):
    return {"node_id": i, "address": group[i], "peers": group, **router}


@pytest.mark.parametrize("topology", ["star", "chain"])
def test_finish_reaches_a_node_two_hops_away(topology):
    """star: 1 and 2 only know the centre 0; chain: 2 attaches to 1, 1 to 0 (topology 'alone').
    Node 2 finishes; node 1 hears of it only through another node."""
    g = tcp_group(3)
    if topology == "star":
        routers = [group_cfg(g, i, topology="star") for i in range(3)]
        waits = [[1, 2], [0], [0]]
    else:
        routers = [{"node_id": 0, "address": g[0], "topology": "alone"},
                   {"node_id": 1, "address": g[1], "topology": "alone", "attach_to": [g[0]]},
                   {"node_id": 2, "address": g[2], "topology": "alone", "attach_to": [g[1]]}]
        waits = [[1], [0, 2], [1]]
    cfgs = [{"router": routers[i], "mode": "run", "wait_peers": waits[i]} for i in range(3)]
    middle = 0 if topology == "star" else 1
    cfgs[middle]["announce"] = "connected"  # the middle node has both neighbours: the path exists
    cfgs[2].update(mode="finish", finish_after=30, wait_event="connected")
    outs = results([start(c) for c in cfgs])
    assert outs[2]["got_event"]
    assert all(o["finished"] for o in outs)
    assert sorted(outs[1]["peers_at_start"]) == waits[1]  # 1 and 2 are not connected: two hops
    assert 2 not in outs[1]["peers_at_start"] or topology == "chain"
    assert outs[1]["steps"] < 6000 and outs[0]["steps"] < 6000


def test_a_node_leaving_its_with_block_ends_its_peers_runs():
    g = tcp_group(3)
    cfgs = [{"router": group_cfg(g, i), "mode": "run", "wait_peers": [j for j in range(3) if j != i]}
            for i in range(3)]
    cfgs[0].update(mode="leave", finish_after=30)
    outs = results([start(c) for c in cfgs])
    assert outs[0]["steps"] == 30
    assert outs[1]["finished"] and outs[2]["finished"]
    assert outs[1]["steps"] < 6000 and outs[2]["steps"] < 6000


@pytest.mark.slow
def test_a_node_believed_dead_still_gets_the_finish():
    """Node 0 is paused past the heartbeat timeout: node 1 declares it dead and finishes. Node 0, resumed,
    still ends its run (told over a fresh connection)."""
    g = tcp_group(2)
    runner = start({"router": group_cfg(g, 0, heartbeat_timeout=1.5, peerless_timeout=600), "mode": "run",
                    "wait_peers": [1]})
    finisher = start({"router": group_cfg(g, 1, heartbeat_timeout=1.5, peerless_timeout=600),
                      "mode": "finish_when_dead", "dead": 0, "wait_peers": [0], "linger_after": 5.0})
    try:
        assert json.loads(runner.stdout.readline())["ready"]
        assert json.loads(finisher.stdout.readline())["ready"]
        time.sleep(1.0)  # both connected and running
        runner.send_signal(signal.SIGSTOP)
        line = finisher.stdout.readline()  # after node 0 was declared dead and the finish was sent
        assert json.loads(line)["finish_sent"], line
    finally:
        runner.send_signal(signal.SIGCONT)
    r, f = results([runner, finisher])
    assert f["saw_dead"] and f["stats"]["finish_to_lost"] >= 1
    assert r["finished"] and r["steps"] < 6000, r["stderr"][-3000:]


def alone_after_its_peer_died(mode, **extra_env):
    """Nodes 0 and 1 run (node 0 with peerless_timeout 1 s); node 1 is then killed (SIGKILL: no goodbye).
    Returns the group, node 0's and node 1's processes."""
    g = tcp_group(2)
    alone = start({"router": group_cfg(g, 0, heartbeat_timeout=1.5, peerless_timeout=1.0), "mode": mode,
                   "wait_peers": [1]}, **extra_env)
    peer = start({"router": group_cfg(g, 1, heartbeat_timeout=1.5), "mode": "run", "wait_peers": [0]})
    try:
        assert json.loads(alone.stdout.readline())["ready"]
        assert json.loads(peer.stdout.readline())["ready"]
        assert wait_until(lambda: False, timeout=1.0) is False  # both running
        peer.kill()
        peer.wait(10)
    except BaseException:
        for p in (alone, peer):
            if p.poll() is None:
                p.kill()
                p.wait(5)
        raise
    return g, alone, peer


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["run", "wait"])
def test_a_node_whose_peers_are_all_gone_ends_within_peerless_timeout(mode):
    """Node 1 is killed (SIGKILL: no goodbye). Node 0, running or blocked in task.wait_for without a
    timeout, is released once its peers are dead for peerless_timeout s (here 1 s)."""
    g, alone, peer = alone_after_its_peer_died(mode)
    try:
        out, err = alone.communicate(timeout=TIMEOUT)
    finally:
        for p in (alone, peer):
            if p.poll() is None:
                p.kill()
                p.wait(5)
    assert alone.returncode == 0, err[-5000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["finished"]
    assert "no peer for" in err and "finishing the run" in err
    if mode == "wait":
        assert res["wait_result"] is None
    else:
        assert res["steps"] < 6000


@pytest.mark.slow
def test_while_the_launcher_restarts_nodes_a_lone_node_waits_for_the_restart_past_peerless_timeout():
    """With RLPIPE_MAX_RESTARTS set (rlpipe run --auto-recover, Ray --max-restarts), a node whose only peer died
    waits for the peer's restart longer than peerless_timeout (a restarted learner loads its checkpoint and
    replay buffer before it listens again): here the peer comes back after 4x peerless_timeout and ends the
    run with a finish that node 0 receives."""
    g, alone, peer = alone_after_its_peer_died("run", RLPIPE_MAX_RESTARTS="1")
    restarted = None
    try:
        assert wait_until(lambda: alone.poll() is not None, timeout=4.0) is False  # still there, alone
        restarted = start({"router": group_cfg(g, 1, heartbeat_timeout=1.5), "mode": "finish", "finish_after": 30,
                           "wait_peers": [0]})
        r, = results([restarted])
        out, err = alone.communicate(timeout=TIMEOUT)
    finally:
        for p in (alone, peer, restarted):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(5)
    assert alone.returncode == 0, err[-5000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["finished"] and res["steps"] < 6000, err[-3000:]
    assert "no peer for" not in err, err[-3000:]  # ended by the restarted peer's finish, not by the bound
    assert r["finished"] and 0 in r["peers_at_start"], r
