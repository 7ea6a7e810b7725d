"""A seccomp filter for the child that runs student code: the kernel refuses, for good, the
system calls through which code the submission carries could run outside Python.

Why: a submission may carry any bytes (up to 1 MiB per file), among them a compiled program or
extension, servelab's own oracle included (the release ships it). Python's audit hook does not
hold it back: a subinterpreter has no hook, and from one ``os.memfd_create`` + ``os.execve(fd)``
runs a carried binary in place of the child (it inherits the reply pipe), ``os.posix_spawn``
starts a process without a hook. The mount namespace takes away every writable or executable
place to put a file (:mod:`autograder.sandbox.os_boundary`, ``sealed``); this filter takes away
the rest, and it holds without namespaces too (the uid drop alone: no network then either):

* no new programs: ``execve``, ``execveat``; no new processes: ``fork``, ``vfork``, ``clone``
  without ``CLONE_THREAD`` (threads stay allowed), ``clone3`` (ENOSYS, so the C library falls
  back to ``clone`` for threads);
* no namespaces or mounts (a fresh user namespace could mount a writable, executable tmpfs):
  ``unshare``, ``setns``, ``clone`` with a ``CLONE_NEW*`` flag, ``mount`` and its new API;
* no code in memory that no file on a read-only mount holds: ``memfd_create``, ``memfd_secret``,
  ``mmap`` with ``PROT_EXEC`` of anonymous memory or together with ``PROT_WRITE`` (a private,
  writable and executable copy of any file), ``mprotect``/``pkey_mprotect`` adding ``PROT_EXEC``,
  and ``personality`` (``READ_IMPLIES_EXEC`` would make every later readable mapping executable
  without ``PROT_EXEC`` ever being asked for);
* no System V or POSIX IPC: ``shmget``/``shmat``/``shmctl``/``shmdt``, ``semget``/``semop``/
  ``semtimedop``/``semctl``, ``msgget``/``msgsnd``/``msgrcv``/``msgctl``, ``mq_*`` (the 32-bit
  ``ipc`` multiplexer goes with its ABI). Without an IPC namespace (the uid drop alone) these
  objects outlive the grading, hold memory no limit of the child counts, and are a channel
  between gradings: one student's kernel posting its hidden tests to a segment that another
  student's test reads back into visible messages. No honest test needs them;
* with ``exec_mappings=False`` (a task's child, once its own libraries are mapped:
  :mod:`autograder.sandbox.child`), no new executable mapping at all: ``mmap`` with
  ``PROT_EXEC`` of any file is refused too, so a compiled extension the submission carries
  cannot run wherever it lands (a writable folder without namespaces, where no mount can be
  ``noexec``);
* no other process's memory: ``ptrace``, ``process_vm_readv``/``writev`` (and the child is made
  non-dumpable, so that no process of its uid may trace it either);
* no signal through a file that other sandboxed processes can open too (every one can read
  numpy's files, behind every mount namespace the same inodes): ``flock`` and ``fcntl``'s
  locks (``F_SETLK``, ``F_GETLK``, their OFD twins), leases and ``F_NOTIFY``; ``inotify`` and
  ``fanotify``. A kernel that ran the hidden tests sent their lines to a task's child beside it
  by taking and dropping locks, and the child raised them in a visible test's message;
* with ``machine_state=False`` (a task's child): no ``statfs``, ``fstatfs``, ``ustat`` or
  ``sysinfo``. A kernel's folders lie on the machine's disk, so a file it writes and deletes
  moves the free space that a child beside it reads to the block (a byte a file), as memory it
  takes moves the free memory;
* no network: ``socket`` of any family but ``AF_UNIX`` (and ``AF_NETLINK``, which lists the
  network interfaces, and changes them only with a capability the child has not); and nothing of ``io_uring``, ``bpf``,
  ``perf_event_open``, ``userfaultfd``.

A refused call fails with ``EPERM`` (the process lives on and can report the error). Calls
through another ABI (32-bit ``int 0x80``, x32) are refused whole. The filter is installed with
``no_new_privs`` on every thread of the process (``TSYNC``), in a task's child and in a
notebook's kernel, after their own imports and before the student's code; no process can
remove a seccomp filter, and later threads inherit it. (A kernel runs the hidden test cells:
without namespaces, a network would let it send them away.)

Linux on x86-64 only (the numbers below): elsewhere :func:`install` returns False and the
namespaces and the audit hook remain. Standard library only: the child loads this file by path.

>>> program = assemble(X86_64)
>>> len(program) % 8, len(program) // 8 < 256   # sock_filter entries; jumps are one byte
(0, True)
"""

from __future__ import annotations

import platform
import struct

# seccomp return values (linux/seccomp.h)
ALLOW = 0x7FFF0000
ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38
# classic BPF opcodes: load word at absolute offset, jumps on equality / >= / bit test, return
LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64, little-endian)
NR, ARCH = 0, 4


def arg(i: int) -> int:
    """Offset of the low 32 bits of the i-th argument in struct seccomp_data."""
    return 16 + 8 * i


CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = 0x7E020000  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
PROT_WRITE, PROT_EXEC, MAP_ANONYMOUS, AF_UNIX, AF_NETLINK = 0x2, 0x4, 0x20, 1, 16

X86_64 = {
    "audit_arch": 0xC000003E, "x32_bit": 0x40000000,
    "deny": {"execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "unshare": 272, "setns": 308,
             "mount": 165, "umount2": 166, "pivot_root": 155, "open_tree": 428, "move_mount": 429,
             "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
             "memfd_create": 319, "memfd_secret": 447, "ptrace": 101, "process_vm_readv": 310,
             "process_vm_writev": 311, "io_uring_setup": 425, "io_uring_enter": 426,
             "io_uring_register": 427, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
             # System V and POSIX IPC
             "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
             "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
             "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243, "mq_notify": 244,
             "mq_getsetattr": 245,
             # file locks and file watches: every sandboxed process can open numpy's files
             # (the same inodes behind every mount namespace), so a lock taken and dropped on
             # one, or an access another one watches, is a signal between them
             "flock": 73, "inotify_init": 253, "inotify_add_watch": 254, "inotify_init1": 294,
             "fanotify_init": 300, "fanotify_mark": 301},
    "clone": 56, "clone3": 435, "mmap": 9, "mprotect": 10, "pkey_mprotect": 329, "socket": 41,
    "personality": 135, "fcntl": 72, "statfs": 137, "fstatfs": 138, "ustat": 136, "sysinfo": 99,
}
# what a task's child may not read (``machine_state=False``): the free space of a disk that
# another sandboxed process writes on (a notebook's kernel: its folders lie on the machine's
# disk), and the machine's free memory and process count, are signals from that process; a
# kernel (which sends, not receives: nothing it shows reaches a student) keeps them
MACHINE_STATE = ("statfs", "fstatfs", "ustat", "sysinfo")
# fcntl's commands on locks, directory notifications and leases (the rest: descriptors' flags)
FCNTL_SIGNALS = {"F_GETLK": 5, "F_SETLK": 6, "F_SETLKW": 7, "F_OFD_GETLK": 36, "F_OFD_SETLK": 37,
                 "F_OFD_SETLKW": 38, "F_SETLEASE": 1024, "F_GETLEASE": 1025, "F_NOTIFY": 1026}
IPC_CALLS = frozenset({"shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop", "msgget",
                       "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
                       "mq_notify", "mq_getsetattr"})


def assemble(table: dict, exec_mappings: bool = True, machine_state: bool = True) -> bytes:
    """The filter as ``struct sock_filter`` entries (``u16 code, u8 jt, u8 jf, u32 k``).
    ``exec_mappings=False``: every ``mmap`` with ``PROT_EXEC`` is refused, a file's included.
    ``machine_state=False``: the disks' free space and the machine's memory and process count
    are not to be read (:data:`MACHINE_STATE`).

    >>> len(assemble(X86_64, exec_mappings=False)) < len(assemble(X86_64))
    True
    >>> len(assemble(X86_64, machine_state=False)) > len(assemble(X86_64))
    True
    """
    code: list[tuple] = []  # (opcode, k, jump-if-true label, jump-if-false label); None: next

    def ins(op, k=0, jt=None, jf=None):
        code.append((op, k, jt, jf))

    deny, allow = "deny", "allow"
    ins(LD_ABS, ARCH)
    ins(JEQ, table["audit_arch"], None, deny)
    ins(LD_ABS, NR)
    ins(JGE, table["x32_bit"], deny, None)
    refused = dict(table["deny"], **({} if machine_state else {n: table[n] for n in MACHINE_STATE}))
    for nr in sorted(refused.values()):
        ins(JEQ, nr, deny, None)
    ins(JEQ, table["personality"], deny, None)
    ins(JEQ, table["clone3"], "enosys", None)
    ins(JEQ, table["clone"], "clone", None)
    ins(JEQ, table["mmap"], "mmap", None)
    ins(JEQ, table["mprotect"], "mprotect", None)
    ins(JEQ, table["pkey_mprotect"], "mprotect", None)
    ins(JEQ, table["socket"], "socket", None)
    ins(JEQ, table["fcntl"], "fcntl", None)
    ins(RET, ALLOW)
    labels = {}

    def here(name):
        labels[name] = len(code)

    here("clone")  # threads only, and never into new namespaces
    ins(LD_ABS, arg(0))
    ins(JSET, CLONE_NAMESPACES, deny, None)
    ins(JSET, CLONE_THREAD, allow, deny)
    here("mmap")  # executable memory only as a file holds it (the mounts hold no writable one)
    ins(LD_ABS, arg(2))
    if exec_mappings:
        ins(JSET, PROT_EXEC, None, allow)
        ins(JSET, PROT_WRITE, deny, None)
        ins(LD_ABS, arg(3))
        ins(JSET, MAP_ANONYMOUS, deny, allow)
    else:  # no new code at all: what the process needs is mapped already
        ins(JSET, PROT_EXEC, deny, allow)
    here("mprotect")
    ins(LD_ABS, arg(2))
    ins(JSET, PROT_EXEC, deny, allow)
    here("socket")  # netlink: the C library lists interfaces through it (ZeroMQ, in a kernel)
    ins(LD_ABS, arg(0))
    ins(JEQ, AF_UNIX, allow, None)
    ins(JEQ, AF_NETLINK, allow, deny)
    here("fcntl")  # a lock, a notification or a lease is a signal to another sandboxed process
    ins(LD_ABS, arg(1))
    for cmd in sorted(FCNTL_SIGNALS.values()):
        ins(JEQ, cmd, deny, None)
    ins(RET, ALLOW)
    here("enosys")
    ins(RET, ERRNO | ENOSYS)
    here(deny)
    ins(RET, ERRNO | EPERM)
    here(allow)
    ins(RET, ALLOW)

    out = b""
    for pc, (op, k, jt, jf) in enumerate(code):
        offsets = [0 if j is None else labels[j] - pc - 1 for j in (jt, jf)]
        if not all(0 <= o < 256 for o in offsets):
            raise ValueError(f"seccomp filter: jump out of range at {pc}")
        out += struct.pack("<HBBI", op, offsets[0], offsets[1], k)
    return out


def install(exec_mappings: bool = True, machine_state: bool = True) -> bool:
    """Installs the filter on this process (and its future threads); False where it does not
    apply (not Linux on x86-64). Raises OSError when the kernel refuses it.
    ``exec_mappings=False``: no new executable mapping of any file; ``machine_state=False``: no
    reading of the disks' free space, the machine's memory or its process count (see
    :func:`assemble`)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    import ctypes  # before the audit hook, which refuses ctypes to the student's code

    program = assemble(X86_64, exec_mappings, machine_state)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_dumpable, pr_set_no_new_privs = 4, 38
    # not dumpable: another process of the same uid (a notebook kernel's leftover, without
    # namespaces) may not attach to this one or read its memory
    if libc.prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    fprog = SockFprog(len(program) // 8, program)
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC): every thread of the process
    # (a kernel's machinery may have started some), not only the calling one
    sys_seccomp, set_mode_filter, flag_tsync = 317, 1, 1
    if libc.syscall(sys_seccomp, set_mode_filter, flag_tsync, ctypes.byref(fprog)) != 0:
        raise OSError(ctypes.get_errno(), "seccomp(SECCOMP_SET_MODE_FILTER, TSYNC) failed")
    return True
