"""Reading MSL kernel signatures and preparing MSL source for the host compiler.

Everything here keeps line numbers intact: rewrites never add or remove a newline, so compiler
diagnostics and ``__builtin_LINE()`` call sites refer to the lines of the user's source.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from ..abi import scalars
from ..target import MAX_BUFFER_SLOTS
from .errors import EmulatorCompileError

# builtin attribute -> (field of tt_thread_info or computed name, may be a vector)
BUILTINS: Dict[str, Tuple[str, bool]] = {
    "thread_position_in_threadgroup": ("tpos", True),
    "thread_index_in_threadgroup": ("tid", False),
    "threadgroup_position_in_grid": ("tgpos", True),
    "threadgroups_per_grid": ("ntg", True),
    "threads_per_threadgroup": ("tptg", True),
    "dispatch_threads_per_threadgroup": ("tptg", True),
    "thread_position_in_grid": ("gpos", True),
    "threads_per_grid": ("gsize", True),
    "thread_index_in_simdgroup": ("lane", False),
    "simdgroup_index_in_threadgroup": ("sg", False),
    "simdgroups_per_threadgroup": ("nsg", False),
    "dispatch_simdgroups_per_threadgroup": ("nsg", False),
    "threads_per_simdgroup": ("simd_width", False),
    "thread_execution_width": ("simd_width", False),
}

ATOMIC_SIZES = {"atomic_int": 4, "atomic_uint": 4, "atomic_float": 4, "atomic_bool": 1, "atomic_ulong": 8}
_ADDRESS_SPACES = ("device", "constant", "threadgroup", "thread")


def type_size(base: str) -> int:
    """Byte size of a Metal scalar/vector/atomic type name, 0 if unknown (e.g. a struct)."""
    base = " ".join(base.split())
    size = _scalar_size(base)
    if size:
        return size
    if base in ATOMIC_SIZES:
        return ATOMIC_SIZES[base]
    m = re.fullmatch(r"atomic\s*<\s*(\w+)\s*>", base)
    if m:
        return _scalar_size(m.group(1))
    m = re.fullmatch(r"([a-z]+)([234])", base) or re.fullmatch(r"(?:metal::)?vec\s*<\s*(\w+)\s*,\s*([234])\s*>", base)
    if m and _scalar_size(m.group(1)):
        n = int(m.group(2))
        return _scalar_size(m.group(1)) * (4 if n == 3 else n)
    return 0


def _scalar_size(name: str) -> int:
    try:
        return scalars.msl_scalar(name).nbytes
    except KeyError:
        return 0


@dataclass
class KernelParam:
    """One kernel parameter.

    ``kind`` is ``"buffer"`` or ``"builtin"``; ``index`` the buffer slot (``[[buffer(N)]]``) for
    buffers, ``None`` for builtins; ``msl_type`` the declared type with whitespace normalised (e.g.
    ``"device const half*"``, ``"constant int&"``); ``address_space`` ``"device"``/``"constant"``
    for buffers, ``None`` for builtins.
    """
    name: str
    kind: str
    index: Optional[int]
    msl_type: str
    address_space: Optional[str]
    builtin: Optional[str] = None
    line: int = 0
    base_type: str = ""
    elem_size: int = 0
    is_reference: bool = False
    readonly: bool = False
    vector_width: int = 1

    def __repr__(self):
        where = f"buffer({self.index})" if self.kind == "buffer" else self.builtin
        return f"KernelParam({self.name!r}, {self.msl_type!r}, [[{where}]])"


@dataclass
class KernelSignature:
    name: str
    params: List[KernelParam] = field(default_factory=list)
    line: int = 0

    @property
    def buffers(self) -> List[KernelParam]:
        return [p for p in self.params if p.kind == "buffer"]


def strip_comments(src: str) -> str:
    """Blank out comments and string/char literals, keeping every offset and newline."""
    out = list(src)
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if src[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            for k in range(i + 1, min(j, n)):
                out[k] = " "
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _line_of(src: str, offset: int) -> int:
    return src.count("\n", 0, offset) + 1


def _split_top_level(text: str, base: int) -> List[Tuple[str, int]]:
    """Split at commas outside (), <>, [] and {}; returns (piece, absolute offset)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append((text[start:i], base + start))
            start = i + 1
    if text[start:].strip():
        parts.append((text[start:], base + start))
    return parts


_KERNEL_RE = re.compile(r"(?:\bkernel\b|\[\[\s*kernel\s*\]\])\s*void\s+([A-Za-z_]\w*)\s*\(")


def find_kernels(src: str) -> List[str]:
    return [m.group(1) for m in _KERNEL_RE.finditer(strip_comments(src))]


def _fail(msg: str, src: str, lines: List[int], kernel: str):
    text = src.splitlines()
    shown = "".join(f"\n  {n:5d} | {text[n - 1] if 0 < n <= len(text) else ''}" for n in sorted(set(lines)))
    raise EmulatorCompileError(f"MSL kernel '{kernel}': {msg}{shown}", lines, kernel_name=kernel)


def parse_signature(src: str, kernel_name: str) -> KernelSignature:
    """Find ``kernel void <kernel_name>(...)`` (with a body) and parse its parameters."""
    clean = strip_comments(src)
    match = None
    for m in _KERNEL_RE.finditer(clean):
        if m.group(1) != kernel_name:
            continue
        # skip declarations: the definition has a body after the parameter list
        depth, i = 1, m.end()
        while i < len(clean) and depth:
            depth += {"(": 1, ")": -1}.get(clean[i], 0)
            i += 1
        rest = clean[i:].lstrip()
        if rest.startswith("{"):
            match = (m, i)
            break
    if match is None:
        found = find_kernels(src)
        raise EmulatorCompileError(
            f"MSL source has no kernel function named '{kernel_name}'" +
            (f" (kernels found: {', '.join(found)})" if found else " (no `kernel void name(...)` found)"),
            kernel_name=kernel_name)
    m, close = match
    sig = KernelSignature(kernel_name, line=_line_of(src, m.start()))
    params_text = clean[m.end():close - 1]
    used_slots: Dict[int, str] = {}
    pending_auto: List[KernelParam] = []
    for text, offset in _split_top_level(params_text, m.end()):
        line = _line_of(src, offset + len(text) - len(text.lstrip()))
        attrs = re.findall(r"\[\[(.*?)\]\]", text)
        decl = re.sub(r"\[\[.*?\]\]", " ", text).strip()
        if not decl:
            continue
        nm = re.search(r"([A-Za-z_]\w*)\s*$", decl)
        if not nm:
            _fail(f"cannot parse kernel parameter {decl!r}", src, [line], kernel_name)
        name = nm.group(1)
        ty = decl[:nm.start()].strip()
        ty_tokens = re.sub(r"([*&])", r" \1 ", ty).split()
        if not ty_tokens:
            _fail(f"parameter '{name}' has no type", src, [line], kernel_name)
        space = next((t for t in ty_tokens if t in _ADDRESS_SPACES), None)
        indirection = next((t for t in ty_tokens if t in ("*", "&")), None)
        first_ind = next((i for i, t in enumerate(ty_tokens) if t in ("*", "&")), len(ty_tokens))
        is_const = "const" in ty_tokens[:first_ind]
        base_tokens = [t for t in ty_tokens[:first_ind] if t not in _ADDRESS_SPACES + ("const", "volatile")]
        base = " ".join(base_tokens)
        msl_type = " ".join(ty_tokens).replace(" *", "*").replace(" &", "&")
        attr_names = [a.strip() for a in attrs]
        buf_attr = next((a for a in attr_names if re.fullmatch(r"buffer\s*\(\s*\d+\s*\)", a)), None)
        builtin = next((a for a in attr_names if a in BUILTINS), None)
        other = [a for a in attr_names if a != buf_attr and a != builtin]
        for a in other:
            if re.match(r"threadgroup\s*\(", a):
                _fail(f"parameter '{name}': threadgroup memory kernel arguments ([[{a}]]) are not supported "
                      "(PyTorch cannot set their length); declare a kernel-scope threadgroup array instead",
                      src, [line], kernel_name)
            if re.match(r"(function_constant|id)\b", a) or a in ("raster_order_group",):
                continue
            _fail(f"parameter '{name}': unsupported attribute [[{a}]]", src, [line], kernel_name)
        if builtin:
            _, vec_ok = BUILTINS[builtin]
            width = 1
            mv = re.fullmatch(r"(uint|ushort)([23]?)", base)
            if not mv or indirection:
                _fail(f"builtin parameter '{name}' [[{builtin}]] must be uint/ushort"
                      f"{' or uint2/uint3/ushort2/ushort3' if vec_ok else ''}, not '{msl_type}'",
                      src, [line], kernel_name)
            if mv.group(2):
                width = int(mv.group(2))
                if not vec_ok:
                    _fail(f"builtin [[{builtin}]] is a scalar; parameter '{name}' must be uint or ushort",
                          src, [line], kernel_name)
            sig.params.append(KernelParam(name, "builtin", None, msl_type, None, builtin=builtin, line=line,
                                          base_type=base, elem_size=type_size(base), vector_width=width))
            continue
        if space not in ("device", "constant") or indirection is None:
            what = "no [[buffer(N)]] or builtin attribute" if not buf_attr else "not a device/constant pointer or reference"
            _fail(f"parameter '{name}' ({msl_type}): {what}; kernel buffers must be `device T*`, "
                  "`constant T*` or `constant T&` (textures and stage_in are not supported by the emulator)",
                  src, [line], kernel_name)
        p = KernelParam(name, "buffer", None, msl_type, space, line=line, base_type=base,
                        elem_size=type_size(base), is_reference=indirection == "&",
                        readonly=space == "constant" or is_const)
        if buf_attr:
            slot = int(re.search(r"\d+", buf_attr).group(0))
            if slot >= MAX_BUFFER_SLOTS:
                _fail(f"parameter '{name}': buffer index {slot} out of range (Metal has {MAX_BUFFER_SLOTS} buffer "
                      f"slots, 0-{MAX_BUFFER_SLOTS - 1})",
                      src, [line], kernel_name)
            if slot in used_slots:
                _fail(f"parameters '{used_slots[slot]}' and '{name}' both use [[buffer({slot})]]", src, [line],
                      kernel_name)
            used_slots[slot] = name
            p.index = slot
        else:
            pending_auto.append(p)
        sig.params.append(p)
    # Metal assigns unattributed buffers the lowest free indices, in declaration order.
    for p in pending_auto:
        slot = next((i for i in range(MAX_BUFFER_SLOTS) if i not in used_slots), None)
        if slot is None:
            _fail(f"parameter '{p.name}': no buffer slot left: the kernel has {len(sig.buffers)} buffer parameters, "
                  f"Metal has {MAX_BUFFER_SLOTS} slots (0-{MAX_BUFFER_SLOTS - 1})", src, [p.line], kernel_name)
        used_slots[slot] = p.name
        p.index = slot
    return sig


# ------------------------------------------------------------------------------------------------
# Source rewrites (line-preserving)
# ------------------------------------------------------------------------------------------------

_TG_DECL_RE = re.compile(
    r"(?<![\w.])threadgroup\s+(?P<type>(?:const\s+)?[A-Za-z_][\w:]*(?:\s*<[^;{}()]*?>)?)\s+"
    r"(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]\[;{}]+\]\s*)*);")
_HALF_LIT_RE = re.compile(r"(?<![\w.])((?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)[hH](?!\w)")
_TG_SITE_BASE = 1 << 20


def rewrite_source(src: str) -> str:
    """Make MSL-only syntax acceptable to the host compiler without moving any line:

    * ``threadgroup T name[N]...;`` declarations inside functions become references to
      per-threadgroup storage provided by the runtime;
    * half literals ``1.5h`` become ``1.5f16``.
    """
    clean = strip_comments(src)
    edits: List[Tuple[int, int, str]] = []
    site = _TG_SITE_BASE
    for m in _TG_DECL_RE.finditer(clean):
        ty = " ".join(m.group("type").split())
        dims = "".join(m.group("dims").split())
        site += 1
        edits.append((m.start(), m.end(),
                      f'auto& {m.group("name")} = __tt_tg_var<{ty}{dims}>({site}u, "{m.group("name")}");'))
    for m in _HALF_LIT_RE.finditer(clean):
        edits.append((m.start(), m.end(), m.group(1) + "f16"))
    if not edits:
        return src
    edits.sort()
    out, pos = [], 0
    for start, end, text in edits:
        if start < pos:
            continue
        out.append(src[pos:start])
        out.append(text)
        pos = end
    out.append(src[pos:])
    return "".join(out)


def make_trampoline(sig: KernelSignature, include_name: str) -> Tuple[str, Dict[int, int]]:
    """C++ source of the per-kernel entry point, and a map from its lines to MSL lines.

    The entry point runs threads `ti->tid` up to `end` of a 1-D threadgroup one after the other (one thread: `end`
    is `ti->tid + 1`), setting each thread's ids in `*ti` and `*cur`, and returns the thread after the last it ran:
    `end`, or earlier when the runtime sets `*stop` (a thread reached a barrier or another runtime hook). With the
    kernel inlined into this loop, threads that never synchronise cost the runtime nothing per thread."""
    lines = [
        "// Generated by the Apple-backend emulator: binds buffer slots and builtins, calls the kernel.",
        f'#include "{include_name}"',
        "extern \"C\" __attribute__((visibility(\"default\"))) const int __tt_emu_abi = TT_EMU_ABI_VERSION;",
        "extern \"C\" __attribute__((visibility(\"default\"))) uint32_t __tt_emu_entry(",
        "    void *const *__tt_slots, tt_thread_info *__tt_ti, uint32_t __tt_end, volatile uint32_t *__tt_cur,",
        "    const volatile uint32_t *__tt_stop) {",
        "  for (uint32_t __tt_t = __tt_ti->tid;;) {",
    ]
    line_map: Dict[int, int] = {}
    fields = {p.builtin and BUILTINS[p.builtin][0] for p in sig.params if p.kind == "builtin"}
    if "gpos" in fields or "gsize" in fields:
        lines.append("  uint32_t __tt_gpos[3], __tt_gsize[3];")
        lines.append("  for (int __i = 0; __i < 3; ++__i) {")
        lines.append("    __tt_gpos[__i] = __tt_ti->tgpos[__i] * __tt_ti->tptg[__i] + __tt_ti->tpos[__i];")
        lines.append("    __tt_gsize[__i] = __tt_ti->ntg[__i] * __tt_ti->tptg[__i];")
        lines.append("  }")
    lines.append(f"  {sig.name}(")
    args = []
    for p in sig.params:
        if p.kind == "buffer":
            if p.is_reference:
                ptr_type = p.msl_type[:-1].rstrip() + "*"
                args.append(f"*({ptr_type})__tt_slots[{p.index}]")
            else:
                args.append(f"({p.msl_type})__tt_slots[{p.index}]")
        else:
            fld = BUILTINS[p.builtin][0]
            src = {"gpos": "__tt_gpos", "gsize": "__tt_gsize"}.get(fld)
            if src is None:
                src = f"__tt_ti->{fld}" if BUILTINS[p.builtin][1] else f"&__tt_ti->{fld}"
            args.append(f"__tt_builtin<{p.msl_type}>({src})")
    for i, (a, p) in enumerate(zip(args, sig.params)):
        lines.append(f"      {a}{',' if i + 1 < len(args) else ''}")
        line_map[len(lines)] = p.line
    lines.append("  );")
    lines.append("  if (++__tt_t == __tt_end || *__tt_stop) return __tt_t;")
    lines.append("  __tt_ti->tpos[0] = __tt_ti->tid = __tt_t;")
    lines.append("  __tt_ti->lane = __tt_t % TT_EMU_SIMD_WIDTH;")
    lines.append("  __tt_ti->sg = __tt_t / TT_EMU_SIMD_WIDTH;")
    lines.append("  *__tt_cur = __tt_t;")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n", line_map
