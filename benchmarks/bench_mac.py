"""Message authentication cost per message on this machine: what the bus uses against the alternatives.

For message sizes from a heartbeat to a large inline body, the CPU time to sign (MAC of header + body, as
``emit`` does) and to verify (MAC of the received frame after its tag, then a constant-time compare) with:

* HMAC-SHA256 from the two padded-key SHA-256 states prepared once (``wire.keyed_hmac``: the bus's choice),
* HMAC-SHA256 by copying a keyed ``hmac`` object (what the bus did before),
* keyed BLAKE2b (``hashlib.blake2b(key=..., digest_size=32)``, copied per message).

Also AES-GMAC and HMAC-SHA256 for 1 MiB (the payload frames of large messages use AES-GMAC, ``wire``).
Best of several rounds; interleaved, so the ratios hold on a loaded machine.

    python benchmarks/bench_mac.py
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import sys
import timeit
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv: Optional[List[str]] = None) -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    from pipeline.parallel.wire import keyed_hmac
    key = os.urandom(32)
    mac, mac2 = keyed_hmac(key)
    hmac_obj = hmac.new(key, digestmod="sha256")
    hmac_obj = getattr(hmac_obj, "_hmac", None) or hmac_obj
    blake = hashlib.blake2b(key=key, digest_size=32)
    compare = hmac.compare_digest
    head = os.urandom(40)

    def sign_keyed(meta: bytes) -> bytes:
        return mac2(head, meta)

    def sign_hmac(meta: bytes) -> bytes:
        h = hmac_obj.copy()
        h.update(head)
        h.update(meta)
        return h.digest()

    def sign_blake(meta: bytes) -> bytes:
        h = blake.copy()
        h.update(head)
        h.update(meta)
        return h.digest()

    def verify(sign_one):
        def check(frame: bytes) -> bool:
            return compare(sign_one(frame[32:]), frame[:32])
        return check

    def one_keyed(data):
        return mac(data)

    def one_hmac(data):
        h = hmac_obj.copy()
        h.update(data)
        return h.digest()

    def one_blake(data):
        h = blake.copy()
        h.update(data)
        return h.digest()

    print(f"# load average {os.getloadavg()[0]:.1f}; microseconds per message (best of 7 rounds)")
    print(f"{'bytes':>7s}  {'sign: keyed HMAC':>17s} {'HMAC obj':>9s} {'BLAKE2b':>8s}   "
          f"{'verify: keyed HMAC':>19s} {'HMAC obj':>9s} {'BLAKE2b':>8s}")
    for size in (16, 100, 300, 1024, 4096, 16384):
        meta = os.urandom(size)
        frame = os.urandom(32) + head + meta
        n = max(2000, 2_000_000 // (size + 200))
        cells = []
        for fn, arg in ((sign_keyed, meta), (sign_hmac, meta), (sign_blake, meta),
                        (verify(one_keyed), frame), (verify(one_hmac), frame), (verify(one_blake), frame)):
            cells.append(min(timeit.repeat(lambda: fn(arg), number=n, repeat=7)) / n * 1e6)
        print(f"{size:7d}  {cells[0]:17.2f} {cells[1]:9.2f} {cells[2]:8.2f}   {cells[3]:19.2f} {cells[4]:9.2f} "
              f"{cells[5]:8.2f}")
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    big = os.urandom(1 << 20)
    gmac = AESGCM(os.urandom(32)).encrypt
    nonce = bytes(12)
    rows = (("AES-GMAC", lambda: gmac(nonce, b"", big)), ("HMAC-SHA256", lambda: mac(big)),
            ("BLAKE2b", lambda: one_blake(big)))
    print("1 MiB: " + ", ".join(f"{name} {min(timeit.repeat(fn, number=20, repeat=5)) / 20 * 1e6:.0f} us"
                                for name, fn in rows))


if __name__ == "__main__":
    main()
