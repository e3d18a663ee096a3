"""What keeps a run's checkpoint file safe: its path checked before the first step, one writer at
a time, and no temporary files left behind by a writer that was killed."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import warnings

from inference.persistence.checkpoint import CheckpointError, read_header
from zoo.files import remove_stale_temporaries, unwritable_reason

try:  # POSIX
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

LOCK_SUFFIX = ".lock"


class CheckpointInUseError(CheckpointError):
    """Another fit, in this process or another, is writing the same checkpoint.

    A fit holds an OS lock on ``<checkpoint>.lock`` from its start (or resume) to its last
    write; a second fit naming the same ``checkpoint=`` fails at its start with this error,
    naming the process that holds the lock. The lock is released by the OS if that process
    dies. A :class:`~inference.CheckpointError`.

    Parameters
    ----------
    message : str
        Which file, who holds it, and what to do.

    Examples
    --------
    Hold the lock as a running fit would, then start a fit on the same file:

    >>> import os, tempfile
    >>> import numpy as np
    >>> import inference, zoo
    >>> from inference.persistence.checkpoint_guard import exclusive
    >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "run.ckpt")
    ...     with exclusive(path):
    ...         try:
    ...             inference.fit("gmm", data, "em", "pyro", K=2, progress=False, checkpoint=path)
    ...         except inference.CheckpointInUseError as err:
    ...             print("is being written by another fit in this process" in str(err))
    True
    """


def check_path(path, *, resume: bool) -> str:
    """``checkpoint=`` checked before any work is done, so that a run never loses its result
    to a path it cannot write: a directory, a directory that does not exist or cannot be written,
    or an existing file that is not a checkpoint (which a run must not overwrite). With
    ``resume=True`` an existing file is read later, and refused then if it is not this run's.
    Returns the path as a string."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"checkpoint= must be a file path (str or os.PathLike); got {path!r}.")
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if os.path.isdir(path):
        raise ValueError(
            f"checkpoint={path!r} is a directory; name a file in it, e.g. "
            f"{os.path.join(path, 'fit.ckpt')!r}."
        )
    reason = unwritable_reason(path)
    if reason:
        raise ValueError(f"checkpoint={path!r}: {reason}.")
    if os.path.exists(path) and not resume:
        try:
            header = read_header(path)
        except CheckpointError:
            _refuse_damaged(path)
            header = {}
        kind = header.get("kind")
        if kind != "checkpoint":
            what = "a saved fit" if kind == "fit_result" else "not a checkpoint of this project"
            raise CheckpointError(
                f"checkpoint={path!r} is an existing file that is {what}; it is not "
                "overwritten. Name another file, or delete this one."
            )
        # A file another run is writing is refused at once (by ``exclusive``, as this run
        # starts): not after a warning that this run will replace it.
        _refuse_if_held(path)
        _warn_of_replacing(path, header)
    return path


#: How every file this project writes (``checkpoint.save``) begins: a zip member's local header
#: (30 bytes, its signature first) for its first member, the zoo's JSON header.
_ZIP_MEMBER, _LOCAL_HEADER_SIZE, _HEADER_MEMBER = b"PK\x03\x04", 30, b"__header__.npy"


def _refuse_damaged(path: str) -> None:
    """Refuse, as damaged, an unreadable file at ``path`` that begins as every file of this
    project does; return for any other file. A file cut short (a copy or a disk that failed)
    has lost the zip's directory, which is at its end, but not its first member's name."""
    try:
        with open(path, "rb") as f:
            start = f.read(_LOCAL_HEADER_SIZE + len(_HEADER_MEMBER))
    except OSError:
        return
    if not (start.startswith(_ZIP_MEMBER) and start[_LOCAL_HEADER_SIZE:] == _HEADER_MEMBER):
        return
    raise CheckpointError(
        f"checkpoint={path!r} is an existing file that looks like a damaged checkpoint or saved "
        "fit of this project (corrupt or truncated: it cannot be read, nor resumed from); it is "
        "not overwritten. Delete it, or name another file."
    )


def _warn_of_replacing(path: str, header: dict) -> None:
    """A checkpoint that a run started afresh (``resume=False``) will replace: said, with the run
    it holds, because the work in it is lost unless ``resume=True`` was meant."""
    held = f"a run of {header.get('algorithm')!r} on {header.get('model')!r}"
    if isinstance(header.get("step"), int):
        held += f" at step {header['step']}"
    warnings.warn(
        f"checkpoint={path!r} holds {held}; this fit starts afresh (resume=False) and "
        "replaces it at its first checkpoint. Pass resume=True to continue that run, or name "
        "another file.",
        UserWarning,
        stacklevel=6,  # past check_path, fit's checks, fit and its one-at-a-time guard
    )


#: The real paths of the checkpoints this process's fits hold, with their owner records.
_HELD: dict[str, dict] = {}


def _in_use(path, owner: dict) -> CheckpointInUseError:
    # The lock is held, so its holder lives (the OS releases it when a process dies): deleting
    # the lock file would only let two runs write one checkpoint.
    return CheckpointInUseError(
        f"checkpoint={os.fspath(path)!r} is being written by {_describe(owner)}; two runs "
        "writing one checkpoint would overwrite each other's work. Wait for it to finish, or "
        "name another file."
    )


def _owner() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}


def _describe(owner: dict) -> str:
    if not owner:
        return "another fit (its process has not yet said which)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("since", 0)))
    here = owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname()
    where = "this process" if here else f"process {owner.get('pid')} on {owner.get('host')!r}"
    return f"another fit in {where}, running since {since}"


def _refuse_if_held(path) -> None:
    """:class:`CheckpointInUseError` if another fit holds the lock on ``path`` now. Only a
    look: the lock is taken by :func:`exclusive`, and no lock file is made here (a run that
    fails before it starts would leave one behind)."""
    real = os.path.realpath(os.fspath(path))
    if real in _HELD:
        raise _in_use(path, _HELD[real])
    try:
        fd = os.open(real + LOCK_SUFFIX, os.O_RDWR)
    except OSError:  # no lock file: no holder, which keeps it until it ends
        return
    try:
        if not _try_lock(fd):
            raise _in_use(path, _read_owner(fd))
        _unlock(fd)
    finally:
        os.close(fd)


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
    else:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:  # BlockingIOError on POSIX, PermissionError on Windows
        return False
    return True


def _read_owner(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        owner = json.loads(os.read(fd, 4096).decode() or "{}")
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


@contextlib.contextmanager
def exclusive(path):
    """Hold an OS lock on ``path`` for the duration of a run: a second run checkpointing to the
    same file, in this process or another, fails at its start with
    :class:`CheckpointInUseError` naming the first, however the path is spelled (links are
    followed to the real file). The lock is the real file's name plus ``".lock"``, released by
    the OS if the process dies; the file itself is removed when the run ends. Within a process
    the lock is also kept in memory, so deleting the lock file does not let a second fit in. Temporary files
    that an earlier, killed writer of ``path`` left behind are removed once the lock is held."""
    # The file the checkpoint is written to, whatever the spelling or links that name it.
    real = os.path.realpath(os.fspath(path))
    lock_path = real + LOCK_SUFFIX
    if real in _HELD:  # in this process, even if the lock file was deleted meanwhile
        raise _in_use(path, _HELD[real])
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        if not _try_lock(fd):
            owner = _read_owner(fd)
            os.close(fd)
            raise _in_use(path, owner)
        # The last holder removes the lock file when it ends; if it did so between our open and
        # our lock, we hold a lock on a file no one else can see: open the path afresh.
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock_path)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        owner = _HELD[real] = _owner()
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(owner).encode())
        remove_stale_temporaries(real)
        yield
    finally:
        del _HELD[real]
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(lock_path)):  # ours, not a successor's
                os.remove(lock_path)  # while still locked, so no one else can be holding it
        os.close(fd)  # releases the lock
