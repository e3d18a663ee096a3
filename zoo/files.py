"""Atomic file writes, shared by the dataset cache and the inference layer's checkpoints."""

from __future__ import annotations

import errno
import io
import os
import re
import secrets
import shutil
import time

_TOKEN_HEX = 6  # bytes of the random token in a temporary file's name


def _temporary_name(name: str) -> str:
    return f".tmp-{name}.{secrets.token_hex(_TOKEN_HEX)}"


def remove_stale_temporaries(path, older_than: float | None = None) -> list[str]:
    """Remove the temporary files that interrupted writes of ``path`` left (a process killed
    with SIGKILL mid-write cannot clean up after itself); returns their paths.

    With ``older_than=None``, every one: only for a caller that knows no other write of ``path``
    is under way, e.g. one that holds a lock on it. With ``older_than`` seconds, only those last
    written that long ago or more: for a writer that takes no lock but writes often while it
    runs (a download), so that another process's write under way is left alone."""
    path = os.fspath(path)
    cutoff = None if older_than is None else time.time() - older_than
    directory = os.path.dirname(os.path.abspath(path))
    pattern = re.compile(
        rf"\.tmp-{re.escape(os.path.basename(path))}\.[0-9a-f]{{{2 * _TOKEN_HEX}}}"
    )
    removed = []
    if not os.path.isdir(directory):
        return removed
    for entry in os.scandir(directory):
        if pattern.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                if cutoff is not None and entry.stat(follow_symlinks=False).st_mtime > cutoff:
                    continue
                os.remove(entry.path)
            except FileNotFoundError:
                continue
            removed.append(entry.path)
    return removed


def _create_temporary(directory: str, name: str) -> tuple[int, str]:
    """A new file next to the destination, opened for writing. Created with mode 0o666, which
    the kernel narrows by the umask as for ``open(path, "wb")`` (``tempfile.mkstemp`` would make
    it private to its owner, and reading the umask means setting it, a race with other
    threads)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = os.path.join(directory, _temporary_name(name))
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as err:  # named by the file asked for, not the hidden one beside it
            raise type(err)(err.errno, err.strerror, os.path.join(directory, name)) from err


def probe_writable(directory, name: str = "probe") -> None:
    """Raise the ``OSError`` that writing the file ``name`` in ``directory`` by
    :func:`atomic_write` would raise, if any: its temporary file is created and removed (a
    permission bit alone does not tell: a read-only file system, a user who may write anywhere,
    or a name too long for the file system once the temporary's prefix and suffix are added)."""
    fd, tmp = _create_temporary(os.fspath(directory), name)
    os.close(fd)
    try:
        os.remove(tmp)
    except FileNotFoundError:  # a writer's clean-up of ``name``'s leftovers took it first
        pass


def unwritable_reason(path) -> str | None:
    """Why :func:`atomic_write` could not write ``path``, as a phrase, or None if it could:
    an empty name or one ending in a separator, a directory or another file that is not a
    regular one there (a link is followed), a folder that does not exist, or one that cannot be
    written under this name (probed, not read from the permission bits). For checking an
    output path before the work whose result goes there."""
    given = os.fspath(path)
    if not given:
        return "is empty; name a file"
    if given.endswith(("/", os.sep)):
        return "ends with a path separator, as a folder's name does; name a file"
    path = os.path.realpath(given)  # a link is written through to its target
    if os.path.isdir(path):
        return "is a directory"
    if os.path.lexists(path) and not os.path.isfile(path):
        return "exists and is not a regular file"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        there = " (a file of that name is there)" if os.path.lexists(folder) else ""
        return f"the folder {folder!r} does not exist{there}"
    try:
        probe_writable(folder, os.path.basename(path))
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            return f"its name is too long for the file system of {folder!r}"
        return f"cannot write in the folder {folder!r} ({err.strerror or err})"
    return None


def atomic_write(path, write, *, durable: bool = False, make_parents: bool = True) -> None:
    """Write a file by ``write(binary_file)`` next to ``path`` and rename it over ``path``.

    An interrupted or failed write leaves the previous file intact and no temporary file behind.
    The file gets the permissions ``open(path, "wb")`` would give: those of the file it replaces,
    else the umask's. A symbolic link is written through: its target gets the new contents. A
    FIFO, device or socket at ``path`` is refused (``FileExistsError``), never replaced. Missing
    parent directories are created with ``make_parents=True`` (a cache); otherwise they are an
    error, as for ``open``. With ``durable=True`` the data and (where the file system allows)
    the rename are flushed to disk, so a power loss right after cannot leave a checkpoint half
    written.
    """
    # Through a symbolic link to its target: the link stays a link and its target is current.
    path = os.path.realpath(os.fspath(path))
    directory = os.path.dirname(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"Cannot write {path!r}: it is a directory; name a file in it.")
    if os.path.exists(path) and not os.path.isfile(path):
        raise FileExistsError(
            f"Cannot write {path!r}: it is not a regular file (a FIFO, device or socket), "
            "which a file of results must not replace; name another path."
        )
    if make_parents:
        os.makedirs(directory, exist_ok=True)
    elif not os.path.isdir(directory):
        raise FileNotFoundError(
            f"Cannot write {path!r}: the directory {directory!r} does not exist."
        )
    fd, tmp = _create_temporary(directory, os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if os.path.exists(path):
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    if durable and hasattr(os, "O_DIRECTORY"):
        try:  # POSIX: make the rename itself durable
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:  # some file systems cannot fsync a directory; the file itself is written
            pass


def write_text(path, text: str) -> None:
    """``text`` written to ``path`` in UTF-8 by :func:`atomic_write`: a run stopped while it
    writes its results keeps the results file it had, not an empty or half-written one."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def save_figure(figure, path, **savefig_kwargs) -> None:
    """``figure.savefig(path, **savefig_kwargs)`` made whole or not at all: the figure is
    rendered in memory, then written by :func:`atomic_write`, so that a render that fails or is
    stopped (Ctrl-C) keeps the figure that was at ``path`` rather than a truncated one.

    The format is the one ``savefig`` picks: ``format=`` if given, else the extension of
    ``path``, else matplotlib's ``savefig.format`` (PNG), written under ``path`` itself. The
    folder must exist, as for ``savefig``."""
    image = io.BytesIO()
    savefig_kwargs.setdefault("format", _figure_format(path))
    figure.savefig(image, **savefig_kwargs)
    atomic_write(path, lambda f: f.write(image.getvalue()), make_parents=False)


def _figure_format(path) -> str | None:
    """The format that the extension of ``path`` names (``"png"`` for ``curves.png``), or None
    without one: rendered to memory, a figure has no file name to take it from."""
    return os.path.splitext(os.fspath(path))[1][1:] or None
