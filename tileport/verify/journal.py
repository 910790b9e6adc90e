"""The accuracy task's journal: one record per finished case, appended and flushed as it completes, so an
interrupted run (kill -9, a lost worker, a reboot) loses at most the cases in flight and ``--resume`` picks
up the rest.

A run's folder holds ``request.json`` (what was asked: enough to rebuild the same cases) and
``journal.bin``: records of a 4-byte little-endian length and a pickled ``CaseOutcome``. Pickle keeps every
float bit for bit, so a resumed run's report equals an uninterrupted one's. A record cut short by a kill is
dropped on reading (its case runs again); a case recorded twice (a retried batch) counts once.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import time
from pathlib import Path

from .outcome import CaseOutcome

REQUEST, RECORDS = "request.json", "journal.bin"
SYNC_SECONDS = 2.0  # fsync at most this often: a reboot loses at most these seconds of finished cases
_LEN = struct.Struct("<I")


class JournalError(ValueError):
    """A folder that holds no run to resume, or one made for another request."""


def write_request(folder: Path, request: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REQUEST).write_text(json.dumps(request, indent=1, sort_keys=True))


def read_request(folder: Path) -> dict:
    path = folder / REQUEST
    if not path.is_file():
        raise JournalError(f"{folder} holds no verify run to resume (no {REQUEST})")
    return json.loads(path.read_text())


def _scan(data: bytes) -> tuple[dict[int, CaseOutcome], int]:
    """The whole records of a journal's bytes by case index, and where the last whole record ends."""
    out: dict[int, CaseOutcome] = {}
    at = 0
    while at + _LEN.size <= len(data):
        (n,) = _LEN.unpack_from(data, at)
        if at + _LEN.size + n > len(data):
            break  # cut short by a kill: that case runs again
        outcome = pickle.loads(data[at + _LEN.size : at + _LEN.size + n])
        out.setdefault(outcome.index, outcome)
        at += _LEN.size + n
    return out, at


def read(folder: Path) -> dict[int, CaseOutcome]:
    """Every whole record of the folder's journal, by case index (a torn last record is left out)."""
    path = folder / RECORDS
    return _scan(path.read_bytes())[0] if path.is_file() else {}


class Writer:
    """Appends outcomes to a folder's journal; flushed per record, synced to disk every SYNC_SECONDS."""

    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / RECORDS
        if path.is_file():  # drop a torn tail, so new records follow whole ones
            whole = _scan(path.read_bytes())[1]
            with open(path, "r+b") as f:
                f.truncate(whole)
        self._f = open(path, "ab")
        self._synced = time.monotonic()

    def append(self, outcome: CaseOutcome) -> None:
        blob = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        self._f.write(_LEN.pack(len(blob)) + blob)
        self._f.flush()
        if time.monotonic() - self._synced > SYNC_SECONDS:
            os.fsync(self._f.fileno())
            self._synced = time.monotonic()

    def close(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
