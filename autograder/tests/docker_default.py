"""Runs a command the way Docker's default seccomp profile would let it run without
``CAP_SYS_ADMIN`` (Gradescope's container): no new namespaces. ``unshare``, ``setns`` and
``clone`` with a ``CLONE_NEW*`` flag fail with EPERM, ``clone3`` with ENOSYS (whose flags a
filter cannot read; the C library then falls back to ``clone``). bubblewrap then cannot start,
and the grader's ``auto`` mode must choose the uid drop with Landlock by itself.

Usage: ``python docker_default.py COMMAND [ARG...]`` (the filter is inherited across exec).
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

LD_ABS, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06
ALLOW, ERRNO, EPERM, ENOSYS = 0x7FFF0000, 0x00050000, 1, 38
AUDIT_ARCH_X86_64 = 0xC000003E
UNSHARE, SETNS, CLONE, CLONE3 = 272, 308, 56, 435
CLONE_NAMESPACES = 0x7E020000


def program() -> bytes:
    """The filter as ``struct sock_filter`` entries; a jump's offset counts from the next one."""
    eperm, enosys, allow_clone, check_flags = 11, 13, 12, 9  # indices of the targets below
    code = [
        (LD_ABS, 0, 0, 4),                                  # 0: arch
        (JEQ, 1, 0, AUDIT_ARCH_X86_64),                     # 1
        (RET, 0, 0, ALLOW),                                 # 2: another ABI: not this filter's
        (LD_ABS, 0, 0, 0),                                  # 3: the call's number
        (JEQ, eperm - 5, 0, UNSHARE),                       # 4
        (JEQ, eperm - 6, 0, SETNS),                         # 5
        (JEQ, enosys - 7, 0, CLONE3),                       # 6
        (JEQ, check_flags - 8, 0, CLONE),                   # 7
        (RET, 0, 0, ALLOW),                                 # 8
        (LD_ABS, 0, 0, 16),                                 # 9: clone's flags (low half)
        (JSET, eperm - 11, allow_clone - 11, CLONE_NAMESPACES),  # 10
        (RET, 0, 0, ERRNO | EPERM),                         # 11
        (RET, 0, 0, ALLOW),                                 # 12
        (RET, 0, 0, ERRNO | ENOSYS),                        # 13
    ]
    return b"".join(struct.pack("<HBBI", op, jt, jf, k) for op, jt, jf, k in code)


def install() -> None:
    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    code = program()
    fprog = SockFprog(len(code) // 8, code)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


if __name__ == "__main__":
    install()
    os.execvp(sys.argv[1], sys.argv[1:])
