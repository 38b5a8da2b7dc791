"""A peer that does not know the key and speaks ZMTP 3.0 by hand over a plain TCP socket (pyzmq itself never
sends a multipart message before its last frame, an attacker's program does): it connects to a node, greets,
and streams one multipart message of N MiB that never gets its last frame.

    python zmtp_raw_peer.py tcp://HOST:PORT N null|plain

``null``: the NULL mechanism (no security), as an unconfigured ZeroMQ socket. ``plain``: PLAIN with a
password that is not derived from the node's key; the frames follow the HELLO without waiting for an answer.
Prints ``queued K`` (MiB the kernel accepted) and then waits to be killed."""
import socket
import struct
import sys
import time


def greeting(mechanism: bytes) -> bytes:
    return b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + mechanism.ljust(20, b"\0") + b"\0" + b"\0" * 31


def command(body: bytes) -> bytes:
    return bytes([4, len(body)]) + body


def main() -> None:
    address, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    host, port = address[len("tcp://"):].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
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
