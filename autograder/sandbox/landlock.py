"""Landlock: the file boundary of a child that runs without a mount namespace.

Where bubblewrap cannot make namespaces (a Docker container without ``CAP_SYS_ADMIN``, as
Gradescope's), the child is still another uid, but every file its uid may read is in reach: the
course copy's readable parts, ``/tmp``, another grading's leftovers, servelab's compiled core.
Landlock (Linux 5.13 and later; three system calls, no privilege needed, allowed by Docker's
default seccomp profile) lets a process give up, for good and for all its future children,
every file access that a rule does not grant. The child calls :func:`restrict` after its own
imports and before the student's code, with:

* **read** (files and folder listings): the interpreter's standard library, numpy's folder,
  the task's folder (the student's files, the task's helpers and the given files the grader
  copied there), ``/dev/null`` and ``/dev/urandom``;
* **write** (create, write, truncate, remove, bind a Unix socket): the scratch folder only (a
  notebook's kernel: its own folders);
* nothing executable (``execve`` of any file is refused; the seccomp filter refuses it too),
  no TCP (ABI 4 and later), no signal to a process outside the child and no abstract Unix
  socket (ABI 6 and later).

Everything else (the course copy, servelab installed anywhere, the grader's folders, ``/tmp``,
``/proc`` of other processes) fails with ``PermissionError`` (EACCES). Handled rights grow with
the kernel's ABI; :func:`abi` is 0 where Landlock is missing (or refused by seccomp), and
:func:`autograder.sandbox.os_boundary.boundary` then refuses the uid-only mode (fail closed).

Linux on x86-64 only (the system call numbers are the generic ones, shared by arm64 too).
Standard library only: the child loads this file by path.

>>> rights = handled_fs(3)
>>> bool(rights & ACCESS_FS["truncate"]), bool(rights & ACCESS_FS["ioctl_dev"])
(True, False)
>>> len(path_beneath(ACCESS_FS["read_file"], 3))   # struct landlock_path_beneath_attr is packed
12
"""

from __future__ import annotations

import os
import platform
import struct

# system call numbers (asm-generic, the same on x86-64 and arm64)
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1  # flag: return the highest ABI this kernel supports
RULE_PATH_BENEATH = 1
# filesystem rights (linux/landlock.h) and the ABI that introduced each
ACCESS_FS = {"execute": 1 << 0, "write_file": 1 << 1, "read_file": 1 << 2, "read_dir": 1 << 3,
             "remove_dir": 1 << 4, "remove_file": 1 << 5, "make_char": 1 << 6, "make_dir": 1 << 7,
             "make_reg": 1 << 8, "make_sock": 1 << 9, "make_fifo": 1 << 10, "make_block": 1 << 11,
             "make_sym": 1 << 12, "refer": 1 << 13, "truncate": 1 << 14, "ioctl_dev": 1 << 15}
SINCE_ABI = {"refer": 2, "truncate": 3, "ioctl_dev": 5}
ACCESS_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect (ABI 4)
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
# rights that may be granted on a file (not a folder) in a rule
FILE_RIGHTS = ACCESS_FS["execute"] | ACCESS_FS["write_file"] | ACCESS_FS["read_file"] | \
    ACCESS_FS["truncate"] | ACCESS_FS["ioctl_dev"]
READ = ACCESS_FS["read_file"] | ACCESS_FS["read_dir"]
# make_sock: a notebook's kernel binds its Unix sockets in its own sockets folder (a task's child
# may make none: the audit hook and the seccomp filter refuse its sockets first)
WRITE = READ | ACCESS_FS["write_file"] | ACCESS_FS["truncate"] | ACCESS_FS["make_reg"] | \
    ACCESS_FS["make_dir"] | ACCESS_FS["remove_file"] | ACCESS_FS["remove_dir"] | ACCESS_FS["make_sock"]
DEVICES = ("/dev/null", "/dev/urandom")  # what the interpreter and numpy open by name


def handled_fs(abi_version: int) -> int:
    """Every filesystem right that ABI ``abi_version`` knows: all of them are refused unless a
    rule grants them."""
    return sum(bit for name, bit in ACCESS_FS.items() if SINCE_ABI.get(name, 1) <= abi_version)


def path_beneath(allowed: int, fd: int) -> bytes:
    """``struct landlock_path_beneath_attr { u64 allowed_access; s32 parent_fd; }`` (packed)."""
    return struct.pack("<Qi", allowed, fd)


def _libc():
    import ctypes  # the child loads this before its audit hook, which refuses ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return ctypes, libc


def abi() -> int:
    """The Landlock ABI this kernel offers this process (0: none, or refused)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
        return 0
    ctypes, libc = _libc()
    version = libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return int(version) if version > 0 else 0


def restrict(read: list[str], write: list[str], listed: tuple[str, ...] | list[str] = ()) -> int:
    """Confines this process (every thread of it must be started after, or be this one) and its
    future children to reading ``read`` and :data:`DEVICES`, and reading and writing ``write``
    (folders or files; missing ones are skipped), and listing the folders ``listed`` (their
    names only, and their sub-folders' names: a folder some of whose entries are readable, so
    that the import system can find them). Returns the ABI used. Raises OSError when Landlock
    is missing or refuses; the caller decides whether that is fatal."""
    version = abi()
    if version < 1:
        raise OSError(38, "Landlock is not available in this kernel (or is refused here)")
    ctypes, libc = _libc()
    fs = handled_fs(version)
    attr = struct.pack("<Q", fs)
    if version >= 4:
        attr += struct.pack("<Q", ACCESS_NET_TCP)
    if version >= 6:
        attr += struct.pack("<Q", SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(SYS_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for paths, rights in ((list(read) + list(DEVICES), READ), (list(write), WRITE),
                              (list(listed), ACCESS_FS["read_dir"])):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    allowed = rights & fs if os.path.isdir(path) else rights & fs & FILE_RIGHTS
                    if path in DEVICES:
                        allowed |= ACCESS_FS["write_file"] & fs
                    rule = ctypes.create_string_buffer(path_beneath(allowed, fd), 12)
                    if libc.syscall(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), rule,
                                    ctypes.c_uint32(0)) != 0:
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
                finally:
                    os.close(fd)
        pr_set_no_new_privs = 38
        if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return version
