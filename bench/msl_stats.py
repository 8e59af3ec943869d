"""Numbers read off a kernel's generated MSL, for bench/codegen_report.py and bench/mma_report.py.

The lowering writes one statement per line, opens every block at the end of a line and closes it on a
line of its own (a loop or `if` whose body is one statement is written on one line), and puts a
`// <op> <file>:<line>` comment at the end of the first line of each op's code (older revisions: on a line
before it). These functions rely on that shape and on nothing else of the lowering, so they read the MSL of
older revisions too.

  lines         every line of the MSL; `code lines` leaves out blank and comment-only lines
  functions     top-level functions other than the kernel (helpers, combine functions, noinline callees)
  barriers      `threadgroup_barrier(` calls written in the source (static count)
  SIMD builtins calls of Metal's SIMD-group reductions and scans (simd_sum, simd_max, simd_prefix_*, ...)
  shuffles      call sites of simd_shuffle* (directly, or through a helper that only wraps one), not
                counting the wrapper's own body
  per K step    for the innermost loop with a non-constant trip count that contains a
                `simdgroup_multiply_accumulate`: how many simdgroup_load / simdgroup_multiply_accumulate /
                simdgroup_store and threadgroup barriers one simdgroup executes per iteration. Loops with
                constant bounds inside it (register and fragment loops) multiply what they contain; both
                branches of an `if` are counted (an upper bound).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

SIMD_BUILTINS = ("simd_sum", "simd_product", "simd_max", "simd_min", "simd_and", "simd_or", "simd_xor",
                 "simd_prefix_inclusive_sum", "simd_prefix_inclusive_product", "simd_prefix_exclusive_sum",
                 "simd_prefix_exclusive_product", "simd_broadcast", "simd_broadcast_first", "simd_all", "simd_any",
                 "simd_ballot", "quad_sum", "quad_max", "quad_min", "quad_prefix_inclusive_sum")
_BUILTIN_CALL = re.compile(r"\b(" + "|".join(sorted(SIMD_BUILTINS, key=len, reverse=True)) + r")\s*\(")
_SHUFFLE_CALL = re.compile(r"\bsimd_shuffle\w*\s*\(")
_FUNC_NAME = re.compile(r"(\w+)\s*\(")
_CONST_LOOP = re.compile(r"^\s*for \((?:uint|int|ushort|short) (\w+) = (\d+); \1 < (\d+); (?:\+\+\1|\1\+\+|\1 \+= (\d+))\)\s*\{\s*$")
# a constant loop whose body is the rest of its line (`for (uint r = 0; r < 8; ++r) x[r] = ...;`)
_CONST_LOOP_INLINE = re.compile(r"^\s*for \((?:uint|int|ushort|short) (\w+) = (\d+); \1 < (\d+); (?:\+\+\1|\1\+\+|\1 \+= (\d+))\)\s*(?=[^{\s])")
_ANY_LOOP = re.compile(r"^\s*(?:for|while)\s*\(|^\s*do\s*\{")
_COMMENT_ONLY = re.compile(r"^\s*//")


@dataclass
class Function:
    name: str
    lines: List[str]
    is_kernel: bool


def split_functions(msl: str) -> List[Function]:
    """Top-level functions of the MSL (anything whose body opens a brace at depth 0)."""
    funcs: List[Function] = []
    depth, current, header = 0, None, []
    for line in msl.splitlines():
        code = line.split("//", 1)[0]
        if depth == 0 and current is None:
            header.append(line)
            if "{" in code and not code.strip().startswith("#"):
                text = " ".join(header)
                m = None
                for m in _FUNC_NAME.finditer(text.split("(", 1)[0] + "("):
                    pass
                name = m.group(1) if m else "?"
                current = Function(name, list(header), bool(re.search(r"\bkernel\s+void\b", text)))
                header = []
            elif not code.strip() or code.strip().endswith(";") or code.strip().startswith("#"):
                header = []
        elif current is not None:
            current.lines.append(line)
        depth += code.count("{") - code.count("}")
        if current is not None and depth == 0:
            funcs.append(current)
            current = None
    return funcs


@dataclass
class LoopCounts:
    """What one iteration of a loop executes, per simdgroup."""
    loads: int = 0
    mmas: int = 0
    stores: int = 0
    barriers: int = 0


@dataclass
class _Scope:
    trip: int  # constant trip count, 1 for other blocks
    dynamic: bool  # a loop whose trip count is not a constant
    counts: Optional[LoopCounts] = None


def _trip(m) -> int:
    step = int(m.group(4)) if m.group(4) else 1
    return -(-(int(m.group(3)) - int(m.group(2))) // step)


def dot_loop_counts(lines: List[str]) -> List[LoopCounts]:
    """LoopCounts of each non-constant loop of `lines` that contains a simdgroup_multiply_accumulate."""
    stack: List[_Scope] = []
    found: List[LoopCounts] = []

    def pop(n: int) -> None:
        for _ in range(min(n, len(stack))):
            scope = stack.pop()
            if scope.dynamic and scope.counts.mmas:
                found.append(scope.counts)

    for line in lines:
        code = line.split("//", 1)[0]
        stripped = code.strip()
        leading = len(stripped) - len(stripped.lstrip("}"))  # `} else {` closes before it opens
        pop(leading)
        weight, loop = 1, None
        for scope in reversed(stack):
            if scope.dynamic:
                loop = scope
                break
            weight *= scope.trip
        inline = code
        while loop is not None:  # loops whose body is on their own line multiply it
            m = _CONST_LOOP_INLINE.match(inline)
            if not m:
                break
            weight *= _trip(m)
            inline = inline[m.end():]
        if loop is not None:
            c = loop.counts
            c.loads += weight * code.count("simdgroup_load(")
            c.mmas += weight * code.count("simdgroup_multiply_accumulate(")
            c.stores += weight * code.count("simdgroup_store(")
            c.barriers += weight * code.count("threadgroup_barrier(")
        net = code.count("{") - (code.count("}") - leading)
        if net > 0:
            m = _CONST_LOOP.match(code)
            if m:
                stack.append(_Scope(_trip(m), False))
            elif _ANY_LOOP.match(code):
                stack.append(_Scope(1, True, LoopCounts()))
            else:
                stack.append(_Scope(1, False))
            stack.extend(_Scope(1, False) for _ in range(net - 1))
        elif net < 0:
            pop(-net)
    pop(len(stack))
    return found


@dataclass
class MslStats:
    lines: int
    code_lines: int
    functions: int
    barriers: int
    simd_builtins: int
    shuffles: int
    builtin_names: Dict[str, int] = field(default_factory=dict)
    per_k_step: Optional[LoopCounts] = None


def _is_shuffle_wrapper(f: Function) -> bool:
    """A helper whose body is one simd_shuffle* call (plus braces and a return)."""
    body = [ln.split("//", 1)[0].strip() for ln in f.lines[1:]]
    body = [ln for ln in body if ln and ln not in ("{", "}")]
    return len(body) == 1 and bool(_SHUFFLE_CALL.search(body[0])) and not f.is_kernel


def msl_stats(msl: str) -> MslStats:
    all_lines = msl.splitlines()
    code_lines = [ln for ln in all_lines if ln.strip() and not _COMMENT_ONLY.match(ln)]
    funcs = split_functions(msl)
    wrappers = {f.name for f in funcs if _is_shuffle_wrapper(f)}
    wrapper_call = re.compile(r"\b(" + "|".join(map(re.escape, sorted(wrappers))) + r")\s*\(") if wrappers else None
    shuffles = builtins = barriers = 0
    names: Dict[str, int] = {}
    for f in funcs:
        body = f.lines[1:]
        for ln in body:
            code = ln.split("//", 1)[0]
            barriers += code.count("threadgroup_barrier(")
            for m in _BUILTIN_CALL.finditer(code):
                builtins += 1
                names[m.group(1)] = names.get(m.group(1), 0) + 1
            if f.name not in wrappers:
                shuffles += len(_SHUFFLE_CALL.findall(code))
                if wrapper_call is not None:
                    shuffles += len(wrapper_call.findall(code))
    loops = [c for f in funcs for c in dot_loop_counts(f.lines)]
    per_k = None
    if loops:  # several dot loops (e.g. attention's causal stages): the one with the most MMAs per step
        per_k = max(loops, key=lambda c: c.mmas)
    return MslStats(len(all_lines), len(code_lines), sum(1 for f in funcs if not f.is_kernel), barriers, builtins,
                    shuffles, names, per_k)


# ------------------------------------------------------------------------------------------------ per-op sections

# bytes of the MSL scalar types a global access can move
ELEM_BYTES = {"bool": 1, "char": 1, "uchar": 1, "short": 2, "ushort": 2, "half": 2, "bfloat": 2, "int": 4,
              "uint": 4, "float": 4, "long": 8, "ulong": 8}
_OP_COMMENT = re.compile(r'^\s*// ([a-z_]+\.[a-z_.]+) (\S+):(\d+)\s*$')
_OP_TRAILING_COMMENT = re.compile(r'^\s*\S.*?(?P<comment>\s*// (?P<op>[a-z_]+\.[a-z_.]+) (?P<file>\S+):(?P<line>\d+))\s*$')
_VEC_ACCESS = re.compile(r'\*\(device (?:const )?([a-z]+)(\d+)\*\)')
_SCALAR_DEREF = re.compile(r'(?<![\w)\]])\*([A-Za-z_]\w*)')
_PTR_DECL = re.compile(r'device (?:const )?([a-z]+)\* ([A-Za-z_]\w*)\b')


_SCF_FOR = re.compile(r'^(\s*)for \((?:int|long) \w+ = ')  # scf.for (register loops use `uint`)


@dataclass
class Section:
    op: str
    where: Tuple[str, int]
    body: List[str]
    in_loop: bool  # inside the body of an scf.for


def msl_sections(msl: str) -> List[Section]:
    """Every op of the MSL with the lines up to the next op, in MSL order. An op's location comment is on a
    line of its own before its code, or (since the lowering writes it so) at the end of its first line."""
    sections: List[Section] = []
    loops: List[str] = []  # indentation of the open scf.for loops
    for line in msl.splitlines():
        m = _OP_COMMENT.match(line)
        if m:
            sections.append(Section(m.group(1), (m.group(2), int(m.group(3))), [], bool(loops)))
            continue
        m = _OP_TRAILING_COMMENT.match(line)
        if m:
            sections.append(Section(m.group("op"), (m.group("file"), int(m.group("line"))), [], bool(loops)))
            line = line[:m.start("comment")]
        f = _SCF_FOR.match(line)
        if f and line.rstrip().endswith("{"):
            loops.append(f.group(1))
        elif loops and line == loops[-1] + "}":
            loops.pop()
        if sections:
            sections[-1].body.append(line)
    return sections


def smem_converts(msl: str) -> Tuple[int, int]:
    """(inside loops, total) `ttg.convert_layout`s that go through threadgroup memory."""
    cvts = [s for s in msl_sections(msl)
            if s.op == "ttg.convert_layout" and any("threadgroup_barrier" in line for line in s.body)]
    return sum(s.in_loop for s in cvts), len(cvts)


@dataclass
class Access:
    op: str
    where: Tuple[str, int]
    width: int  # bytes of the widest access
    vector: bool


def global_accesses(msl: str) -> List[Access]:
    ptr_elem = {name: ty for ty, name in _PTR_DECL.findall(msl)}
    out = []
    for sec in msl_sections(msl):
        op, where = sec.op, sec.where
        if op not in ("tt.load", "tt.store"):
            continue
        text = "\n".join(sec.body)
        vec = [int(n) * ELEM_BYTES[t] for t, n in _VEC_ACCESS.findall(text)]
        if vec:
            out.append(Access(op, where, max(vec), True))
            continue
        scalar = [ELEM_BYTES.get(ptr_elem.get(name, ""), 0) for name in _SCALAR_DEREF.findall(text)
                  if name in ptr_elem]
        out.append(Access(op, where, max(scalar) if scalar else 0, False))
    return out
