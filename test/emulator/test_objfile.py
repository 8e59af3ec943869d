"""objfile.py: the code section of a kernel library, read from ELF and Mach-O files, and when two libraries hold
the same code (the check before a quick library's fault is located through its twin with line tables)."""
import struct


def _macho(text: bytes, addr: int = 0x4000, other_segment_first: bool = True) -> bytes:
    """A minimal 64-bit Mach-O file: a segment without sections (when asked), then __TEXT with a __text section."""
    cmds = b""
    ncmds = 0
    if other_segment_first:
        cmds += struct.pack("<II16sQQQQiiII", 0x19, 72, b"__PAGEZERO", 0, 0x4000, 0, 0, 0, 0, 0, 0)
        ncmds += 1
    text_at = 32 + len(cmds) + 72 + 80
    segment = struct.pack("<II16sQQQQiiII", 0x19, 72 + 80, b"__TEXT", addr, len(text), text_at, len(text), 5, 5, 1, 0)
    section = struct.pack("<16s16sQQIIIIIIII", b"__text", b"__TEXT", addr, len(text), text_at, 2, 0, 0, 0, 0, 0, 0)
    cmds += segment + section
    ncmds += 1
    header = struct.pack("<IiiIIIII", 0xFEEDFACF, 0x0100000C, 0, 6, ncmds, len(cmds), 0, 0)
    return header + cmds + text


def test_objfile_reads_a_mach_o_code_section(tmp_path):
    """objfile.py's Mach-O reader on synthetic files (the ELF reader meets real libraries in test_emu_errors)."""
    from triton.backends.apple.emulator import objfile
    code = bytes(range(64))
    a, b = tmp_path / "a.dylib", tmp_path / "b.dylib"
    a.write_bytes(_macho(code))
    b.write_bytes(_macho(code, other_segment_first=False))
    assert objfile.code_section(a) == (0x4000, code)
    assert objfile.same_code(a, b)  # the same code at the same address, wherever the section sits in the file
    b.write_bytes(_macho(code[:-1] + b"\xff"))
    assert not objfile.same_code(a, b)  # one byte differs
    b.write_bytes(_macho(code, addr=0x8000))
    assert not objfile.same_code(a, b)  # the same bytes at another address
    b.write_bytes(_macho(code)[:40])
    assert objfile.code_section(b) is None and not objfile.same_code(a, b)  # truncated: no answer, not "same"
    b.write_bytes(b"not an object file")
    assert objfile.code_section(b) is None
