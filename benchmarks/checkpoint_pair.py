"""The checkpoint of a long benchmark run that resumes: a state file and a replay buffer file written as one pair
that a kill at any instant cannot destroy, and found again on resume.

A pair is ``<stem>.ckpt`` (``torch.save`` of plain data: weights, counters, random generators, ...; it loads with
``torch.load(weights_only=True)``) and ``<stem>.buffer`` (``DequeBuffer.save_data``). :func:`save_pair` writes the
new pair to ``<stem>.buffer.new`` and ``<stem>.ckpt.new`` and flushes both to disk (fsync), then moves the old pair
aside (``.old``), renames the new pair into place, flushes the directory and only then removes the old pair. The
state file records which buffer file belongs to it (the file's size and a digest of its zip directory, which holds
the CRC-32 of every member), so the two halves of a pair are recognised under any of these names: at every instant
one complete pair is on disk.

On resume :func:`find_pair` picks the newest complete pair (with a one-line note when that is not the pair at the
final names), or stops the run with one line naming the damaged or missing file and ``--fresh``; :func:`settle`
puts the resumed pair under the final names and removes the rest; :func:`remove_pair` removes every file of a
finished run's pair. Pairs written before the pairing was recorded (a ``.ckpt`` without it) still resume, with the
``.buffer`` beside them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import time
import zipfile
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ['Pair', 'paths', 'save_pair', 'find_pair', 'settle', 'remove_pair', 'fingerprint', 'damage']

#: Key of the state dict under which :func:`save_pair` records the pairing.
META = 'pair'
#: The final names, then those of a save being written, then those of the pair it replaces.
SUFFIXES = ('', '.new', '.old')


@dataclasses.dataclass
class Pair:
    """A complete pair found by :func:`find_pair`: its files, the loaded state, and the line to print, if any."""
    ckpt: str
    buffer: str
    state: Dict[str, Any]
    note: Optional[str] = None


def paths(stem: str) -> Tuple[str, str]:
    """The final names of the pair: ``(<stem>.ckpt, <stem>.buffer)``."""
    return stem + '.ckpt', stem + '.buffer'


def _all_names(stem: str) -> List[str]:
    ckpt, buf = paths(stem)
    return [p + s for p in (ckpt, buf) for s in SUFFIXES]


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no directory handles (Windows): renames are as durable as the platform makes them
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def damage(path: str) -> Optional[str]:
    """Why ``path`` is not a complete zip archive (what ``torch.save`` writes): ``'missing'``, ``'damaged (...)'``;
    None when it is whole. Reads the archive's directory only (it is at the end: a cut-short file has lost it)."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return 'missing'
    except OSError as e:
        return f'damaged (it cannot be read: {e.strerror})'
    if size == 0:
        return 'damaged (empty: 0 bytes)'
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.header_offset + 30 + len(info.filename) + info.compress_size > size:
                    return f'damaged (truncated: {size:,} bytes)'
    except (zipfile.BadZipFile, OSError, ValueError):
        return f'damaged (truncated or not a torch file: {size:,} bytes)'
    return None


def fingerprint(path: str) -> str:
    """``'<size>:<digest>'`` of the zip archive at ``path``: its size and a SHA-256 of its directory (name, CRC-32
    and size of every member; torch >= 2.4 also stores an id of the save). Reads the directory only; equal for
    a file and its renamed or copied self, different for another save."""
    h = hashlib.sha256()
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            h.update(f'{info.filename}\0{info.CRC}\0{info.file_size}\n'.encode())
    return f'{os.path.getsize(path)}:{h.hexdigest()[:32]}'


def save_pair(stem: str, state: Dict[str, Any], write_buffer: Callable[[str], Any]) -> str:
    """Write ``state`` (plain data and tensors) to ``<stem>.ckpt`` and, with ``write_buffer(path)`` (e.g.
    ``buffer.save_data``), the buffer to ``<stem>.buffer``, so that a kill at any instant leaves one complete pair
    on disk: the previous one until the new one is complete. Returns the ``.ckpt`` path. An exception while the new
    files are written removes them and leaves the previous pair as it was."""
    import torch  # lazy: importing this module loads nothing heavy

    ckpt, buf = paths(stem)
    folder = os.path.dirname(os.path.abspath(ckpt))
    os.makedirs(folder, exist_ok=True)
    try:
        write_buffer(buf + '.new')
        _fsync_file(buf + '.new')
        state = dict(state)
        state[META] = {'buffer': fingerprint(buf + '.new'), 'saved_ns': time.time_ns()}
        torch.save(state, ckpt + '.new')
        _fsync_file(ckpt + '.new')
    except BaseException:
        for p in (buf + '.new', ckpt + '.new'):
            _remove(p)
        raise
    # From here on every file is whole, and find_pair pairs them under any name: the old pair aside, the new in.
    for p in (ckpt, buf):
        if os.path.lexists(p):
            os.replace(p, p + '.old')
    os.replace(buf + '.new', buf)
    os.replace(ckpt + '.new', ckpt)
    _fsync_dir(folder)
    for p in (ckpt + '.old', buf + '.old'):
        _remove(p)
    return ckpt


def _load_state(path: str) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """(state, None) or (None, why it is not a usable state file)."""
    import torch

    why = damage(path)
    if why is not None:
        return None, why
    try:
        state = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:  # noqa: BLE001  (any unreadable file: say which and why, do not fail here)
        return None, f'damaged (it does not load with torch.load(weights_only=True): {type(e).__name__})'
    if not isinstance(state, dict):
        return None, f'damaged (it holds a {type(state).__name__}, not a checkpoint)'
    return state, None


def find_pair(stem: str, fresh_flag: str = '--fresh') -> Optional[Pair]:
    """The newest complete pair of ``stem``, None when none of its files exists. When the pair found is not the one
    under the final names (a save was cut short, or a file was damaged), :attr:`Pair.note` is one line saying which
    pair resumes and why. With files present but no complete pair, raises ``SystemExit`` with one line:
    ``error: <file> is damaged (...); rerun with --fresh to start over`` (``fresh_flag``), ``<file>`` the first of
    ``<stem>.ckpt`` and its buffer file that is not right."""
    ckpt, buf = paths(stem)
    if not any(os.path.lexists(p) for p in _all_names(stem)):
        return None
    prints: Dict[str, str] = {}
    for b in (buf + s for s in SUFFIXES):
        if os.path.exists(b) and damage(b) is None:
            try:
                prints[b] = fingerprint(b)
            except (zipfile.BadZipFile, OSError, ValueError):
                pass
    found = []  # (saved_ns, preference, ckpt path, buffer path, state)
    first_problem: Optional[Tuple[str, str]] = None  # (file, why) for the pair under the final names
    for rank, c in enumerate(ckpt + s for s in SUFFIXES):
        if not os.path.lexists(c):
            continue
        state, why = _load_state(c)
        if state is None:
            if c == ckpt:
                first_problem = (c, why or 'damaged')
            continue
        meta = state.get(META)
        if isinstance(meta, dict):
            match = next((b for b, fp in prints.items() if fp == meta.get('buffer')), None)
            saved = meta.get('saved_ns', 0)
        else:  # written before the pairing was recorded: its buffer is the one beside it
            match = buf if c == ckpt and buf in prints else None
            saved = 0
        if match is None:
            if c == ckpt:
                why_b = damage(buf) or (f'damaged (it is not the buffer saved with {ckpt})' if isinstance(meta, dict)
                                        else 'damaged')
                first_problem = (buf, why_b)
            continue
        found.append((saved, -rank, c, match, state))
    if not found:
        path, why = first_problem or (ckpt, 'missing')
        raise SystemExit(f'error: {path} is {why}; rerun with {fresh_flag} to start over')
    _, _, c, b, state = max(found, key=lambda f: f[:2])
    note = None
    if (c, b) != (ckpt, buf):
        reason = (f'{first_problem[0]} is {first_problem[1]}' if first_problem is not None
                  else 'the last save did not finish')
        note = f'warning: {reason}; resuming from the newest complete save, {c} with {b}'
    return Pair(c, b, state, note)


def settle(stem: str, pair: Pair) -> Pair:
    """Put ``pair`` (found by :func:`find_pair`) under the final names and remove every other file of ``stem``'s
    pairs; a kill meanwhile leaves ``pair`` complete under some of the names. Returns the pair at its new names."""
    ckpt, buf = paths(stem)
    if pair.buffer != buf:
        os.replace(pair.buffer, buf)
    if pair.ckpt != ckpt:
        os.replace(pair.ckpt, ckpt)
    _fsync_dir(os.path.dirname(os.path.abspath(ckpt)))
    for p in _all_names(stem):
        if p not in (ckpt, buf):
            _remove(p)
    return dataclasses.replace(pair, ckpt=ckpt, buffer=buf)


def remove_pair(stem: str) -> None:
    """Remove every file of ``stem``'s pairs (a run that finished)."""
    for p in _all_names(stem):
        _remove(p)
