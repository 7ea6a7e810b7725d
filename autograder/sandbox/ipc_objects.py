"""System V and POSIX IPC objects that a sandbox uid left behind, found and removed.

Without an IPC namespace (the uid drop alone, as on Gradescope) a shared-memory segment, a
semaphore set or a message queue outlives the process that made it: it holds memory that no
limit of the child counts, and it is a channel from one grading to the next (a kernel that ran
hidden tests posts them, a later test of another student reads them). The seccomp filter
refuses the calls that make them (:mod:`autograder.sandbox.syscall_filter`); this is the
second wall, run when a grading's processes are reaped (:meth:`os_boundary.Boundary.reap`):
whatever the sandbox's uid owns, or created, is removed.

Linux only (``/proc/sysvipc``); elsewhere nothing is found.

>>> parse_table("key shmid perms uid cuid\\n 0 7 600 70001 70001\\n 0 8 600 0 0\\n", "shmid")
[(7, 70001, 70001), (8, 0, 0)]
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

SYSVIPC = Path("/proc/sysvipc")
# the table of each kind in /proc/sysvipc and the column holding an object's id
KINDS = {"shm": "shmid", "sem": "semid", "msg": "msqid"}
IPC_RMID = 0
# where POSIX shared memory and message queues live as files (when mounted)
POSIX_FOLDERS = (Path("/dev/shm"), Path("/dev/mqueue"))


def parse_table(text: str, id_column: str) -> list[tuple[int, int, int]]:
    """(id, owner uid, creator uid) of each row of a ``/proc/sysvipc`` table."""
    lines = text.splitlines()
    if not lines:
        return []
    head = lines[0].split()
    at_id, at_uid, at_cuid = head.index(id_column), head.index("uid"), head.index("cuid")
    rows = []
    for line in lines[1:]:
        cells = line.split()
        if len(cells) == len(head):
            rows.append((int(cells[at_id]), int(cells[at_uid]), int(cells[at_cuid])))
    return rows


def sysv_objects() -> dict[str, list[tuple[int, int, int]]]:
    """Every System V IPC object of this IPC namespace: kind -> [(id, uid, cuid)]."""
    found: dict[str, list[tuple[int, int, int]]] = {}
    for kind, column in KINDS.items():
        try:
            found[kind] = parse_table((SYSVIPC / kind).read_text(), column)
        except (OSError, ValueError):
            found[kind] = []
    return found


def owned_by(uids: range | set[int] | frozenset[int]) -> list[str]:
    """What the ``uids`` own or created, as ``kind:id`` (System V) or the file's path (POSIX)."""
    out = [f"{kind}:{ident}" for kind, rows in sysv_objects().items()
           for ident, uid, cuid in rows if uid in uids or cuid in uids]
    for folder in POSIX_FOLDERS:
        try:
            out += [entry.path for entry in os.scandir(folder) if entry.stat(follow_symlinks=False).st_uid in uids]
        except OSError:
            pass
    return out


def remove(kind: str, ident: int) -> bool:
    """Removes one System V object (``kind`` as in :data:`KINDS`); whether it went. A segment
    still attached goes when its last user detaches (the reaped processes)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if kind == "shm":
        return libc.shmctl(ident, IPC_RMID, None) == 0
    if kind == "sem":
        return libc.semctl(ident, 0, IPC_RMID, 0) == 0
    if kind == "msg":
        return libc.msgctl(ident, IPC_RMID, None) == 0
    raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


def remove_owned_by(uid: int) -> int:
    """Removes every IPC object ``uid`` owns or created (the grader runs as root: it may).
    Returns how many it removed."""
    removed = sum(remove(kind, ident) for kind, rows in sysv_objects().items()
                  for ident, owner, creator in rows if uid in (owner, creator))
    for folder in POSIX_FOLDERS:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    os.unlink(entry.path)
                    removed += 1
            except OSError:
                pass
    return removed
