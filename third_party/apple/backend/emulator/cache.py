"""Host compiler, native source locations, build flags and the on-disk cache of the emulator.

The cache (``<triton cache dir>/apple_emulator``) holds one directory per build (the runtime, each kernel).
Its rules:

* builds are safe across threads and processes: every file is written under a unique temporary name
  (pid, thread id, random) and renamed into place; a build holds the entry's lock (an in-process lock and a
  ``flock`` on ``<entry>/.lock``), and whoever gets the lock second finds the finished entry;
* ``manifest.json`` is written last and records the size and sha256 of every file of the entry; an entry is
  used only if every file matches. A damaged entry (truncated or garbage library, edited source, broken
  manifest) is rebuilt with one :class:`EmulatorCacheWarning` naming the file; temporaries left by a killed
  build are deleted by the next build of that entry;
* files are created with the user's umask but never group/world-writable; libraries (the kernels', the
  runtime's, the native launcher's) are refused (an :class:`EmulatorCacheError`) when they, or a directory above
  them, are owned by another user or writable by group/others (directories above may be sticky, as /tmp),
  unless ``TRITON_APPLE_EMULATOR_TRUST_CACHE=1`` (:func:`check_trusted`); each directory is checked once per
  process;
* a write that fails (a full disk, a file removed under the build) is an :class:`EmulatorCacheIOError` naming
  the file, what was being built and what happened;
* a child forked while a thread of the parent builds an entry gets fresh locks (``os.register_at_fork``) and
  waits for the parent's build through the ``flock``, which it no longer shares.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import stat
import threading
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional

from .. import knobs
from .errors import EmulatorCacheError, EmulatorCacheIOError, EmulatorCacheWarning



def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask is process-wide and racy with other threads)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def file_mode(executable: bool = False) -> int:
    """The mode of a new cache file or directory: the user's umask applied, group/others never writable."""
    return (0o777 if executable else 0o666) & ~_umask() & ~0o022


_trusted_dirs: set = set()


def _distrust(st: os.stat_result, allow_sticky: bool) -> Optional[str]:
    """What makes a file or directory with status `st` untrustworthy, or None. Trusted: owned by this user or
    root, and writable by nobody else; a directory above the one loaded from may be writable by others if it is
    sticky (as /tmp): others can add names there but cannot replace or rename this user's entries, and what is
    below is checked in its own right."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"owned by another user (uid {st.st_uid})"
    if st.st_mode & 0o022 and not (allow_sticky and stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
        who = ("group and others" if st.st_mode & 0o022 == 0o022 else "others" if st.st_mode & 0o002 else "group")
        return f"writable by {who} (mode {stat.S_IMODE(st.st_mode):o})"
    return None


TRUST_RULE = ("a file the backend loads or runs from a cache, and every directory above it, must be owned by this "
              "user or root and writable by no one else (directories above it may be sticky, as /tmp)")


def check_trusted(path: Path, what: str = "Metal emulator libraries") -> None:
    """Refuse to load `what` from `path` (a file or a cache directory) when it or a directory above it is owned by
    another user or writable by others (:data:`TRUST_RULE`): another user could put code there that would run in
    this process. Raises :class:`EmulatorCacheError` naming the path, what is wrong with it and the rule; each
    directory is checked once per process. ``TRITON_APPLE_EMULATOR_TRUST_CACHE=1`` turns the check off."""
    if knobs.emulator_trust_cache.get():
        return
    path = Path(os.path.abspath(path))
    for i, p in enumerate([path, *path.parents]):
        key = str(p)
        if key in _trusted_dirs:
            break  # and everything above it
        st = os.stat(p)
        problem = _distrust(st, allow_sticky=i > 0)
        if problem:
            shown = path if p == path else f"{path}: the directory {p} above it"
            raise EmulatorCacheError(
                f"refusing to load {what} from {shown}: it is {problem}, so another user could put code there that "
                f"would run in this process (the rule: {TRUST_RULE}). Use a private TRITON_CACHE_DIR, or "
                f"`chmod go-w {p}`, or set TRITON_APPLE_EMULATOR_TRUST_CACHE=1 if everyone who can write there is "
                "trusted.")
        if stat.S_ISDIR(st.st_mode):
            _trusted_dirs.add(key)


_check_trusted = check_trusted


def _make_dir(path: Path) -> None:
    """Create `path` (and missing parents) with file_mode(); check the ones of the emulator's cache."""
    if not path.is_dir():
        _make_dir(path.parent)
        try:
            os.mkdir(path, file_mode(executable=True))
        except FileExistsError:
            pass


def cache_root() -> Path:
    from triton import knobs as triton_knobs  # upstream's knob: TRITON_CACHE_DIR or ~/.triton/cache
    path = Path(triton_knobs.cache.dir) / "apple_emulator"
    _make_dir(path)
    _check_trusted(path)
    return path


def hash_parts(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()



_MANIFEST = "manifest.json"
_TMP_PREFIX = ".tmp-"
_entry_locks: Dict[str, threading.Lock] = {}
_entry_locks_guard = threading.Lock()
_held_lock_fds: set = set()  # descriptors of the `.lock` files whose flock a build of this process holds
_warned: set = set()


def _after_fork_in_child() -> None:
    """A child forked while another thread built an entry must not inherit that build's locks: the thread that
    would release them does not exist in the child. Fresh in-process locks; and the child's copies of the lock
    files' descriptors are closed, because a flock belongs to the open file, which the child's copy shares with
    the parent: while the child kept it, the parent's build would end without releasing the lock and the child,
    waiting on its own descriptor for the finished entry, would wait forever. (The parent's lock stays held
    through its own descriptor until its build is done.)"""
    global _entry_locks_guard
    _entry_locks_guard = threading.Lock()
    _entry_locks.clear()
    for fd in list(_held_lock_fds):
        try:
            os.close(fd)
        except OSError:
            pass
    _held_lock_fds.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def tmp_name(directory: Path, name: str) -> Path:
    return directory / f"{_TMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}-{name}"


def write_file(path: Path, data: bytes, executable: bool = False) -> None:
    """Write `path` atomically (unique temporary + rename) with file_mode()."""
    tmp = tmp_name(path.parent, path.name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, file_mode(executable))
        os.replace(tmp, path)
    except BaseException as e:
        unlink_quietly(tmp)
        if isinstance(e, OSError) and e.filename is None:
            e.filename = str(path)  # what was being written, for the error that reports it
        raise


def unlink_quietly(path: Path) -> None:
    """Remove a file, or a directory tree (a macOS .dSYM bundle)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _file_record(path: Path) -> Dict[str, object]:
    data = path.read_bytes()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def entry_finished(directory: Path) -> bool:
    """Whether the entry `directory` was once completed (its manifest exists): a cheap look that reads no
    file; loading the entry still checks it."""
    return (directory / _MANIFEST).is_file()


def _verify(directory: Path, required: List[str]) -> Optional[str]:
    """None if the entry is complete and intact; "" if it was never finished (no manifest); otherwise what is
    wrong with it, naming the file."""
    manifest = directory / _MANIFEST
    try:
        raw = manifest.read_bytes()
    except FileNotFoundError:
        return ""
    try:
        files = json.loads(raw.decode())["files"]
        assert isinstance(files, dict) and all(name in files for name in required)
    except Exception:
        return f"{manifest} is not a valid manifest"
    for name, want in files.items():
        path = directory / name
        try:
            _check_trusted(path)
            got = _file_record(path)
        except FileNotFoundError:
            return f"{path} is missing"
        if got["size"] != want.get("size"):
            return f"{path} has {got['size']} bytes, {want.get('size')} were written"
        if got["sha256"] != want.get("sha256"):
            return f"{path} does not have the content that was written (sha256 differs)"
    return None


def _entry_lock(directory: Path) -> threading.Lock:
    with _entry_locks_guard:
        return _entry_locks.setdefault(str(directory), threading.Lock())


def free_bytes(path: Path) -> Optional[int]:
    """Bytes free for this user on the file system holding `path` (None when that cannot be read)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


LOW_SPACE = 64 << 20  # below this, a build that failed for no reason of its own is blamed on the disk


def io_error(e: OSError, directory: Path, what: str) -> EmulatorCacheIOError:
    """An OSError of a cache build, as an error that says what happened, to which file, building what."""
    name = e.filename or directory
    if e.errno == errno.ENOSPC or e.errno == errno.EDQUOT:
        text = (f"Metal emulator cache: no space left on the device holding {directory} while writing {name} "
                f"({what}; {free_bytes(directory) or 0} bytes free): free some space, or set TRITON_CACHE_DIR to a "
                "directory on another disk")
    elif e.errno == errno.ENOENT:
        text = (f"Metal emulator cache: {name} went missing while {what} was being built (was the cache directory "
                f"{directory} removed meanwhile, by a cache cleanup?); run again to rebuild it")
    else:
        text = f"Metal emulator cache: {e.strerror or e} for {name} ({what})"
    return EmulatorCacheIOError(text, e.errno, str(name))


def cached_entry(directory: Path, required: List[str], build: Callable[[Path], Dict[str, bytes]],
                 what: str = "a cache entry") -> bool:
    """Make sure the cache entry `directory` is complete; returns True if it already was (a cache hit).

    `build(directory)` writes the entry's files (with :func:`write_file` or :func:`_compile_into`, so that
    a killed build leaves only temporaries) or raises. The manifest is written here, last. `what` names what is
    built ("kernel 'add'") in the errors of a failed write (:class:`EmulatorCacheIOError`)."""
    try:
        return _cached_entry(directory, required, build)
    except EmulatorCacheIOError:
        raise
    except OSError as e:
        raise io_error(e, directory, what) from e


def _cached_entry(directory: Path, required: List[str], build: Callable[[Path], Dict[str, bytes]]) -> bool:
    _make_dir(directory)
    _check_trusted(directory)
    if _verify(directory, required) is None:
        return True
    with _entry_lock(directory):
        lock_fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, file_mode())
        _held_lock_fds.add(lock_fd)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            problem = _verify(directory, required)
            if problem is None:  # another thread or process built it meanwhile
                return True
            if problem and problem not in _warned:
                _warned.add(problem)
                warnings.warn(EmulatorCacheWarning(f"Metal emulator cache: {problem}; rebuilding it"), stacklevel=4)
            for p in directory.iterdir():  # a damaged entry, and temporaries of killed builds
                if p.name != ".lock" and (p.name.startswith((_TMP_PREFIX, ".build-")) or problem):
                    unlink_quietly(p)
            build(directory)
            files = {name: _file_record(directory / name) for name in sorted(os.listdir(directory))
                     if name not in (".lock", _MANIFEST) and not name.startswith(_TMP_PREFIX)
                     and (directory / name).is_file()}
            write_file(directory / _MANIFEST, json.dumps({"files": files}, indent=1).encode())
            return False
        finally:
            _held_lock_fds.discard(lock_fd)
            os.close(lock_fd)  # releases the flock
