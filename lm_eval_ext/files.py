"""Files and folders written beside their final place and swapped in whole (nothing half-written).

Every command writes its outputs through :func:`folder_written_whole` (a folder) or
:func:`write_text_atomic` (a file): a full disk, a killed process or a second writer of the
same place leaves the earlier state or the new one, never a mix. :func:`path_error` turns a
file system's error on a user's path into one line naming the path, the cause and the fix.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lm_eval_ext.errors import EnvironmentProblem, LmEvalExtError

#: errors of the machine (exit code 1), as against a path the user chose (exit code 2)
_ENVIRONMENT = {errno.ENOSPC: "the disk or quota is full: free space and rerun",
                errno.EDQUOT: "the disk quota is full: free space and rerun",
                errno.EFBIG: "the file size limit was reached (ulimit -f): raise it and rerun",
                errno.EIO: "an input/output error of the device: check the disk and rerun",
                errno.ENOMEM: "out of memory: free memory and rerun",
                errno.EMFILE: "too many open files (ulimit -n): raise the limit and rerun",
                errno.ENFILE: "too many open files on the system: rerun later"}
_USAGE = {errno.EACCES: "pass a path you can {action}",
          errno.EPERM: "pass a path you can {action}",
          errno.EROFS: "that file system is read-only: pass a writable path",
          errno.ENOENT: "a folder on the path does not exist and cannot be made there: pass "
                        "another path",
          errno.ENOTDIR: "a part of the path is a file, not a folder: pass another path",
          errno.EISDIR: "it is a folder: name a file",
          errno.EEXIST: "something else is already there: pass another path"}


def not_valid_yaml(error: Exception) -> str:
    """PyYAML's ``error`` as words: where the file stops being YAML, and why."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"is not valid YAML{where}: {getattr(error, 'problem', None) or type(error).__name__}"


def path_error(path: str | Path, error: OSError | UnicodeDecodeError, action: str = "write",
               not_text: str = "pass the file lm-eval wrote, not a damaged or converted copy"
               ) -> LmEvalExtError:
    """One line for ``error`` on the user's ``path``: what failed, the cause, the fix.

    A full disk, quota or I/O error is an :class:`~lm_eval_ext.errors.EnvironmentProblem`
    (exit code 1); a path the user can fix (permissions, read-only, missing, not UTF-8) is a
    usage error (exit code 2). ``not_text`` is the fix for a file that is not UTF-8.
    """
    if isinstance(error, UnicodeDecodeError):
        byte = error.object[error.start:error.start + 1].hex()
        return LmEvalExtError(f"cannot read {path}: it is not UTF-8 text (byte 0x{byte} at "
                              f"offset {error.start}); {not_text}")
    cause = error.strerror or str(error)
    if error.errno in _ENVIRONMENT:
        kind, fix = EnvironmentProblem, _ENVIRONMENT[error.errno]
    else:
        kind, fix = LmEvalExtError, _USAGE.get(error.errno, "pass another path").format(action=action)
        parent = Path(path).expanduser().parent
        if error.errno == errno.ENOENT and action == "write" and parent.is_dir():
            fix = (f"{parent} exists but refuses new files and folders (a system file system "
                   "such as /proc): pass another path")
        blocking = _file_on_the_way(Path(path).expanduser())
        if error.errno == errno.ENOTDIR and blocking is not None:
            fix = f"{blocking} is a file, not a folder: move or remove it, or pass another path"
    problem = kind(f"cannot {action} {path}: {cause}; {fix}")
    problem.cause, problem.fix = cause, fix
    return problem


def _file_on_the_way(path: Path) -> Path | None:
    """The first part of ``path`` (from its root) that is a file where a folder must be."""
    for part in reversed(path.parents):
        if part.exists() and not part.is_dir():
            return part
    return None


def unexpanded_home(text: str) -> str | None:
    """The path meant by ``text`` whose ``~`` the shell did not expand (it was quoted), or None."""
    if not text.startswith("~"):
        return None
    return os.path.join(os.path.expanduser("~"), text.partition("/")[2])


def probe_writable(path: str | Path) -> None:
    """Raise :func:`path_error`'s line unless files can be written where ``path`` is (or goes).

    Writes (and removes) a small file in ``path``'s nearest existing folder, so a path under
    ``/proc``, a read-only or a full file system fails here, before any work.
    """
    path = Path(path).expanduser()
    folder = next((p for p in (path, *path.parents) if p.exists()), Path.cwd())
    probe = folder / f".probe.{socket.gethostname()}.{os.getpid()}.tmp"
    try:
        if not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
        with open(probe, "wb") as handle:
            handle.write(b"\0" * 4096)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as exc:
        raise path_error(path, exc) from None
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass


#: the names of a process's own open streams
_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2}


def stream_fd(path: str | Path) -> int | None:
    """The open file descriptor ``path`` names, or None for any other path.

    ``/dev/stdout``, ``/dev/stderr``, ``/dev/fd/N`` and ``/proc/self/fd/N``.
    """
    text = os.path.normpath(str(path))
    match = re.fullmatch(r"/(?:dev/fd|proc/self/fd)/(\d+)", text)
    return int(match.group(1)) if match else _STREAMS.get(text)


def _write_stream(fd: int, text: str) -> None:
    """``text`` onto the open stream ``fd``, after what the command printed there before."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    with open(fd, "w", encoding="utf-8", closefd=False) as handle:
        handle.write(text)


def _writable_place(path: Path) -> bool:
    """Whether ``path`` is a regular file or nothing yet (not a device, pipe or folder)."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except FileNotFoundError:
        return True


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` through a temporary file and a rename (readers never see half a file).

    The temporary name carries the host and process, so writers on a shared file system never
    meet. A device or pipe (``/dev/stdout``, ``/dev/full``) is written in place: it cannot be
    replaced, and must not be; so is a stream the process holds open (``/dev/stdout``, which
    on a redirected output links to a regular file: a rename would replace the link). A link
    keeps linking: the file it names is replaced. Errors are :func:`path_error`'s one line.
    """
    path = Path(path)
    try:
        fd = stream_fd(path)
        if fd is not None:
            _write_stream(fd, text)
            return
        if path.is_symlink():
            path = path.resolve()
        if not _writable_place(path):
            path.write_text(text, encoding="utf-8")
            return
        tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise path_error(path, exc) from None


def write_files_atomic(folder: Path, texts: dict[str, str]) -> None:
    """Write several files of ``folder`` (created if missing) so that none is half-written.

    Every file goes to a temporary name first; only when all are written are they renamed
    into place, so a full disk leaves every earlier file as it was.
    """
    folder = Path(folder)
    stamp = f"{socket.gethostname()}.{os.getpid()}.tmp"
    temporary = {name: folder / f".{name}.{stamp}" for name in texts}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            temporary[name].write_text(text, encoding="utf-8")
        for name, tmp in temporary.items():
            os.replace(tmp, folder / name)
    except OSError as exc:
        raise path_error(folder, exc) from None
    finally:
        for tmp in temporary.values():
            tmp.unlink(missing_ok=True)


def staging_folder(target: Path) -> Path:
    """An empty hidden folder beside ``target`` to write the new content into."""
    staging = target.with_name(f".{target.name}.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (one of another user's counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _own_staging(target: Path) -> Path:
    """This process's staging folder for ``target``; stagings of dead processes are removed.

    Named by host and process, so two writers of one place never share (or empty) a folder.
    """
    host, prefix = socket.gethostname(), f".{target.name}."
    if target.parent.is_dir():
        for old in target.parent.glob(f"{prefix}{host}.*.new"):
            pid = old.name[len(f"{prefix}{host}."):-len(".new")]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(old, ignore_errors=True)
    staging = target.with_name(f"{prefix}{host}.{os.getpid()}.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def swap_in(staging: Path, target: Path, replace: bool = True) -> None:
    """Make ``staging`` the ``target`` folder; an earlier ``target`` is removed whole.

    A crash in between leaves the old folder (renamed aside) or the new one, never a mix.
    When another writer swaps its folder in meanwhile, the last one wins; without
    ``replace``, a ``target`` that appeared meanwhile is an error (``FileExistsError``).
    """
    retired = target.with_name(f".{target.name}.{socket.gethostname()}.{os.getpid()}.old")
    for _ in range(5):
        if target.exists():
            if not replace:
                raise FileExistsError(errno.EEXIST, "another process wrote it meanwhile",
                                      str(target))
            shutil.rmtree(retired, ignore_errors=True)
            try:
                target.rename(retired)
            except FileNotFoundError:  # another writer moved it away first
                continue
        try:
            staging.rename(target)
        except OSError as exc:  # another writer's folder arrived in between: again
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            continue
        shutil.rmtree(retired, ignore_errors=True)
        return
    raise FileExistsError(errno.EEXIST, "other processes keep writing it", str(target))


@contextmanager
def folder_written_whole(target: str | Path, replace: bool = True) -> Iterator[Path]:
    """Write a folder's new content into the yielded staging folder; swapped in whole at the end.

    An empty existing ``target`` is kept (a mount point, the working folder, a folder made for
    the outputs): the staging folder is made inside it and its entries moved up at the end. On
    any error (a full disk, a killed writer, a bug) the staging folder is removed and
    ``target`` keeps its earlier content; a file system's error is :func:`path_error`'s one
    line naming ``target``. ``replace`` as :func:`swap_in`'s.
    """
    target = Path(os.path.abspath(target))  # "." has a name to stage beside
    fill = target.is_dir() and not any(target.iterdir())
    inside = target / ".outputs"  # (its stagings are named .<.outputs>.<host>.<pid>.new)
    try:
        staging = _own_staging(inside if fill else target)
    except OSError as exc:
        raise path_error(target, exc) from None
    try:
        yield staging
        if fill:
            if not replace and any(not e.name.startswith(f".{inside.name}.")  # no staging
                                   for e in target.iterdir()):
                raise FileExistsError(errno.EEXIST, "another process wrote it meanwhile",
                                      str(target))
            for entry in staging.iterdir():
                entry.rename(target / entry.name)
            staging.rmdir()
        else:
            swap_in(staging, target, replace)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise path_error(target, exc) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
