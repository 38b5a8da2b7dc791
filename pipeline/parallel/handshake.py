"""How nodes find each other (the HELLO/ACK handshake of ``ZmqRouter``).

A node sends HELLO to the addresses it was given (the group's addresses, filtered by the topology, plus
``attach_to``), repeating it every 0.2 s per address (a *probe*, ``probes``) until answered; the receiver
connects back to the address announced in the HELLO and answers ACK. In a ``mesh`` the ACK also lists the
receiver's peers, so a late joiner that attached to one node connects to the whole group.

A HELLO (the one message sent before the pair has sequence numbers) is made fresh by what its MAC covers:
the sender's node id and incarnation (session) in the header, and its clock time in the body. It is refused
(``stats["stale_hello"]``) when

* it is stamped more than ``hello_max_skew`` s from the receiver's clock;
* it comes from another session than the connected one and is not newer than every HELLO/ACK accepted
  from that node id (a captured HELLO of an earlier incarnation cannot reset a connection);
* it comes from an incarnation that left (BYE): a departed incarnation never rejoins, so a replayed HELLO
  cannot make it show as joined; or from one declared dead, stamped before it was declared dead (a dead
  peer is revived by its heartbeats, which carry sequence numbers, or by a HELLO it sent after that, e.g.
  when it was paused during its handshake);
* it is not newer than the newest HELLO accepted from that incarnation (a replay window of one timestamp
  per incarnation: a node stamps each HELLO it sends with its clock, 0.2 s apart).

The state is one timestamp per incarnation that sent a HELLO with a valid MAC (as bounded as the
anti-replay windows of ``replay``); a peer that knows only the connection credential (``transport_auth``)
cannot add to it.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Sequence, Tuple

from . import codec
from .codec_format import Buffer
from .sending import send_nowait
from .wire import _INF, K_ACK, K_HELLO

if TYPE_CHECKING:
    from .membership import Membership
    from .node_state import NodeState
    from .peers import Peers
    from .probes import Probes, _Probe
    from .sending import Sender
    from .wire import Framer

log = logging.getLogger("rlpipe.parallel")


def seed_addresses(node_id: int, group: Mapping[int, str], topology: str, attach_to: Sequence[str]) -> List[str]:
    """The addresses a node sends HELLOs to: the group's, filtered by the topology, plus ``attach_to``."""
    others = {i: a for i, a in group.items() if i != node_id}
    if topology == "mesh":
        seeds = list(others.values())
    elif topology == "star":
        centre = min([node_id, *group])
        seeds = [others[centre]] if centre != node_id else []
    else:
        seeds = []
    for a in attach_to:
        if a not in seeds:
            seeds.append(a)
    return seeds


class Handshake:
    """The HELLO/ACK handshake (see the module docstring): repeats HELLOs to the probes, answers HELLOs with
    ACKs, and registers the peers both make known (``membership``), in a mesh also probing the peers an ACK
    lists. Owns what refuses replayed HELLOs: per node id the newest HELLO/ACK time accepted
    (``_hello_newest``) and per incarnation the newest HELLO time (``_hello_last``), both under the state
    lock. Announces this node's ``address``, ``labels`` and ``roles`` (``node``) and ``topology``."""

    def __init__(self, node: NodeState, peers: Peers, probes: Probes, membership: Membership, framer: Framer,
                 sender: Sender, topology: str, hello_max_skew: float) -> None:
        self._node, self._peers, self._probes = node, peers, probes
        self._membership, self._framer, self._sender = membership, framer, sender
        self.topology, self.hello_max_skew = topology, hello_max_skew
        self._hello_newest: Dict[int, float] = {}  # per node id: the newest HELLO/ACK time accepted
        self._hello_last: Dict[Tuple[int, int], float] = {}  # per (node id, session): the newest HELLO time

    def announce(self) -> Dict[str, object]:
        """The body of a HELLO or ACK. ``time`` (this machine's clock) lets the receiver refuse replays."""
        node = self._node
        return {"address": node.address, "labels": sorted(node.labels), "roles": sorted(node.roles),
                "topology": self.topology, "time": time.time()}

    def hello_frames(self, token: int) -> List[Buffer]:
        msg = self.announce()
        msg["token"] = token
        return self._framer.frames(K_HELLO, -1, 0, 0, codec.encode(msg)[0], (), b"")

    def send_hellos(self, now: float, every: float) -> None:
        """Send a HELLO on each probe that sent none for ``every`` s (caller holds the state lock)."""
        for probe in list(self._probes.values()):
            if now - probe.last_sent >= every:
                self._send_hello(probe)

    def _send_hello(self, probe: _Probe) -> None:
        frames = self.hello_frames(probe.token)
        if send_nowait(probe.sock, frames):
            self._node.stats["control_sent"] += 1
        probe.last_sent = time.monotonic()

    def on_hello(self, sender: int, session: int, info: Dict[str, object]) -> None:
        node = self._node
        if sender == node.node_id:
            if session != node.session:
                log.error("node %d: another node at %s uses the same node id %d; ignoring it (give every node "
                          "a unique --node-ids)", node.node_id, info["address"], sender)
            return
        with self._peers.lock:
            if node.stopping.is_set():
                return
            if not self._hello_is_fresh(sender, session, info):
                return
            peer = self._membership.register(sender, session, info)
        ack = self.announce()
        ack["token"] = info["token"]
        if self.topology == "mesh" and info.get("topology") == "mesh":
            with self._peers.lock:
                ack["peers"] = [[i, p.address] for i, p in self._peers.items() if p.alive and i != sender]
        self._sender.send_to(peer, K_ACK, codec.encode(ack)[0], (), b"", "ack", timeout=0.5)

    def _hello_is_fresh(self, sender: int, session: int, info: Mapping[str, object]) -> bool:
        """Refuse a replayed HELLO (caller holds the state lock). A HELLO has no sequence number; a captured
        one replayed later could make this node drop its connection to the live incarnation of ``sender``.
        So a HELLO must be stamped within ``hello_max_skew`` s of our clock, and one from another session than
        the connected one must be newer than every HELLO or ACK accepted from that node id so far."""
        drop = self._node.drop
        t = info.get("time")
        if type(t) is not float:
            drop("stale_hello", f"HELLO from node {sender} carries no timestamp (an older rlpipe version?)")
            return False
        age = time.time() - t
        if abs(age) > self.hello_max_skew:
            drop("stale_hello", f"HELLO from node {sender} is stamped {age:+.1f} s from now (more than "
                 f"hello_max_skew={self.hello_max_skew:.0f} s: a replay, or the machines' clocks differ; "
                 "sync them with NTP or raise hello_max_skew)")
            return False
        known = self._peers.get(sender)
        newest = self._hello_newest.get(sender, -_INF)
        if (known is None or known.session != session) and t <= newest:
            drop("stale_hello", f"HELLO from node {sender} (session {session:x}) is older than one already "
                 f"accepted from that node id ({newest - t:.3f} s): a replay of an earlier incarnation")
            return False
        if known is not None and known.session == session and not known.alive:
            if known.left or not known.dead_wall:
                drop("stale_hello", f"HELLO from node {sender} (session {session:x}), which left: an "
                     "incarnation that said goodbye never rejoins (a replayed HELLO)")
                return False
            if t <= known.dead_wall:
                drop("stale_hello", f"HELLO from node {sender} (session {session:x}) stamped "
                     f"{known.dead_wall - t:.3f} s before it was declared dead: a replay cannot revive it")
                return False
        last = self._hello_last.get((sender, session), -_INF)
        if t <= last:
            drop("stale_hello", f"HELLO from node {sender} (session {session:x}) is not newer than the last one "
                 f"accepted from that incarnation ({last - t:.3f} s older or equal): a replay")
            return False
        self._hello_last[(sender, session)] = t
        if t > newest:
            self._hello_newest[sender] = t
        return True

    def on_ack(self, sender: int, session: int, info: Dict[str, Any]) -> None:
        node = self._node
        with self._peers.lock:
            if node.stopping.is_set():
                return
            probe = self._probes.pop(info["token"], None)
            if probe is None:
                return  # a repeated ACK for a probe already settled
            t = info.get("time")
            if type(t) is float and t > self._hello_newest.get(sender, -_INF):
                self._hello_newest[sender] = t  # an older HELLO of this node id is a replay from now on
            peer = self._peers.get(sender)
            if peer is not None and peer.session == session and peer.alive:
                probe.sock.close(0)  # we already have a connection to this node (it contacted us first)
            else:
                self._membership.register(sender, session, info, sock=probe.sock)
            known = {p.address for p in self._probes.values()}
            for item in info.get("peers", ()):
                if (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                        and isinstance(item[1], str) and item[0] != node.node_id):
                    other = self._peers.get(item[0])
                    if (other is None or not other.alive) and item[1] not in known:
                        self._probes.add(item[1])
                        known.add(item[1])
