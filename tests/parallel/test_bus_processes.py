"""The ZeroMQ bus between real processes on loopback: delivery per topology, no duplicates, late joiner,
dead-peer detection, a 20,000-message burst arriving complete. Every wait is bounded."""
import json
import os
import signal

import pytest

from parallel_helpers import events, finish, start_node, tcp_group

pytestmark = pytest.mark.multiprocess


def _mesh_cfg(group, i, **extra):
    others = [j for j in group if j != i]
    return {"router": {"node_id": i, "address": group[i], "peers": group, "topology": "mesh"},
            "expect_from": others, **extra}


def test_mesh_three_nodes_each_event_once_and_direct():
    group = tcp_group(3)
    procs = [start_node(_mesh_cfg(group, i, direct=(i + 1) % 3)) for i in group]
    outs = finish(procs)
    for out in outs:
        me = out["node"]
        hellos = sorted(a[0] for a in events(out, "hello"))
        assert hellos == sorted(j for j in group if j != me), out  # every peer's broadcast exactly once
        assert events(out, "direct") == [[(me - 1) % 3]]  # the one direct message, from the right node
        assert all(kw == {"k": "v"} for e, a, kw in out["received"] if e == "hello")
        st = out["stats"]
        assert st["auth_failed"] == st["malformed"] == st["duplicates"] == st["gaps"] == 0, st


def test_star_spokes_talk_only_to_the_centre():
    group = tcp_group(3)
    procs = []
    for i in group:
        router = {"node_id": i, "address": group[i], "peers": group, "topology": "star"}
        if i == 0:
            router["expected_peers"] = 2
        procs.append(start_node({"router": router, "expect_from": [1, 2] if i == 0 else [0],
                                 "done_from": [1, 2] if i == 0 else [0]}))
    outs = {o["node"]: o for o in finish(procs)}
    assert sorted(a[0] for a in events(outs[0], "hello")) == [1, 2]
    for spoke in (1, 2):
        assert [a[0] for a in events(outs[spoke], "hello")] == [0]  # nothing from the other spoke
        assert outs[spoke]["peers_at_end"] == [0]


def test_late_joiner_attaches_to_one_node_and_reaches_the_whole_mesh():
    group = tcp_group(3)
    joiner = tcp_group(1)[0]
    # The running group: nodes 0 and 1 in a mesh; they also wait for the joiner's hello.
    procs = [start_node({"router": {"node_id": i, "address": group[i], "peers": {0: group[0], 1: group[1]}},
                         "expect_from": [1 - i, 7], "done_from": [1 - i, 7], "wait_peers": [1 - i, 7]})
             for i in (0, 1)]
    late = start_node({"router": {"node_id": 7, "address": joiner, "topology": "mesh",
                                  "attach_to": [group[1]], "expected_peers": 2},
                       "expect_from": [0, 1], "sleep_before_start": 1.0})
    outs = {o["node"]: o for o in finish(procs + [late])}
    assert sorted(a[0] for a in events(outs[7], "hello")) == [0, 1]
    for i in (0, 1):
        assert sorted(a[0] for a in events(outs[i], "hello")) == [1 - i, 7]


def test_alone_topology_connects_only_to_attach_to():
    group = tcp_group(2)
    hub = start_node({"router": {"node_id": 0, "address": group[0], "topology": "alone", "expected_peers": 1},
                      "expect_from": [5]})
    leaf = start_node({"router": {"node_id": 5, "address": group[1], "topology": "alone",
                                  "attach_to": [group[0]]}, "expect_from": [0]})
    outs = {o["node"]: o for o in finish([hub, leaf])}
    assert [a[0] for a in events(outs[0], "hello")] == [5]
    assert [a[0] for a in events(outs[5], "hello")] == [0]


def test_ipc_protocol(tmp_path):
    group = {0: f"ipc://{tmp_path}/n0.sock", 1: f"ipc://{tmp_path}/n1.sock"}
    outs = finish([start_node(_mesh_cfg(group, i)) for i in group])
    for out in outs:
        assert [a[0] for a in events(out, "hello")] == [1 - out["node"]]


def test_burst_of_20000_arrives_complete():
    group = tcp_group(2)
    sender = start_node(_mesh_cfg(group, 0, burst=[1, 20000, 1024]))
    receiver = start_node(_mesh_cfg(group, 1, expect_burst=20000))
    outs = {o["node"]: o for o in finish([sender, receiver], timeout=120)}
    assert outs[1]["burst"] == [20000, 20000 * 1024]
    assert outs[0]["stats"]["sent"] >= 20000 and outs[0]["stats"]["undeliverable"] == 0


def test_killed_peer_is_detected_and_the_others_go_on():
    group = tcp_group(3)
    victim = start_node({"router": {"node_id": 2, "address": group[2], "peers": group}, "serve": 60})
    procs = [start_node({"router": {"node_id": i, "address": group[i], "peers": group,
                                    "heartbeat_timeout": 1.0},
                         "expect_dead": [2], "expect_from": [1 - i], "done_from": [1 - i]}) for i in (0, 1)]
    for p in [victim] + procs:  # everyone connected to everyone
        line = p.stdout.readline()
        assert json.loads(line)["peers"] == sorted(set(group) - {json.loads(line)["node"]}), line
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    outs = finish(procs)
    for out in outs:
        assert events(out, "__peer_dead__") == [[2]]  # detected, reported once
        assert [a[0] for a in events(out, "hello")] == [1 - out["node"]]  # the others still talk
        assert "node 2 is dead" in out["stderr"]
