"""Sending on the bus (``ZmqRouter.emit``, ``Sender``) and backpressure.

High-water marks bound every queue. A sender whose peer does not keep up blocks in ``emit`` (polling in
short slices, released by ``stop`` or by the peer being declared dead) for at most ``send_timeout`` seconds,
then gets ``BackpressureTimeout``. Nothing is dropped silently: a message for a dead or unknown peer is
counted in ``stats["undeliverable"]`` and logged. Once ``"__finish__"`` was sent or received, a send no
longer waits under backpressure (the message is counted as undeliverable and logged), so finishing never
hangs on a stalled peer.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Optional, Sequence

import zmq as _zmq

from . import codec
from .codec_format import Buffer
from .encoder import encode_event as _encode_event
from .wire import _BODY_AT, _MIN_FRAME, _NONCE, K_BYE, K_DATA, WIRE_MAX, _Large, _pack_seq

if TYPE_CHECKING:
    from .peers import Peer, Peers
    from .node_state import NodeState
    from .wire import Framer

log = logging.getLogger("rlpipe.parallel")
_NOBLOCK = _zmq.NOBLOCK
_zsend: Any = getattr(getattr(_zmq, "backend", None), "Socket", _zmq.Socket).send  # without pyzmq's Python layer


class BackpressureTimeout(TimeoutError):
    """A peer did not accept a message within ``send_timeout`` seconds (it is alive but not reading)."""


def send_nowait(sock: _zmq.Socket, frames: Sequence[Buffer]) -> bool:
    """Send a one-frame message if ``sock`` takes it now; False if its queue is full."""
    zmq = _zmq
    try:
        sock.send(frames[0], zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False


class Sender:
    """``emit`` and the bounded, backpressured send of one message to one peer (see the module docstring).
    Owns nothing but its settings: it sends to the entries of ``peers`` (each under its ``lock``, advancing
    its ``next_seq``), signs with ``framer``, counts ``sent``, ``undeliverable`` and ``control_sent`` and
    reads whether the router runs or the run finishes (``node``)."""

    def __init__(self, node: NodeState, peers: Peers, framer: Framer, send_timeout: float, hwm: int,
                 max_frame_size: int, max_message_size: int, topology: str) -> None:
        self._node, self._peers, self._framer = node, peers, framer
        self.send_timeout, self.hwm = send_timeout, hwm
        self.max_frame_size, self.max_message_size = max_frame_size, max_message_size
        self.topology = topology  # named when a message for an unknown node is not sent

    def emit(self, event: str, args: tuple = (), kwargs: Optional[dict] = None, to: Optional[int] = None) -> bool:
        """``ZmqRouter.emit`` but for passing "__finish__" on (which the router does when this returns True:
        the event was sent, or tried, to its targets; False: ``to`` is dead or unknown, counted and logged)."""
        node = self._node
        if node.stopped or not node.started:
            raise RuntimeError(f"node {node.node_id}: emit({event!r}) on a router that is not running "
                               "(call start() first; after stop() build a new router)")
        if type(event) is not str:
            if not isinstance(event, str):
                raise TypeError(f"event names are str, got {type(event).__name__} {event!r}")
            event = str.__str__(event)
        meta, buffers = _encode_event(event, args if type(args) is tuple else tuple(args),
                                      kwargs if type(kwargs) is dict else dict(kwargs or {}))
        framer = self._framer
        digest: Any
        if buffers:
            # Snapshot large payloads (e.g. weights an optimizer updates in place right after emit), so that
            # what is sent to every peer is what the MAC covers; frames then go out without another copy.
            buffers = [b if type(b) is bytes else bytes(b) for b in buffers]
            self._check_size(event, len(meta), buffers)
            if _MIN_FRAME + _NONCE + len(meta) + sum(map(len, buffers)) <= WIRE_MAX:
                digest = framer.seal(buffers)
            else:  # chunked (``wire``): no ZeroMQ message of the bus is larger than WIRE_MAX
                digest = framer.seal_large(meta, buffers)
        elif _BODY_AT + len(meta) <= WIRE_MAX:
            digest = b""
        else:
            self._check_size(event, len(meta), buffers)
            digest = framer.seal_large(meta, buffers)
        stats = node.stats
        targets: Sequence[Peer]
        if to is None:
            targets = [p for p in list(self._peers.values()) if p.alive]  # list(): atomic snapshot
            if not targets:  # a broadcast that reaches nobody is not sent either: say so
                stats["undeliverable"] += 1
                n = stats["undeliverable"]
                if n <= 5 or n % 1000 == 0:
                    log.log(logging.DEBUG if node.finish_seen else logging.WARNING,
                            "node %d: event %r not sent: no peer is connected [%d undeliverable so far]",
                            node.node_id, event, n)
        else:
            p = self._peers.get(to if type(to) is int else int(to))  # one dict lookup: atomic
            if p is None or not p.alive:
                stats["undeliverable"] += 1
                n = stats["undeliverable"]
                if n <= 5 or n % 1000 == 0:
                    log.warning("node %d: event %r for node %s not sent: that node is %s [%d undeliverable so far]",
                                node.node_id, event, to, "dead or gone" if p is not None else
                                f"not connected (connected: {self._peers.alive_ids()}; topology {self.topology})",
                                n)
                return False
            targets = (p,)
        for p in targets:
            if not digest and p.lock.acquire(False):
                # The common case: one frame, nobody else is sending to this peer and its queue has room.
                try:
                    sock = p.sock
                    if p.alive and sock is not None:
                        head = p.data_prefix + _pack_seq(p.next_seq, 0)
                        try:
                            _zsend(sock, b"".join((framer.mac2(head, meta), head, meta)), _NOBLOCK)  # one copy of meta
                        except _zmq.Again:
                            pass  # queue full: the bounded wait of send_to
                        else:
                            p.next_seq += 1
                            stats["sent"] += 1
                            continue
                finally:
                    p.lock.release()
            self.send_to(p, K_DATA, meta, buffers, digest, event)
        return True

    def _check_size(self, event: str, meta_size: int, buffers: Sequence[Buffer]) -> None:
        """Refuse a message the peers would drop for its size (their caps are assumed equal to ours)."""
        biggest = max([meta_size, *map(len, buffers)])
        total = meta_size + sum(map(len, buffers))
        if biggest > self.max_frame_size or total > self.max_message_size:
            raise ValueError(
                f"node {self._node.node_id}: event {event!r} is too large to send: {total} bytes in all, the "
                f"largest part {biggest} bytes (max_message_size {self.max_message_size}, max_frame_size "
                f"{self.max_frame_size}); raise both caps on every node (ZmqRouter arguments) or send less")

    def send_to(self, p: Peer, kind: int, meta: bytes, buffers: Sequence[Buffer], digest: bytes,
                 what: str, timeout: Optional[float] = None, to_dead: bool = False) -> bool:
        """Send one message to ``p``. ``timeout=None``: block up to ``send_timeout`` and raise
        ``BackpressureTimeout`` after; a number: wait at most that long and return False on timeout.
        ``to_dead``: send even though ``p`` is declared dead (heartbeats that let it revive us)."""
        stats = self._node.stats
        lock = p.lock
        patient = timeout is None
        wait = self.send_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        got = lock.acquire(False) or (wait > 0 and lock.acquire(timeout=wait))
        if not got:
            if patient:
                stats["undeliverable"] += 1
                raise BackpressureTimeout(f"node {self._node.node_id}: waited {wait:.1f} s for other threads "
                                          f"sending to node {p.node_id}")
            return False
        try:
            if not (p.alive or to_dead) or p.sock is None:
                ok = False
            elif type(digest) is _Large:
                # Head and chunks back to back under the peer's lock (nothing of this sender comes between);
                # the sequence number is used up even if the rest cannot go out (the receiver drops what it
                # got of the message and counts it ``unfinished``). Each chunk waits at most ``wait`` s.
                messages = self._framer.large_messages(digest, p.node_id, p.session, p.next_seq)
                p.next_seq += 1
                ok = True
                try:
                    for m in messages:
                        ok = self.send(p.sock, m, deadline, None if to_dead else p)
                        if not ok:
                            break
                        deadline = time.monotonic() + wait
                except BackpressureTimeout:
                    if patient:
                        stats["undeliverable"] += 1
                        raise
                    ok = False
            else:
                frames = self._framer.frames(kind, p.node_id, p.session, p.next_seq, meta, buffers, digest)
                try:
                    ok = self.send(p.sock, frames, deadline, None if to_dead else p)
                except BackpressureTimeout:
                    if patient:
                        stats["undeliverable"] += 1
                        raise
                    ok = False
                if ok:
                    p.next_seq += 1
        finally:
            p.lock.release()
        if kind == K_DATA:
            if ok:
                stats["sent"] += 1
            else:
                stats["undeliverable"] += 1
                log.warning("node %d: event %r for node %d not delivered: the peer died or the router stopped",
                            self._node.node_id, what, p.node_id)
        elif ok:
            stats["control_sent"] += 1
        return ok

    def send(self, sock: _zmq.Socket, frames: Sequence[Buffer], block_until: float, peer: Optional[Peer],
              flushing: bool = False) -> bool:
        """Send one message; under backpressure wait in short slices until ``block_until``.
        Returns False if the peer died or the router stopped meanwhile."""
        zmq = _zmq
        big = len(frames) > 1
        if not big:  # the common case: one frame that fits
            try:
                sock.send(frames[0], zmq.NOBLOCK)
                return True
            except zmq.Again:
                pass
        while True:
            try:
                if big:
                    # Without copying: pyzmq's copying send of a large frame costs ~0.35 ms per MiB here (a fresh
                    # buffer each time), zero-copy ~0.01 ms. The frames are immutable bytes (``emit``
                    # snapshots payloads), held by ZeroMQ until they are on the wire.
                    sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
                else:
                    sock.send(frames[0], zmq.NOBLOCK)
                return True
            except zmq.Again:
                pass
            if peer is not None and not peer.alive:
                return False
            now = time.monotonic()
            if now >= block_until:
                raise BackpressureTimeout(
                    f"node {self._node.node_id}: node {peer.node_id if peer else '?'} accepted no message for "
                    f"{self.send_timeout:.1f} s (its queue of {self.hwm} messages is full and it is alive but "
                    "not reading, or it is not connected yet); raise send_timeout or make it consume faster")
            node = self._node
            if (node.stopped or node.finish_seen) and not flushing:
                if node.finish_seen and not node.stopped:
                    log.warning("node %d: the run is finishing; not waiting for node %s to accept more",
                                node.node_id, peer.node_id if peer else "?")
                return False  # stop() is running or the run finished: let go of the peer's lock
            sock.poll(int(min(0.05, block_until - now) * 1000) + 1, zmq.POLLOUT)

    def send_bye(self, linger: float) -> None:
        """Say goodbye (BYE) to every alive peer, each under its lock, waiting at most ``linger`` s for all
        of them together (``stop``)."""
        bye = codec.encode(None)[0]
        with self._peers.lock:
            peers = [p for p in self._peers.values() if p.alive]
        deadline = time.monotonic() + linger
        for p in peers:
            try:
                if p.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    try:
                        if p.sock is not None:
                            frames = self._framer.frames(K_BYE, p.node_id, p.session, p.next_seq, bye, (), b"")
                            self.send(p.sock, frames, max(deadline, time.monotonic() + 0.05), p, flushing=True)
                            p.next_seq += 1
                    finally:
                        p.lock.release()
            except BackpressureTimeout:
                pass
