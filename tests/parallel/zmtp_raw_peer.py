"""A peer that does not know the key and speaks ZMTP 3.0 by hand over a plain TCP socket (pyzmq itself never
sends a multipart message before its last frame, an attacker's program does): it connects to a node, greets,
and streams one multipart message of N MiB that never gets its last frame.

    python zmtp_raw_peer.py tcp://HOST:PORT N null|plain|declare-plain|declare-curve|keyed-F|keyed-frame

``null``: the NULL mechanism (no security), as an unconfigured ZeroMQ socket. ``plain``: PLAIN with a
password that is not derived from the node's key; the frames follow the HELLO without waiting for an answer.
``declare-plain`` / ``declare-curve``: a PLAIN / CURVE greeting, then one frame declared 256 MiB long, of
which N MiB are sent (a node buffers a frame it reads before the handshake is over: issue 28, item 1).
``keyed-F``: a peer that knows the PLAIN password (derived from ``$RLPIPE_KEY``, as a sniffer of the network
would) but not the key: it passes the handshake, then sends N MiB as multipart messages of F frames of 1 MiB
(``keyed-0``: one message that never ends). ``keyed-frame``: after the handshake, N single frames of 200 MiB.
Prints ``queued K`` (MiB the kernel accepted) and then waits to be killed."""
import socket
import struct
import sys
import time


def greeting(mechanism: bytes) -> bytes:
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + mechanism.ljust(20, b"\0") + b"\0" + b"\0" * 31


def command(body: bytes) -> bytes:
    return bytes([4, len(body)]) + body


def read_command(s: socket.socket) -> bytes:
    flags = recv_exact(s, 1)[0]
    size = struct.unpack(">Q", recv_exact(s, 8))[0] if flags & 2 else recv_exact(s, 1)[0]
    return recv_exact(s, size)


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        got = s.recv(n - len(out))
        if not got:
            raise OSError("closed")
        out += got
    return out


def keyed(s: socket.socket, n: int, mode: str, sent: list) -> None:
    """PLAIN handshake with the password a sniffer saw, then the frames; counts the MiB sent in ``sent``."""
    import os
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from pipeline.parallel.keys import resolve_key
    from pipeline.parallel.bus_credentials import USER as _USER, plain_password
    password = plain_password(resolve_key())
    s.sendall(greeting(b"PLAIN"))
    recv_exact(s, 64)
    s.sendall(command(b"\x05HELLO" + bytes([len(_USER)]) + _USER + bytes([len(password)]) + password))
    assert read_command(s).startswith(b"\x07WELCOME")
    s.sendall(command(b"\x08INITIATE\x0bSocket-Type" + struct.pack(">I", 4) + b"PUSH"))
    assert read_command(s).startswith(b"\x05READY")
    s.settimeout(30)
    if mode == "keyed-frame":
        big = b"\x02" * (1 << 20)
        for _ in range(n):
            s.sendall(b"\x02" + struct.pack(">Q", 200 << 20))  # LONG, last frame: a 200 MiB message
            for _ in range(200):
                s.sendall(big)
                sent[0] += 1
        return
    per = int(mode[len("keyed-"):])
    chunk = b"\x03" * (1 << 20)
    for i in range(n):
        last = per and (i + 1) % per == 0
        s.sendall((b"\x02" if last else b"\x03") + struct.pack(">Q", len(chunk)) + chunk)
        sent[0] += 1


def main() -> None:
    address, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    host, port = address[len("tcp://"):].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    chunk = b"\x01" * (1 << 20)
    queued = 0
    if mode.startswith("keyed-"):
        sent = [0]
        try:
            keyed(s, n, mode, sent)
            how = "all"
        except OSError:
            how = "closed"  # the node closed the connection
        print("queued", sent[0], how, flush=True)
        time.sleep(120)
        return
    if mode.startswith("declare-"):
        try:
            s.sendall(greeting(mode[len("declare-"):].upper().encode()))
            s.sendall(b"\x06" + struct.pack(">Q", 256 << 20))  # COMMAND | LONG: one frame of 256 MiB
            for _ in range(n):
                s.sendall(chunk)
                queued += 1
        except OSError:
            pass  # the node closed the connection
        print("queued", queued, flush=True)
        time.sleep(120)
        return
    if mode == "null":
        s.sendall(greeting(b"NULL") + command(b"\x05READY\x0bSocket-Type" + struct.pack(">I", 4) + b"PUSH"))
    else:
        s.sendall(greeting(b"PLAIN") + command(b"\x05HELLO\x06rlpipe\x0anot-my-key"))
    chunk = b"\x01" * (1 << 20)
    queued = 0
    try:
        for _ in range(n):
            s.sendall(b"\x03" + struct.pack(">Q", len(chunk)) + chunk)  # MORE | LONG: never the last frame
            queued += 1
    except OSError:
        pass  # the node closed the connection, or stopped reading
    print("queued", queued, flush=True)
    time.sleep(120)


if __name__ == "__main__":
    main()
