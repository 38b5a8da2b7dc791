"""The shared key that authenticates messages between rlpipe nodes.

Looked up in this order: an explicit ``key`` argument, the ``RLPIPE_KEY`` environment variable (hex digits
are decoded, any other text is used as UTF-8), the file named by ``RLPIPE_KEY_FILE``. ``rlpipe run``
generates a random key for a run whose nodes all live on this machine and passes it to its children in
``RLPIPE_KEY``; a run across machines needs the same key set on every machine.
"""
from __future__ import annotations

import os
import secrets
import string

KEY_ENV = "RLPIPE_KEY"
KEY_FILE_ENV = "RLPIPE_KEY_FILE"
MIN_KEY_BYTES = 16

_HOWTO = (
    f"set the same secret on every node: `export {KEY_ENV}=$(python -c 'import secrets; "
    f"print(secrets.token_hex(32))')` (or put it in a file and set {KEY_FILE_ENV}=/path/to/file); "
    "`rlpipe run` generates one by itself when all nodes run on this machine"
)


class MissingKeyError(RuntimeError):
    """No shared key is configured for the message bus."""


def _from_text(text: str, where: str) -> bytes:
    text = text.strip()
    if not text:
        raise MissingKeyError(f"the key in {where} is empty: {_HOWTO}")
    if len(text) % 2 == 0 and all(c in string.hexdigits for c in text):
        return bytes.fromhex(text)
    return text.encode("utf-8")


def resolve_key(key: object = None, multi_machine: bool = False) -> bytes:
    """Return the shared key as bytes or raise ``MissingKeyError`` saying how to set one."""
    if key is not None:
        out = key if isinstance(key, bytes) else _from_text(str(key), "the key argument")
    elif os.environ.get(KEY_ENV):
        out = _from_text(os.environ[KEY_ENV], f"${KEY_ENV}")
    elif os.environ.get(KEY_FILE_ENV):
        path = os.environ[KEY_FILE_ENV]
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise MissingKeyError(f"cannot read the key file {path} (${KEY_FILE_ENV}): {e}") from None
        try:
            out = _from_text(raw.decode("utf-8"), path)
        except UnicodeDecodeError:
            out = raw.strip()
    else:
        where = "a run across machines" if multi_machine else "the message bus"
        raise MissingKeyError(f"no shared key for {where}: {_HOWTO}")
    if len(out) < MIN_KEY_BYTES:
        raise MissingKeyError(f"the shared key has {len(out)} bytes; use at least {MIN_KEY_BYTES} "
                              f"(e.g. 32 random bytes as 64 hex digits): {_HOWTO}")
    return out


def generate_key() -> str:
    """A fresh random key as hex (what ``rlpipe run`` puts in ``RLPIPE_KEY`` for local runs)."""
    return secrets.token_hex(32)
