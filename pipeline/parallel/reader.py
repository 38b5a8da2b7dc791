"""Reading the bus: who reads the PULL socket, the hand-over between threads, and delivery.

One thread at a time reads the PULL socket (it holds the read token), handles what arrives in arrival order
and calls ``on_message`` on its own thread, so ``on_message`` is never called concurrently. The reader is
the receiver thread, except while some thread is inside ``wait(until, timeout)``: then the waiting thread
reads and delivers itself (a reply reaches it without a thread switch) and the receiver thread steps aside
until no thread has waited for ``_HANDBACK`` (2 ms; it looks every 20 ms while a wait is in progress and is
woken when a wait longer than that ends). The hand-over happens only between two messages, so order is
kept; a waiter that finds the receiver thread blocked in ``recv`` wakes it (an in-process wake-up message)
so that it steps aside at once. Hence ``on_message`` may run on the receiver thread or on any thread that
calls ``wait`` (``task.wait_for`` does), and it must not block for long on either. ``wait`` called from
inside ``on_message`` does not read (the reader is busy in the listener). After a burst of short waits
ends, messages that arrive meanwhile wait at most ~22 ms for the receiver thread. Readers block in ``recv``
without a timeout (a timer per receive is costly on a VM); wake-ups come from waiters, ``wake()``, ``stop``
and the heartbeat thread (every 50 ms to a waiting thread, so that it checks its condition and deadline; at
once for a notice such as a dead peer). ``stop`` releases every waiter and takes the token for good before
closing the socket.

The pieces: ``Reader`` (the read token, the receiver thread, ``wait`` and ``wake``), ``Delivery`` (acting on
what was read, and calling ``on_message``), ``Sleepers`` (waiters that do not read) and ``Waker`` (the
in-process wake-up of a reader blocked in ``recv``).
"""
from __future__ import annotations

import logging
import secrets
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence

import zmq as _zmq

from . import codec
from .codec_format import Buffer
from .decoder import _decode_small_event
from .wire import (_BODY_AT, _compare_digest, _INF, _MAC_LEN, _MIN_FRAME, _NONCE, _KIND_NAMES, _SEQ_AT,
                   _unpack_seq, FINISH, K_BYE, K_DATA, K_HEARTBEAT, K_HELLO, K_LARGE, PEER_LEFT, WIRE_MAX, Header,
                   is_chunk)

if TYPE_CHECKING:
    from ..runtime.router import OnMessage
    from .ending import Ending
    from .handshake import Handshake
    from .liveness import Membership, Notices, Peers
    from .node_state import NodeState
    from .wire import Framer

log = logging.getLogger("rlpipe.parallel")
_NOBLOCK = _zmq.NOBLOCK

_HANDBACK = 0.002  # the receiver thread reads again this long after the last wait() returned
_SHORT = 0.2  # a reader whose deadline is closer than this receives with a timeout (see _read)
_PARK = 0.02  # while a wait() is in progress the receiver thread looks every _PARK s (and is woken at the end
# of a wait longer than that); after a shorter wait it is back within _PARK + _HANDBACK s at most


class Waker:
    """The in-process wake-up of a reader blocked in ``recv``: a PUSH socket (connected once the router
    started, ``connect``; closed by ``stop``) to the router's own PULL socket that sends ``msg``, which the
    reader recognises and skips. Owns the socket and the lock that serialises its use."""

    def __init__(self) -> None:
        self.msg = secrets.token_bytes(16)
        self._sock: Any = None
        self._lock = threading.Lock()

    def connect(self, ctx: _zmq.Context) -> None:
        self._sock = ctx.socket(_zmq.PUSH)
        self._sock.setsockopt(_zmq.SNDHWM, 2)
        self._sock.setsockopt(_zmq.LINGER, 0)
        self._sock.connect("inproc://rlpipe-wake")

    def send(self) -> None:
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.send(self.msg, _NOBLOCK)
                except _zmq.ZMQError:
                    pass  # a wake-up is already queued (or the router is closing)

    def close(self) -> None:
        with self._lock:
            self._sock.close(0)
            self._sock = None


class Sleepers:
    """Threads in ``wait`` that are not reading: they sleep on ``cond`` until a message was delivered,
    ``wake()``, ``stop`` or a slice of 50 ms ends. Owns ``lock`` (the condition's, which also guards the
    reader's count of threads in ``wait``) and ``count``, how many sleep now (read without the lock by
    whoever may notify them: no notify when nobody sleeps)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.count = 0

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()


class Reader:
    """Who reads the PULL socket, and the hand-over between threads (see the module docstring): the
    receiver thread (``run``), ``wait`` and ``wake``. Owns the read token, its holder (``owner``, a thread
    ident; the receiver thread is ``receiver``), the receiver thread's parking, the count of threads in
    ``wait`` and when the last one returned, the PULL socket (``attach``, at ``start``) and its receive
    timeout, and the halt flag (``halt``). Hands what it reads to ``delivery``, checking the common case (an
    in-order data message of a known sender incarnation) itself with ``framer``'s MAC and known prefixes."""

    def __init__(self, node: NodeState, framer: Framer, delivery: Delivery, sleepers: Sleepers,
                 waker: Waker) -> None:
        self._node, self._framer, self._delivery = node, framer, delivery
        self._sleepers, self._waker = sleepers, waker
        self._pull: Any = None
        self._delivered: Optional[Dict[str, int]] = None  # the guard's per-connection count of bytes read
        self._wire_size: Callable[[int], int] = int  # the guard's: bytes a frame took on its connection
        self._halt = False  # True once stop() began to stop reading (a plain attribute: cheap to test per message)
        # Reading the PULL socket (see the module docstring): one reader at a time, the holder of _token; the
        # receiver thread steps aside while threads are in wait() and reads themselves.
        self._token = threading.Lock()
        self.owner: Optional[int] = None  # thread ident of the token holder
        self.receiver: Optional[int] = None  # the receiver thread's ident
        self._park = threading.Event()  # the receiver thread sleeps on it while threads in wait() read
        self._waiting = 0  # threads inside wait() (under the sleepers' lock)
        self._wait_exit = -1e9  # monotonic time the last wait() returned
        self._waited = False  # a wait() returned less than _HANDBACK s ago (or the receiver has not looked)
        self._rcvtimeo = -2  # the PULL socket's current RCVTIMEO (ms; -1: none)

    def attach(self, pull: object, delivered: Optional[Dict[str, int]], wire_size: Callable[[int], int]) -> None:
        """The bound PULL socket to read, and the transport guard's count of bytes read per connection (None
        where connections are not watched) with the wire size of a frame."""
        self._pull = pull
        self._delivered = delivered
        self._wire_size = wire_size

    def _set_rcvtimeo(self, ms: int) -> None:
        if ms != self._rcvtimeo:
            self._pull.setsockopt(_zmq.RCVTIMEO, ms)
            self._rcvtimeo = ms

    def _read(self, until: Callable[[], object], deadline: float = _INF) -> bool:
        """Receive and handle messages until ``until()`` is true (returns True), ``deadline`` passes or the
        router stops. The caller holds the read token.

        A receive blocks without a timeout (arming a timer per receive costs, on a VM especially) until a
        message or a wake-up arrives: a waiter wakes the receiver thread, ``stop`` and ``wake()`` wake any
        reader, the heartbeat thread wakes the reader for a notice (a dead peer) and wakes a waiting thread
        every 50 ms; in the last ``_SHORT`` s before ``deadline`` a receive times out by itself."""
        again = _zmq.Again
        recv = self._pull.recv
        delivery, framer = self._delivery, self._framer
        handle = delivery.handle
        on_data = delivery.on_data
        notices = delivery.notices
        mac = framer.mac
        known_get = framer.rx_known.get
        wake_msg = self._waker.msg
        monotonic = time.monotonic
        delivered = self._delivered  # bytes read per connection (its ZAP user id), for ``transport_auth``
        wire_size = self._wire_size
        zmq_error = _zmq.ZMQError
        if self._rcvtimeo != -1:
            self._set_rcvtimeo(-1)
        while not self._halt:
            if until():
                return True
            if notices:
                delivery.deliver_notices()
                continue
            if deadline != _INF:
                left = deadline - monotonic()
                if left < _SHORT:
                    if left <= 0:
                        return False
                    self._set_rcvtimeo(int(left * 1000) + 1)
            try:
                frame = recv(copy=False)
            except again:
                continue
            first = frame.bytes
            if delivered is not None:
                try:
                    uid = frame.get("User-Id")
                except zmq_error:  # the in-process wake-up has no connection
                    uid = None
                if uid is not None:
                    delivered[uid] = delivered.get(uid, 0) + wire_size(len(first))
            if frame.more:
                # ZeroMQ hands over a multipart message once all of it arrived, each frame within WIRE_MAX
                # (MAXMSGSIZE); no genuine one is larger in all (``wire``): the sum is checked here, before
                # any hashing or decoding.
                extra = []
                total = len(first)
                cap = WIRE_MAX
                while frame.more:
                    frame = recv(copy=False)
                    total += len(frame)
                    if delivered is not None and uid is not None:
                        delivered[uid] = delivered.get(uid, 0) + wire_size(len(frame))
                    if total <= cap:
                        extra.append(frame.buffer)
                if total > cap:
                    extra.clear()
                    self._node.drop("oversize", f"a multipart message of {total} bytes (no genuine one has more "
                                    f"than {cap}): not checked or decoded")
                    continue
                handle(first, extra)
            elif len(first) < _MIN_FRAME:
                if first != wake_msg:
                    handle(first, ())  # dropped as malformed
            elif _compare_digest(mac(first[_MAC_LEN:] if len(first) < 8192 else memoryview(first)[_MAC_LEN:]),
                                 first[:_MAC_LEN]):
                # Authenticated. The common case in one pass: a data message, in order, from a sender
                # incarnation already checked once (its header prefix is known, see ``Framer.check_header``).
                known = known_get(first[_MAC_LEN:_SEQ_AT])
                if known is not None:
                    window = known[0]
                    seq, nbufs = _unpack_seq(first, _SEQ_AT)
                    if seq == window.floor + 1 and not nbufs and not window.bits:
                        window.floor = window.top = seq
                        on_data(first, (), known[1], known[2], _BODY_AT)
                        continue
                delivery.act(first, (), framer.check_header(first, ()))
            elif first != wake_msg:
                self._node.drop("auth_failed", "HMAC check failed (forged or corrupted)")
        return False

    def run(self) -> None:
        """The receiver thread."""
        me = self.receiver = threading.get_ident()
        token = self._token
        stopping = self._node.stopping
        monotonic = time.monotonic
        sleepers = self._sleepers

        def step_aside() -> bool:  # a thread is (or was just) in wait(): it reads
            if self._waiting:
                return True
            if self._waited:
                if monotonic() - self._wait_exit < _HANDBACK:
                    return True
                self._waited = False
            return False

        park = self._park
        try:
            while not stopping.is_set():
                if step_aside():
                    park.wait(_PARK if self._waiting else _HANDBACK)
                    park.clear()
                    continue
                if not token.acquire(timeout=_HANDBACK):
                    continue
                self.owner = me
                try:
                    if not stopping.is_set():
                        self._read(step_aside)
                finally:
                    self._end_reading()
                if sleepers.count:
                    sleepers.notify()
        except _zmq.ContextTerminated:
            pass
        except Exception:  # a bug here must not go unnoticed: peers would see this node as dead
            log.exception("node %d: receiver thread crashed", self._node.node_id)
            raise

    def _end_reading(self) -> None:
        """Give the read token back. After stop() the reader closes the PULL socket itself: stop() closes it
        only if it gets the token, which a listener that does not return may keep (closing twice is fine)."""
        self.owner = None
        if self._halt:
            self._pull.close(0)
        self._token.release()

    def wake(self) -> None:
        """Make threads in ``wait`` check their condition now. Call it from another thread after changing
        what such a condition reads (``task.wait_for`` does; messages delivered by the reader need no wake)."""
        if self._sleepers.count:
            self._sleepers.notify()
        owner = self.owner
        if owner is not None and owner != self.receiver and owner != threading.get_ident():
            self._waker.send()  # a waiter blocked in recv

    def wait(self, until: Callable[[], object], timeout: float) -> bool:
        """Block until ``until()`` is true, at most ``timeout`` s (``inf`` allowed), or until the router stops.
        Returns ``bool(until())`` at the end. ``until`` must have no side effects (it is called repeatedly).

        Meanwhile the calling thread reads incoming messages itself and calls ``on_message`` for them on
        this thread (the receiver thread steps aside), so a reply reaches the waiting thread without a
        thread switch. ``until`` is checked after each message, on ``wake()``, and every 50 ms or so.
        From inside ``on_message`` (the reading thread) nothing more is read until the listener returns,
        so such a wait only sees what other threads change (and ``wake()``)."""
        if until():
            return True
        me = threading.get_ident()
        if not self._node.started or self._halt or self.owner == me:
            return self._wait_without_reading(until, timeout)
        monotonic = time.monotonic
        entered = monotonic()
        deadline = entered + timeout if timeout < _INF else _INF
        token = self._token
        sleepers = self._sleepers
        with sleepers.lock:
            self._waiting += 1
        try:
            while True:
                if token.acquire(False):
                    self.owner = me
                    try:
                        done = not self._halt and self._read(until, deadline)
                    except _zmq.ContextTerminated:
                        done = False
                    finally:
                        self._end_reading()
                    if sleepers.count:
                        sleepers.notify()
                    if done:
                        return True
                else:  # another thread reads: it delivers, and notifies us after each message
                    if self.owner == self.receiver:
                        self._waker.send()  # the receiver thread is blocked in recv: make it step aside now
                    cond = sleepers.cond
                    with cond:
                        sleepers.count += 1
                        try:
                            if token.locked() and not until():
                                cond.wait(max(0.0, min(deadline - monotonic(), 0.05)))
                        finally:
                            sleepers.count -= 1
                if until():
                    return True
                if self._halt or monotonic() >= deadline:
                    return bool(until())
        finally:
            with sleepers.lock:
                self._waiting -= 1
                last = not self._waiting
            self._wait_exit = now = monotonic()
            self._waited = True
            if last and now - entered > _PARK:
                self._park.set()  # a long wait: the receiver thread may be asleep for _PARK s; read again now

    def _wait_without_reading(self, until: Callable[[], object], timeout: float) -> bool:
        """``wait`` for a thread that cannot read: inside ``on_message`` (the reader is busy in it), or with
        the router not running. Sleeps in slices, woken by the reader's deliveries and by ``wake()``."""
        monotonic = time.monotonic
        deadline = monotonic() + timeout if timeout < _INF else _INF
        sleepers = self._sleepers
        cond = sleepers.cond
        stopping = self._node.stopping
        while not until() and not stopping.is_set():
            left = deadline - monotonic()
            if left <= 0:
                break
            with cond:
                sleepers.count += 1
                try:
                    cond.wait(min(left, 0.05))
                finally:
                    sleepers.count -= 1
        return bool(until())

    def halt(self) -> None:
        """Stop reading (``stop``): a reader stops at its next message and closes the socket when it gives the
        token back."""
        self._halt = True

    def release(self) -> None:
        """Release the receiver thread, a reader blocked in ``recv`` and every sleeping waiter (``stop``)."""
        self._park.set()
        self._waker.send()  # a reader blocked in recv returns now
        self._sleepers.notify()

    def take_for_good(self, ident: Optional[int]) -> bool:
        """Whether thread ``ident`` holds the read token now, or got it within 2 s (never given back): then
        nobody touches the PULL socket again (``stop``, after ``halt``)."""
        return self.owner == ident or self._token.acquire(timeout=2.0)

    def close(self) -> None:
        self._pull.close(0)


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
            # against them (the heartbeat thread sees the reader busy, see liveness).
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
