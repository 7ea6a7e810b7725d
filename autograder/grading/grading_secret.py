"""The instructors' grading secret, and the Hypothesis seeds derived from it.

Hypothesis under the ``grading`` profile is derandomized: with the seed a function of the test
alone, a student who runs the released grader could record every generated input and answer it
from a table. So the grader seeds each test from three things: a secret that never leaves the
instructors (``$SERVELAB_GRADING_SECRET``, or a file named by ``$SERVELAB_GRADING_SECRET_FILE``),
the content hash of the files actually taken from the submission for that task, and the test's
id. The same submission gets the same inputs (a regrade is byte-identical); another secret, or
any change to the submission, gets other inputs.

Without a configured secret, :func:`resolve` says so once on stderr and makes up a random one
for this process (recorded by the caller where only instructors look: beside ``--out``, or in
the gradebook folder; never in results.json).

>>> s = Secret(b"course secret", "test")
>>> alice = "submission:alice"
>>> seed_for(s, alice, "a1_ledger/test_a1_ledger.py::test_x") == seed_for(s, alice, "a1_ledger/test_a1_ledger.py::test_x")
True
>>> seed_for(s, alice, "t") != seed_for(Secret(b"another secret", "test"), alice, "t")
True
>>> seed_for(s, alice, "t") != seed_for(s, "submission:bob", "t")
True
>>> repr(s)
'<grading secret from test>'
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path

ENV_SECRET = "SERVELAB_GRADING_SECRET"
ENV_SECRET_FILE = "SERVELAB_GRADING_SECRET_FILE"
SIDECAR_SUFFIX = ".grading-secret"  # results.json -> results.json.grading-secret


@dataclass(frozen=True)
class Secret:
    """The secret's bytes (never printed) and where they came from (safe to print)."""

    value: bytes = field(repr=False)
    origin: str
    file: Path | None = None  # a file holding it: out of the child's reach
    random: bool = False  # made up for this process: record it for instructors

    def __repr__(self) -> str:
        return f"<grading secret from {self.origin}>"


_EPHEMERAL: Secret | None = None


def configured(secret_file: Path | None = None) -> Secret | None:
    """The instructors' secret: ``secret_file``, else ``$SERVELAB_GRADING_SECRET_FILE``, else
    ``$SERVELAB_GRADING_SECRET``; None when none is set. ValueError on an empty or unreadable
    secret (a typo must not silently grade with a guessable one)."""
    path = secret_file or (Path(os.environ[ENV_SECRET_FILE]) if os.environ.get(ENV_SECRET_FILE) else None)
    if path is not None:
        try:
            value = Path(path).read_bytes().strip()
        except OSError as exc:
            raise ValueError(f"grading secret file {str(path)!r} cannot be read: {exc.strerror}") from None
        if not value:
            raise ValueError(f"grading secret file {str(path)!r} is empty")
        return Secret(value, f"file {Path(path).name}", file=Path(path).resolve())
    if ENV_SECRET in os.environ:
        value = os.environ[ENV_SECRET].encode("utf-8", "surrogateescape").strip()
        if not value:
            raise ValueError(f"${ENV_SECRET} is set but empty")
        return Secret(value, f"${ENV_SECRET}")
    return None


def resolve(secret_file: Path | None = None) -> Secret:
    """:func:`configured`, or a random secret made once per process (said once on stderr).
    The random secret is also put in this process's environment, so that worker processes
    started afterwards (``grade-all``) grade with the same one."""
    global _EPHEMERAL
    if secret_file is None and _EPHEMERAL is not None and os.environ.get(ENV_SECRET) == _EPHEMERAL.value.decode():
        return _EPHEMERAL
    found = configured(secret_file)
    if found is not None:
        return found
    if _EPHEMERAL is None:
        value = secrets.token_hex(32)
        os.environ[ENV_SECRET] = value
        _EPHEMERAL = Secret(value.encode(), "a random secret (none configured)", random=True)
        print(f"grade: no grading secret configured (${ENV_SECRET} or ${ENV_SECRET_FILE}); using a random "
              "one, so the generated inputs cannot be predicted but a regrade needs the recorded secret "
              f"(written beside the results as *{SIDECAR_SUFFIX})", file=sys.stderr)
    return _EPHEMERAL


def record(secret: Secret, path: Path) -> None:
    """Writes a random secret to ``path`` (mode 0600), so that instructors can regrade with it
    (``SERVELAB_GRADING_SECRET_FILE=path``). A configured secret is never written anywhere."""
    if not secret.random:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret.value + b"\n")


def content_hash(files: dict[str, bytes]) -> str:
    """SHA-256 over files (name and bytes, in name order): no longer part of a seed (a
    resubmission must draw the same inputs), kept for tools that name a submission's content."""
    h = hashlib.sha256()
    for rel in sorted(files):
        data = files[rel]
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def seed_for(secret: Secret, identity: str, test_id: str) -> int:
    """A 128-bit Hypothesis seed: HMAC-SHA256 keyed by the secret over the student's identity
    and the test."""
    mac = hmac.new(secret.value, f"{identity}\0{test_id}".encode("utf-8", "surrogateescape"), hashlib.sha256)
    return int.from_bytes(mac.digest()[:16], "big")
