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
* files are created with the user's umask but never group/world-writable; libraries are refused (an
  :class:`EmulatorCacheError`) from a directory that another user owns or that group/others may write to,
  unless ``TRITON_APPLE_EMULATOR_TRUST_CACHE=1``; each directory is checked once per process.
"""
from __future__ import annotations

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
from .errors import EmulatorCacheError, EmulatorCacheWarning



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


def _check_trusted(path: Path) -> None:
    """Refuse a cache directory (or file) that another user owns or that group/others may write to."""
    key = str(path)
    if key in _trusted_dirs or knobs.emulator_trust_cache.get():
        return
    st = os.stat(path)
    owner_ok = st.st_uid in (os.geteuid(), 0)
    if not owner_ok or st.st_mode & 0o022:
        who = "owned by another user (uid %d)" % st.st_uid if not owner_ok else \
            "writable by %s (mode %o)" % ("group and others" if st.st_mode & 0o022 == 0o022 else
                                          "others" if st.st_mode & 0o002 else "group", stat.S_IMODE(st.st_mode))
        raise EmulatorCacheError(
            f"refusing to load Metal emulator libraries from {path}: it is {who}, so another user could put code "
            f"there that would run in this process. Use a private TRITON_CACHE_DIR, or `chmod go-w {path}`, or set "
            "TRITON_APPLE_EMULATOR_TRUST_CACHE=1 if everyone who can write there is trusted.")
    if stat.S_ISDIR(st.st_mode):
        _trusted_dirs.add(key)


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
_warned: set = set()


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
    except BaseException:
        unlink_quietly(tmp)
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


def cached_entry(directory: Path, required: List[str], build: Callable[[Path], Dict[str, bytes]]) -> bool:
    """Make sure the cache entry `directory` is complete; returns True if it already was (a cache hit).

    `build(directory)` writes the entry's files (with :func:`write_file` or :func:`_compile_into`, so that
    a killed build leaves only temporaries) or raises. The manifest is written here, last."""
    _make_dir(directory)
    _check_trusted(directory)
    if _verify(directory, required) is None:
        return True
    with _entry_lock(directory):
        lock_fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, file_mode())
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
            os.close(lock_fd)  # releases the flock
