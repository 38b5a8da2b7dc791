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
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional, Sequence, Tuple

import zmq as _zmq

from . import codec
from .decoder import _decode_small_event
from .wire import (_BODY_AT, _compare_digest, _INF, _MAC_LEN, _MIN_FRAME, _NONCE, _KIND_NAMES, _SEQ_AT, _unpack_seq, FINISH,
                   K_BYE, K_DATA, K_HEARTBEAT, K_HELLO, K_LARGE, PEER_LEFT, WIRE_MAX)

log = logging.getLogger("rlpipe.parallel")
_NOBLOCK = _zmq.NOBLOCK

_HANDBACK = 0.002  # the receiver thread reads again this long after the last wait() returned
_SHORT = 0.2  # a reader whose deadline is closer than this receives with a timeout (see _read)
_PARK = 0.02  # while a wait() is in progress the receiver thread looks every _PARK s (and is woken at the end
# of a wait longer than that); after a shorter wait it is back within _PARK + _HANDBACK s at most


class Reader:
    """The reading side; a mixin of ``ZmqRouter`` (uses its ``_pull``, ``_rx_*`` hand-over state, ``_halt``,
    ``_stopping``, ``_on_message``, ``_open`` and the membership methods)."""

    def _set_rcvtimeo(self, ms: int) -> None:
        if ms != self._rcvtimeo:
            self._pull.setsockopt(_zmq.RCVTIMEO, ms)
            self._rcvtimeo = ms

    def _read(self, until: Callable[[], Any], deadline: float = _INF) -> bool:
        """Receive and handle messages until ``until()`` is true (returns True), ``deadline`` passes or the
        router stops. The caller holds the read token.

        A receive blocks without a timeout (arming a timer per receive costs, on a VM especially) until a
        message or a wake-up arrives: a waiter wakes the receiver thread, ``stop`` and ``wake()`` wake any
        reader, the heartbeat thread wakes the reader for a notice (a dead peer) and wakes a waiting thread
        every 50 ms; in the last ``_SHORT`` s before ``deadline`` a receive times out by itself."""
        again = _zmq.Again
        recv = self._pull.recv
        handle = self._handle
        on_data = self._on_data
        mac = self._mac
        known_get = self._rx_known.get
        wake_msg = self._wake_msg
        monotonic = time.monotonic
        delivered = self._delivered  # bytes read per connection (its ZAP user id), for ``transport_auth``
        wire_size = self._wire_size
        zmq_error = _zmq.ZMQError
        if self._rcvtimeo != -1:
            self._set_rcvtimeo(-1)
        while not self._halt:
            if until():
                return True
            if self._notices:
                self._deliver_notices()
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
                    self._drop("oversize", f"a multipart message of {total} bytes (no genuine one has more than "
                               f"{cap}): not checked or decoded")
                    continue
                handle(first, extra)
            elif len(first) < _MIN_FRAME:
                if first != wake_msg:
                    handle(first, ())  # dropped as malformed
            elif _compare_digest(mac(first[_MAC_LEN:] if len(first) < 8192 else memoryview(first)[_MAC_LEN:]),
                                 first[:_MAC_LEN]):
                # Authenticated. The common case in one pass: a data message, in order, from a sender
                # incarnation already checked once (its header prefix is known, see ``_check_header``).
                known = known_get(first[_MAC_LEN:_SEQ_AT])
                if known is not None:
                    window = known[0]
                    seq, nbufs = _unpack_seq(first, _SEQ_AT)
                    if seq == window.floor + 1 and not nbufs and not window.bits:
                        window.floor = window.top = seq
                        on_data(first, (), known[1], known[2], _BODY_AT)
                        continue
                self._act(first, (), self._check_header(first, ()))
            elif first != wake_msg:
                self._drop("auth_failed", "HMAC check failed (forged or corrupted)")
        return False

    def _recv_loop(self) -> None:
        me = self._recv_ident = threading.get_ident()
        token = self._rx_token
        stopping = self._stopping
        monotonic = time.monotonic

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
                self._rx_owner = me
                try:
                    if not stopping.is_set():
                        self._read(step_aside)
                finally:
                    self._end_reading()
                if self._sleepers:
                    self._notify_sleepers()
        except _zmq.ContextTerminated:
            pass
        except Exception:  # a bug here must not go unnoticed: peers would see this node as dead
            log.exception("node %d: receiver thread crashed", self.node_id)
            raise

    def _end_reading(self) -> None:
        """Give the read token back. After stop() the reader closes the PULL socket itself: stop() closes it
        only if it gets the token, which a listener that does not return may keep (closing twice is fine)."""
        self._rx_owner = None
        if self._halt:
            self._pull.close(0)
        self._rx_token.release()

    def _notify_sleepers(self) -> None:
        with self._rx_cond:
            self._rx_cond.notify_all()

    def _send_wake(self) -> None:
        with self._waker_lock:
            if self._waker is not None:
                try:
                    self._waker.send(self._wake_msg, _NOBLOCK)
                except _zmq.ZMQError:
                    pass  # a wake-up is already queued (or the router is closing)

    def wake(self) -> None:
        """Make threads in ``wait`` check their condition now. Call it from another thread after changing
        what such a condition reads (``task.wait_for`` does; messages delivered by the reader need no wake)."""
        if self._sleepers:
            self._notify_sleepers()
        owner = self._rx_owner
        if owner is not None and owner != self._recv_ident and owner != threading.get_ident():
            self._send_wake()  # a waiter blocked in recv

    def wait(self, until: Callable[[], Any], timeout: float) -> bool:
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
        if not self._started or self._halt or self._rx_owner == me:
            return self._wait_without_reading(until, timeout)
        monotonic = time.monotonic
        entered = monotonic()
        deadline = entered + timeout if timeout < _INF else _INF
        token = self._rx_token
        with self._rx_lock:
            self._waiting += 1
        try:
            while True:
                if token.acquire(False):
                    self._rx_owner = me
                    try:
                        done = not self._halt and self._read(until, deadline)
                    except _zmq.ContextTerminated:
                        done = False
                    finally:
                        self._end_reading()
                    if self._sleepers:
                        self._notify_sleepers()
                    if done:
                        return True
                else:  # another thread reads: it delivers, and notifies us after each message
                    if self._rx_owner == self._recv_ident:
                        self._send_wake()  # the receiver thread is blocked in recv: make it step aside now
                    cond = self._rx_cond
                    with cond:
                        self._sleepers += 1
                        try:
                            if token.locked() and not until():
                                cond.wait(max(0.0, min(deadline - monotonic(), 0.05)))
                        finally:
                            self._sleepers -= 1
                if until():
                    return True
                if self._halt or monotonic() >= deadline:
                    return bool(until())
        finally:
            with self._rx_lock:
                self._waiting -= 1
                last = not self._waiting
            self._wait_exit = now = monotonic()
            self._waited = True
            if last and now - entered > _PARK:
                self._park.set()  # a long wait: the receiver thread may be asleep for _PARK s; read again now

    def _wait_without_reading(self, until: Callable[[], Any], timeout: float) -> bool:
        """``wait`` for a thread that cannot read: inside ``on_message`` (the reader is busy in it), or with
        the router not running. Sleeps in slices, woken by the reader's deliveries and by ``wake()``."""
        monotonic = time.monotonic
        deadline = monotonic() + timeout if timeout < _INF else _INF
        cond = self._rx_cond
        while not until() and not self._stopping.is_set():
            left = deadline - monotonic()
            if left <= 0:
                break
            with cond:
                self._sleepers += 1
                try:
                    cond.wait(min(left, 0.05))
                finally:
                    self._sleepers -= 1
        return bool(until())

    def _handle(self, first: bytes, extra: Sequence[Any]) -> None:
        """Check and act on one message: ``first`` frame (MAC + header + body) and the ``extra`` frames.
        (``_read`` does the same for a single frame, with the common case inline.)"""
        self._act(first, extra, self._open(first, extra))

    def _act(self, first: bytes, extra: Sequence[Any], header: Optional[Tuple[Any, ...]]) -> None:
        """Act on a message that passed ``_open`` (``header``: its fields; None: it was dropped)."""
        if header is None:
            return
        magic, version, kind, sender, session, dest, dest_session, seq, nbufs = header
        start = _BODY_AT + _NONCE if extra else _BODY_AT  # the body, read in place
        if kind == K_DATA:
            self._on_data(first, extra, sender, session, start)
            return
        if kind == K_LARGE:
            peer = self._peers.get(sender)
            if peer is not None and peer.session == session:
                peer.rx_count += 1
            self._on_large_head(first, sender, session, seq, nbufs)
            return
        try:
            value = codec.decode(first[start:], extra)
        except codec.DecodeError as e:
            self._drop("malformed", f"{_KIND_NAMES[kind]} from node {sender}: {e}")
            return
        peer = self._peers.get(sender)
        if peer is not None and peer.session == session:
            peer.rx_count += 1
            if not peer.alive and kind == K_HEARTBEAT:
                self._revive(peer)
        self.stats["control_received"] += 1
        if kind == K_HEARTBEAT:
            return
        if kind == K_BYE:
            if peer is not None and peer.session == session and peer.alive:
                log.log(logging.DEBUG if self._finish_seen else logging.INFO, "node %d: node %d left",
                        self.node_id, sender)
                self._lose(peer, PEER_LEFT)
                self._deliver_notices()
            return
        if not isinstance(value, dict) or not isinstance(value.get("address"), str) \
                or not isinstance(value.get("token"), int):
            self._drop("malformed", f"{_KIND_NAMES[kind]} from node {sender} lacks address/token")
            return
        try:
            if kind == K_HELLO:
                self._on_hello(sender, session, value)
            else:
                self._on_ack(sender, session, value)
        except Exception as e:  # e.g. an announced address ZeroMQ cannot connect to
            self._drop("malformed", f"{_KIND_NAMES[kind]} from node {sender}: {type(e).__name__}: {e}")
        self._deliver_notices()

    def _on_data(self, first: bytes, extra: Sequence[Any], sender: int, session: int, start: int) -> None:
        """Decode and deliver an authenticated data message (its body starts at ``first[start]``)."""
        small = None if extra else _decode_small_event(first, start)  # leaves only: nothing to import, quick
        if small is not None:
            event, args, kwargs = small
        else:
            # Decoding counts as busy, like a listener: a slow decode (the first tensor imports torch, which
            # can take many seconds on a loaded machine) must not make this node hold the peers' silence
            # against them (the heartbeat thread sees the reader busy, see liveness).
            self._deliveries += 1
            self._handler_event = "(decoding a message)"
            self._in_handler = True
            try:
                event, args, kwargs = codec.decode_event(first, extra, start, try_small=False, adopt=True)
            except codec.DecodeError as e:
                self._in_handler = False
                self._drop("malformed", f"data from node {sender} is not (event, args, kwargs): {e}")
                return
        peer = self._peers.get(sender)
        if peer is not None and peer.session == session:
            peer.rx_count += 1
            if not peer.alive:
                try:
                    self._revive(peer)
                except Exception:
                    log.exception("node %d: could not reconnect to node %d", self.node_id, sender)
        self.stats["received"] += 1
        if event == FINISH:
            self._spread_finish(came_from=sender)  # on to every other peer (``ending``)
        self._deliver(event, args, kwargs)

    def _deliver(self, event: str, args: tuple, kwargs: dict) -> None:
        self._deliveries += 1
        self._handler_event = event
        self._in_handler = True
        try:
            self._on_message(event, args, kwargs)  # type: ignore[misc]
        except Exception:
            log.exception("node %d: listener of remote event %r raised", self.node_id, event)
        finally:
            self._in_handler = False
        if self._sleepers:
            self._notify_sleepers()

    def _deliver_notices(self) -> None:
        while self._notices:
            event, args = self._notices.popleft()
            self._deliver(event, args, {})
