"""The machine code of a kernel library: its code section's address and bytes, read from the ELF (Linux) or
Mach-O (macOS) file, so that two builds of a kernel can be checked to hold the same instructions at the same
offsets.

A quick library (-O0) is built without line tables (`clang.QUICK_KERNEL_FLAGS`); a fault in it is mapped to its
MSL line through the same build with line tables. Debug information does not change generated code, and that is
checked here rather than assumed: the line is looked up only where both libraries' code sections are equal.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Optional, Tuple, Union

_ELF_MAGIC = b"\x7fELF"
_MACHO_MAGIC_64 = 0xFEEDFACF  # little-endian 64-bit Mach-O (arm64 and x86_64 Macs)
_LC_SEGMENT_64 = 0x19


def code_section(path: Union[str, Path]) -> Optional[Tuple[int, bytes]]:
    """(address, bytes) of the library's code section (`.text`; `__TEXT,__text`), or None when the file is not
    a 64-bit little-endian ELF or Mach-O file, has no such section, or cannot be read."""
    try:
        data = Path(path).read_bytes()
        if data[:4] == _ELF_MAGIC:
            return _elf_text(data)
        if len(data) >= 4 and struct.unpack_from("<I", data, 0)[0] == _MACHO_MAGIC_64:
            return _macho_text(data)
    except (OSError, struct.error, ValueError, IndexError):
        pass
    return None


def same_code(a: Union[str, Path], b: Union[str, Path]) -> bool:
    """Whether both libraries hold the same code section at the same address (so an instruction's offset in one
    names the same instruction in the other)."""
    code_a = code_section(a)
    return code_a is not None and code_a == code_section(b)


def _elf_text(data: bytes) -> Optional[Tuple[int, bytes]]:
    if data[4] != 2 or data[5] != 1:  # ELFCLASS64, little-endian
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]  # sh_offset of the section name table
    for name, _type, _flags, addr, offset, size in headers:
        start = names_at + name
        if data[start:data.index(b"\0", start)] == b".text":
            return addr, data[offset:offset + size]
    return None


def _macho_text(data: bytes) -> Optional[Tuple[int, bytes]]:
    ncmds, = struct.unpack_from("<I", data, 16)
    at = 32  # after mach_header_64
    for _ in range(ncmds):
        cmd, cmdsize = struct.unpack_from("<II", data, at)
        if cmd == _LC_SEGMENT_64:
            nsects, = struct.unpack_from("<I", data, at + 64)
            section = at + 72  # section_64 records follow segment_command_64
            for _ in range(nsects):
                sectname, segname = data[section:section + 16], data[section + 16:section + 32]
                if sectname.rstrip(b"\0") == b"__text" and segname.rstrip(b"\0") == b"__TEXT":
                    addr, size, offset = struct.unpack_from("<QQI", data, section + 32)
                    return addr, data[offset:offset + size]
                section += 80
        at += cmdsize
    return None
