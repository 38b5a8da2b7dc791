"""Reading the node layout of Slurm and Kubernetes jobs from their environment."""
import pytest

from pipeline.parallel.cluster import expand_hostlist, expand_tasks_per_node, layout
from pipeline.parallel.launch import plan_cluster_node


def test_expand_hostlist():
    assert expand_hostlist("gpu[01-03,7],cpu5") == ["gpu01", "gpu02", "gpu03", "gpu7", "cpu5"]
    assert expand_hostlist("a,b") == ["a", "b"]
    assert expand_hostlist("n[8-10]") == ["n8", "n9", "n10"]


def test_expand_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE"):
        expand_tasks_per_node("two")


def test_slurm_layout_block_distribution():
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "localhost,127.0.0.1",
           "SLURM_TASKS_PER_NODE": "2(x2)"}
    rank, peers, listen = layout("slurm", env, 6000)
    assert rank == 3
    assert peers == {0: "tcp://localhost:6000", 1: "tcp://localhost:6001", 2: "tcp://127.0.0.1:6000",
                     3: "tcp://127.0.0.1:6001"}
    assert listen == "tcp://127.0.0.1:6001"
    (spec,) = plan_cluster_node("slurm", env=env, ports="6000")
    assert spec.node_id == 3 and spec.roles == ["evaluator"] and spec.advertise == peers[3]


def test_k8s_layout_and_errors():
    env = {"RLPIPE_NODES": "127.0.0.1:7000,127.0.0.1:7001", "RLPIPE_RANK": "1"}
    (spec,) = plan_cluster_node("k8s", env=env, roles="learner:collector")
    assert spec.node_id == 1 and spec.roles == ["collector"] and spec.address == "tcp://127.0.0.1:7001"
    with pytest.raises(ValueError, match="RLPIPE_RANK"):
        layout("k8s", {"RLPIPE_NODES": "h:1"}, 0)
    with pytest.raises(ValueError, match="SLURM_PROCID"):
        layout("slurm", {}, 0)
