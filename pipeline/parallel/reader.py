"""Reading the bus: who reads the PULL socket, and the hand-over between threads.

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

Here: ``Reader`` (the read token, the receiver thread, ``wait`` and ``wake``). It hands what it reads to
``delivery.Delivery`` (acting on what was read, and calling ``on_message``), and uses ``sleepers.Sleepers``
(waiters that do not read) and ``waker.Waker`` (the in-process wake-up of a reader blocked in ``recv``).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

import zmq as _zmq

from .wire import _BODY_AT, _compare_digest, _INF, _MAC_LEN, _MIN_FRAME, _SEQ_AT, _unpack_seq, WIRE_MAX

if TYPE_CHECKING:
    from .delivery import Delivery
    from .node_state import NodeState
    from .sleepers import Sleepers
    from .waker import Waker
    from .wire import Framer

log = logging.getLogger("rlpipe.parallel")

_HANDBACK = 0.002  # the receiver thread reads again this long after the last wait() returned
_SHORT = 0.2  # a reader whose deadline is closer than this receives with a timeout (see _read)
_PARK = 0.02  # while a wait() is in progress the receiver thread looks every _PARK s (and is woken at the end
# of a wait longer than that); after a shorter wait it is back within _PARK + _HANDBACK s at most


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
