"""The debug-record protocol of `tl.device_print` / `tl.device_assert`, shared by the lowering (which writes
records, `lowering/debug_ops.py`) and the launcher (which decodes them after the launch, prints them and
raises for failed assertions).

A kernel that prints or asserts gets one more buffer of BUFFER_WORDS 32-bit words. Word 0 is an atomic
cursor; records follow it: [length, format id, pid.x, pid.y, pid.z, element index, 2 words per value].
Records that would not fit are dropped and the output is reported as truncated."""
from __future__ import annotations

import struct
import sys
from typing import List, Optional, Sequence, Tuple

BUFFER_WORDS = 1 << 16
HEADER_WORDS = 6


class DeviceAssertionError(AssertionError):
    """A `tl.device_assert` failed in a kernel (raised after the launch, like CUDA's device-side assert)."""



def _unravel(index: int, shape: Sequence[int]) -> List[int]:
    out = []
    for n in reversed(shape):
        out.append(index % n)
        index //= n
    return list(reversed(out))


def _format_value(ty: str, signed: bool, hex_: bool, lo: int, hi: int) -> str:
    if ty == "f64":
        value = struct.unpack("<d", struct.pack("<Q", lo | (hi << 32)))[0]
        return f"0x{lo | (hi << 32):016x}" if hex_ else f"{value:.17g}"
    if ty in ("f16", "bf16", "f32") or ty.startswith("f8"):
        value = struct.unpack("<f", struct.pack("<I", lo))[0]
        return f"0x{lo:08x}" if hex_ else f"{value:.6g}" if ty != "f32" else f"{value:.9g}"
    bits = 64 if ty in ("i64", "index") else int(ty[1:]) if ty[1:].isdigit() else 32
    raw = lo | (hi << 32)
    raw &= (1 << bits) - 1
    if hex_:
        return f"0x{raw:0{bits // 4}x}"
    if signed and raw >> (bits - 1):
        raw -= 1 << bits
    return str(raw)


def decode(words: Sequence[int], formats: List[dict], kernel: str) -> Tuple[List[str], Optional[str]]:
    """Turn the buffer into printed lines and, if an assertion failed, the message to raise."""
    words = [w & 0xFFFFFFFF for w in words]
    end = min(words[0] + 1, len(words)) if words else 0
    lines, failures, pos = [], [], 1
    truncated = words and words[0] + 1 > len(words)
    while pos < end:
        n = words[pos]
        if n < HEADER_WORDS or pos + n > end:
            break
        fmt = formats[words[pos + 1]]
        pid = tuple(words[pos + 2:pos + 5])
        index = words[pos + 5]
        idx = _unravel(index, fmt["shape"]) if fmt["shape"] else []
        where = f"pid ({pid[0]}, {pid[1]}, {pid[2]})" + (f" idx ({', '.join(str(i) for i in idx)})" if idx else "")
        if fmt["kind"] == "print":
            vals = []
            for k, ty in enumerate(fmt["types"]):
                lo, hi = words[pos + HEADER_WORDS + 2 * k], words[pos + HEADER_WORDS + 2 * k + 1]
                signed = bool(fmt["signed"][k]) if k < len(fmt["signed"]) else True
                vals.append(_format_value(ty, signed, fmt["hex"], lo, hi))
            lines.append(f"{where}{fmt['prefix']}{', '.join(vals)}")
        else:
            failures.append(f"{where}: {fmt['prefix']}")
            if len(failures) == 1:
                first = fmt
        pos += n
    if truncated:
        lines.append(f"[apple backend: device_print output of kernel '{kernel}' was truncated]")
    failure = None
    if failures:
        failure = (f"device assertion failed in kernel '{kernel}' at {first['where']}: {first['prefix']}\n  " +
                   "\n  ".join(failures[:8]) +
                   (f"\n  ... and {len(failures) - 8} more" if len(failures) > 8 else ""))
    return lines, failure


def report(words: Sequence[int], formats: List[dict], kernel: str) -> None:
    """Print what the kernel printed, then raise DeviceAssertionError if an assertion failed."""
    lines, failure = decode(words, formats, kernel)
    for line in lines:
        print(line, file=sys.stdout)
    sys.stdout.flush()
    if failure:
        raise DeviceAssertionError(failure)
