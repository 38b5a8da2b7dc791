"""Acting on what the reader of ``ZmqRouter`` read, and calling ``on_message``: ``Delivery``.

Which thread reads, and when, is ``reader``: the thread that holds the read token hands each message to the
delivery, so ``on_message`` runs on that thread and is never called concurrently. The delivery checks a
message with the framer (``wire``), hands HELLO and ACK to the handshake, BYE and revivals to the membership
and a received "__finish__" to the ending, and delivers the notices (joined, dead and left peers and a
local finish) queued by the membership and the ending.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional, Sequence

from . import codec
from .codec_format import Buffer
from .decoder import _decode_small_event
from .wire import (_BODY_AT, _NONCE, _KIND_NAMES, FINISH, K_BYE, K_DATA, K_HEARTBEAT, K_HELLO, K_LARGE, PEER_LEFT,
                   Header, is_chunk)

if TYPE_CHECKING:
    from ..runtime.router import OnMessage
    from .ending import Ending
    from .handshake import Handshake
    from .membership import Membership
    from .node_state import NodeState
    from .peers import Notices, Peers
    from .sleepers import Sleepers
    from .wire import Framer

log = logging.getLogger("rlpipe.parallel")


class Delivery:
    """Acts on each message the reader read (``handle``; ``act`` once its header is checked) and calls
    ``on_message``: peers' messages, and the notices (``notices``: joined, dead and left peers and a local
    finish, queued by the membership and the ending). Owns ``on_message`` (set at ``start``) and what the
    heartbeat thread reads to see a listener, or a slow decode, running: ``in_handler``, ``handler_event``
    and ``deliveries`` (the number of calls so far). Checks with ``framer``, hands HELLO and ACK to the
    handshake, BYE and revivals to the membership and a received "__finish__" to the ending, counts what
    peers sent (``Peer.rx_count``), and notifies the ``sleepers`` after each delivery."""

    def __init__(self, node: NodeState, peers: Peers, framer: Framer, membership: Membership,
                 handshake: Handshake, ending: Ending, notices: Notices, sleepers: Sleepers) -> None:
        self._node, self._peers, self._framer = node, peers, framer
        self._membership, self._handshake, self._ending = membership, handshake, ending
        self.notices, self._sleepers = notices, sleepers
        self.on_message: Optional[OnMessage] = None
        self.in_handler = False
        self.handler_event = ""  # the remote event whose listener runs now (for the slow-listener warning)
        self.deliveries = 0  # number of on_message calls so far (the heartbeat thread spots long ones)

    def handle(self, first: bytes, extra: Sequence[Buffer]) -> None:
        """Check and act on one message: ``first`` frame (MAC + header + body) and the ``extra`` frames.
        (``Reader._read`` does the same for a single frame, with the common case inline.)"""
        framer = self._framer
        if is_chunk(first, extra):
            done = framer.on_chunk(first, extra[0])
            if done is not None:  # the last chunk of a chunked message
                meta, parts, sender, session = done
                self.on_data(meta, parts, sender, session, 0)
            return
        self.act(first, extra, framer.open(first, extra))

    def act(self, first: bytes, extra: Sequence[Buffer], header: Optional[Header]) -> None:
        """Act on a message that passed ``Framer.open`` (``header``: its fields; None: it was dropped)."""
        if header is None:
            return
        magic, version, kind, sender, session, dest, dest_session, seq, nbufs = header
        start = _BODY_AT + _NONCE if extra else _BODY_AT  # the body, read in place
        if kind == K_DATA:
            self.on_data(first, extra, sender, session, start)
            return
        if kind == K_LARGE:
            peer = self._peers.get(sender)
            if peer is not None and peer.session == session:
                peer.rx_count += 1
            self._framer.on_large_head(first, sender, session, seq, nbufs)
            return
        try:
            value = codec.decode(first[start:], extra)
        except codec.DecodeError as e:
            self._node.drop("malformed", f"{_KIND_NAMES[kind]} from node {sender}: {e}")
            return
        peer = self._peers.get(sender)
        if peer is not None and peer.session == session:
            peer.rx_count += 1
            if not peer.alive and kind == K_HEARTBEAT:
                self._membership.revive(peer)
        self._node.stats["control_received"] += 1
        if kind == K_HEARTBEAT:
            return
        if kind == K_BYE:
            if peer is not None and peer.session == session and peer.alive:
                log.log(logging.DEBUG if self._node.finish_seen else logging.INFO, "node %d: node %d left",
                        self._node.node_id, sender)
                self._membership.lose(peer, PEER_LEFT)
                self.deliver_notices()
            return
        if not isinstance(value, dict) or not isinstance(value.get("address"), str) \
                or not isinstance(value.get("token"), int):
            self._node.drop("malformed", f"{_KIND_NAMES[kind]} from node {sender} lacks address/token")
            return
        try:
            if kind == K_HELLO:
                self._handshake.on_hello(sender, session, value)
            else:
                self._handshake.on_ack(sender, session, value)
        except Exception as e:  # e.g. an announced address ZeroMQ cannot connect to
            self._node.drop("malformed", f"{_KIND_NAMES[kind]} from node {sender}: {type(e).__name__}: {e}")
        self.deliver_notices()

    def on_data(self, first: bytes, extra: Sequence[Buffer], sender: int, session: int, start: int) -> None:
        """Decode and deliver an authenticated data message (its body starts at ``first[start]``)."""
        small = None if extra else _decode_small_event(first, start)  # leaves only: nothing to import, quick
        if small is not None:
            event, args, kwargs = small
        else:
            # Decoding counts as busy, like a listener: a slow decode (the first tensor imports torch, which
            # can take many seconds on a loaded machine) must not make this node hold the peers' silence
            # against them (the heartbeat thread sees the reader busy, see heartbeat).
            self.deliveries += 1
            self.handler_event = "(decoding a message)"
            self.in_handler = True
            try:
                event, args, kwargs = codec.decode_event(first, extra, start, try_small=False, adopt=True)
            except codec.DecodeError as e:
                self.in_handler = False
                self._node.drop("malformed", f"data from node {sender} is not (event, args, kwargs): {e}")
                return
        peer = self._peers.get(sender)
        if peer is not None and peer.session == session:
            peer.rx_count += 1
            if not peer.alive:
                try:
                    self._membership.revive(peer)
                except Exception:
                    log.exception("node %d: could not reconnect to node %d", self._node.node_id, sender)
        self._node.stats["received"] += 1
        if event == FINISH:
            self._ending.spread_finish(came_from=sender)  # on to every other peer (``ending``)
        self.deliver(event, args, kwargs)

    def deliver(self, event: str, args: tuple, kwargs: dict) -> None:
        self.deliveries += 1
        self.handler_event = event
        self.in_handler = True
        try:
            self.on_message(event, args, kwargs)  # type: ignore[misc]  # a callable attribute, not a method
        except Exception:
            log.exception("node %d: listener of remote event %r raised", self._node.node_id, event)
        finally:
            self.in_handler = False
        if self._sleepers.count:
            self._sleepers.notify()

    def deliver_notices(self) -> None:
        notices = self.notices
        while notices:
            event, args = notices.popleft()
            self.deliver(event, args, {})
