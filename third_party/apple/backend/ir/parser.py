"""Parser from printed TTGIR (``module.str()``) to our IR.

libtriton's Python bindings cannot iterate blocks or read float/dense constants, so the
printed module is the complete, stable interface. The parser works in two levels: a scanner that
splits the text into ops, blocks and regions (every printed op ends with its `loc(...)`), and an
interpreter of each op's own assembly format that finds operands, attributes and result types.
"""
from __future__ import annotations

import functools
import re
from typing import Dict, List, Optional, Tuple

from .core import Block, Function, Location, Module, Op, Region, UNKNOWN, Value
from .types import (BlockedEncoding, DotOperandEncoding, Encoding, FunctionType, GenericLinearEncoding,
                    LinearEncoding, MemDescType, OpaqueEncoding, OpaqueType, PointerType, ScalarType, SharedEncoding,
                    SliceEncoding, TensorType, Type, FLOAT_WIDTHS, INT_WIDTHS, I1)


class IRParseError(Exception):
    pass


_VALUE_RE = re.compile(r"%[A-Za-z0-9_$.\-]+(?:#\d+)?")
# `@name` or `@"name with other characters"` (MLIR quotes symbol names that are not bare identifiers)
_SYMBOL_RE = re.compile(r'@(?:([A-Za-z0-9_$.]+)|"((?:[^"\\]|\\.)*)")')
_REGION_MARK = "\x00R{}\x00"
_STRING_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')
_PAIR_RE = re.compile(r"(?<![\w%#.])([A-Za-z_][A-Za-z0-9_]*) = ([A-Za-z0-9_.+\-]+)")

# Bare keywords an op's custom assembly prints before its operands: the attribute each one is.
_KEYWORD_ATTRS = {
    "arith.cmpi": ("predicate", ), "arith.cmpf": ("predicate", ), "tt.get_program_id": ("axis", ),
    "tt.get_num_programs": ("axis", ), "tt.atomic_rmw": ("atomic_rmw_op", "sem", "scope"),
    "tt.atomic_cas": ("sem", "scope"), "tt.atomic_poll": ("sem", "scope"), "ttg.barrier": ("address_space", ),
    "ttg.local_atomic_scatter_rmw": ("atomic_rmw_op", ),
}
# String literals an op's custom assembly prints: the attribute each one is.
# tt.elementwise_inline_asm's assembly is read so that the lowering can refuse the op by name (PTX cannot run on Metal)
_STRING_ATTRS = {"tt.print": ("prefix", ), "tt.assert": ("message", ), "tt.elementwise_inline_asm": ("asm_string", )}
_REGION_RE = re.compile(r"\x00R(\d+)\x00")
# Compiled once: the parser matches these once or more per op, and `re.fullmatch(pattern, ...)` looks its
# pattern up in the module cache on every call.
_INT_ATTR = re.compile(r"(-?\d+)(?:\s*:\s*[a-z0-9]+)?")
_DENSE_ATTR = re.compile(r"dense<(.*)>\s*:\s*tensor<((?:\d+x)+)[a-z0-9]+>", re.S)
_FLOAT_ATTR = re.compile(r"(-?[0-9.]+(?:e[+-]?\d+)?)\s*:\s*(f\d+|bf16)")
_ENCODING = re.compile(r"#ttg\.([a-z_]+)<(.*)>", re.S)
_ALLOC_SHAPE = re.compile(r"\d+(?:x\d+)*")
_DIM = re.compile(r"(\d+)x")
_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)(?:\s+to\s+.*)?', re.S)
_NAME_LOC = re.compile(r'"((?:[^"\\]|\\.)*)"\((.*)\)', re.S)
_ALIAS_LINE = re.compile(r"^(#[A-Za-z0-9_]+) = (.*)$")
_BLOCK_LABEL = re.compile(r"\^([A-Za-z0-9_]+)")
_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_PROPERTIES = re.compile(r"<\{")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Where an op's text can change meaning: a string, `->`, its trailing `loc(`, a bracket.
_OP_STOPS = re.compile(r'"|->|loc\(|[()\[\]{}<>]')


# ----------------------------------------------------------------------------------------------
# Small text utilities


# The scanners below look at a character only where it can matter (a quote, `-` of `->`, a bracket, the first
# character of what they search for) and jump over everything in between with one regular-expression search:
# the same decisions as reading every character, several times faster on printed modules.
_BRACKETS = "([{<)]}>"


@functools.lru_cache(maxsize=None)
def _jump(first_chars: str) -> "re.Pattern[str]":
    """A pattern finding the next of `first_chars`."""
    return re.compile("[" + re.escape(first_chars) + "]")


_NESTING = re.compile(r'[()\[\]{}<>"]')


def split_top(s: str, sep: str = ",") -> List[str]:
    """Split at `sep` outside of (), [], {}, <> and strings; `->` is not a closing bracket."""
    if not _NESTING.search(s):  # nothing nested (`i32, i32`, `%a, %b`): every separator is at the top
        parts = [p.strip() for p in s.split(sep)]
        return parts if len(parts) > 1 or parts[0] else []
    out, depth, cur, i = [], 0, [], 0
    jump = _jump('"-' + _BRACKETS + sep[:1])
    n = len(s)
    while i < n:
        m = jump.search(s, i)
        j = m.start() if m else n
        if j > i:
            cur.append(s[i:j])
            i = j
            if i >= n:
                break
        c = s[i]
        if c == '"':
            j = _string_end(s, i)
            cur.append(s[i:j])
            i = j
            continue
        if c == "-" and s.startswith("->", i):
            cur.append("->")
            i += 2
            continue
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if depth == 0 and s.startswith(sep, i):
            out.append("".join(cur).strip())
            cur = []
            i += len(sep)
            continue
        cur.append(c)
        i += 1
    tail = "".join(cur).strip()
    if tail or out:
        out.append(tail)
    return out


@functools.lru_cache(maxsize=None)
def _top_level_stops(needle: str) -> "re.Pattern[str]":
    """Where `find_top` must look: a string, `->`, `needle` itself, a bracket (stopping at every character that
    `needle` starts with would stop at every space for `" : "`)."""
    return re.compile('"|->|' + re.escape(needle) + r"|[()\[\]{}<>]")


def find_top(s: str, needle: str, start: int = 0, last: bool = False) -> int:
    """The index of `needle` in `s` outside of brackets and strings (the last one with `last`), or -1."""
    if s.find(needle, start) < 0 and s.find('"', start) < 0:  # (a string is still read, to report one unterminated)
        return -1
    depth, i, found = 0, start, -1
    stops = _top_level_stops(needle)
    n = len(s)
    while i < n:
        m = stops.search(s, i)
        if not m:
            break
        i = m.start()
        c = s[i]
        if c == '"':
            i = _string_end(s, i)
            continue
        if c == "-" and s.startswith("->", i):
            if depth == 0 and s.startswith(needle, i):
                if not last:
                    return i
                found = i
            i += 2
            continue
        if depth == 0 and s.startswith(needle, i):
            if not last:
                return i
            found = i
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        i += 1
    return found


_STRING_AT = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)


def _string_end(s: str, i: int) -> int:
    """The index after the string literal that starts at `s[i]` (a backslash escapes the next character)."""
    m = _STRING_AT.match(s, i)
    if not m:
        raise IRParseError(f"unterminated string in {s[i:i + 40]!r}")
    return m.end()


def _unwrap(s: str, open_: str, close: str) -> str:
    s = s.strip()
    if not (s.startswith(open_) and s.endswith(close)):
        raise IRParseError(f"expected {open_}...{close}, got {s!r}")
    return s[len(open_):-len(close)]


# ----------------------------------------------------------------------------------------------
# Attributes


def parse_attr_value(s: str, aliases: Dict[str, str]):
    s = s.strip()
    if s.startswith('"'):
        return bytes(s[1:-1], "utf-8").decode("unicode_escape")
    if s in ("true", "false"):
        return s == "true"
    if s.startswith("[") and s.endswith("]"):
        return [parse_attr_value(x, aliases) for x in split_top(s[1:-1])]
    if s.startswith("array<"):
        inner = _unwrap(s, "array<", ">")
        if ":" in inner:
            _, vals = inner.split(":", 1)
            return [int(v) for v in vals.split(",") if v.strip()]
        return []
    m = _INT_ATTR.fullmatch(s)
    if m:
        return int(m.group(1))
    m = _DENSE_ATTR.fullmatch(s)
    if m:  # hints such as `dense<16> : tensor<2xi32>` (a splat) or `dense<[1, 16]> : tensor<2xi32>`
        count = 1
        for d in m.group(2).split("x")[:-1]:
            count *= int(d)
        inner = m.group(1).strip()
        values = split_top(inner[1:-1]) if inner.startswith("[") else [inner] * count
        return [parse_attr_value(v, aliases) for v in values]
    m = _FLOAT_ATTR.fullmatch(s)
    if m:
        return float(m.group(1))
    if s.startswith("#") and s in aliases:
        return aliases[s]
    return s


def parse_attr_dict(s: str, aliases: Dict[str, str]) -> Dict[str, object]:
    body = _unwrap(s, "{", "}")
    out: Dict[str, object] = {}
    for item in split_top(body):
        if not item:
            continue
        eq = find_top(item, "=")
        if eq < 0:
            out[item.strip().strip('"')] = True  # unit attribute
        else:
            out[item[:eq].strip().strip('"')] = parse_attr_value(item[eq + 1:], aliases)
    return out


def _row_major_placement(kind: str, params: Dict[str, object], order: Tuple[int, ...]) -> bool:
    """Whether upstream places the elements of a buffer of shared encoding `kind`/`params` row-major: a swizzled
    layout that does not swizzle (maxPhase 1) with the last dimension fastest, or a linear one whose offset bases
    are the row-major unit steps. Other kinds (padded, NVIDIA's) and anything else: False."""
    if kind == "swizzled_shared":
        return int(params.get("maxPhase", 1)) == 1 and list(order) == sorted(order, reverse=True)
    if kind == "shared_linear":
        bases = [list(b) for b in params.get("offset", [])]
        if not bases or params.get("block"):
            return False
        shape = [1] * len(bases[0])  # the extent of each dimension, grown one offset bit at a time
        for b in bases:
            d = len(b) - 1 - next((i for i, x in enumerate(reversed(b)) if x), len(b))
            if d < 0 or any(x for i, x in enumerate(b) if i != d) or b[d] != shape[d] or any(
                    shape[i] > 1 for i in range(d)):
                return False
            shape[d] *= 2
        return True
    return False


def _encoding_params(body: str) -> Dict[str, object]:
    """The parameters of an encoding's body: an attribute dictionary `{k = v, ...}`, optionally followed by
    `, key = value` pairs outside it (`#ttg.shared_linear<{offset = [...]}, alignment = 16>`)."""
    out: Dict[str, object] = {}
    if not body.startswith("{"):
        return out
    for i, item in enumerate(split_top(body)):
        if i == 0:
            out.update(parse_attr_dict(item, {}))
            continue
        eq = find_top(item, "=")
        if eq < 0:
            raise IRParseError(f"cannot read encoding parameter {item!r} in {body!r}")
        out[item[:eq].strip()] = parse_attr_value(item[eq + 1:], {})
    return out


# ----------------------------------------------------------------------------------------------
# Types and encodings


class TypeParser:

    def __init__(self, aliases: Dict[str, str]):
        self.aliases = aliases
        self._enc_cache: Dict[str, Encoding] = {}
        self._type_cache: Dict[str, Type] = {}  # types are frozen: one object per spelling in the module
        self._list_cache: Dict[str, Tuple[Type, ...]] = {}  # the same for lists of types (`T, T -> T`)

    def encoding(self, s: str) -> Encoding:
        s = s.strip()
        if s in self._enc_cache:
            return self._enc_cache[s]
        text = self.aliases.get(s, s)
        enc = self._encoding_text(text)
        self._enc_cache[s] = enc
        return enc

    def _encoding_text(self, text: str) -> Encoding:
        m = _ENCODING.fullmatch(text)
        if not m:
            return OpaqueEncoding(text)
        kind, body = m.group(1), m.group(2)
        if kind == "shared_memory":
            return OpaqueEncoding(text)
        params = _encoding_params(body)
        if kind == "blocked":
            return BlockedEncoding(tuple(params["sizePerThread"]), tuple(params["threadsPerWarp"]),
                                   tuple(params["warpsPerCTA"]), tuple(params["order"]))
        if kind == "slice":
            return SliceEncoding(int(params["dim"]), self.encoding(str(params["parent"])))
        if kind in ("linear", "generic_linear"):
            cls = LinearEncoding if kind == "linear" else GenericLinearEncoding
            return cls(tuple(tuple(b) for b in params.get("register", [])),
                       tuple(tuple(b) for b in params.get("lane", [])), tuple(tuple(b) for b in params.get("warp", [])))
        if kind == "dot_op":
            return DotOperandEncoding(int(params["opIdx"]), self.encoding(str(params["parent"])),
                                      int(params.get("kWidth", 0)))
        if kind.endswith("shared") or kind == "shared_linear":
            # `#ttg.shared_linear<{offset = [[..]], block = [..]}, alignment = 16>`: which offset holds each element;
            # the lowering keeps its own (row-major) placement of every shared buffer, as for the other kinds
            order = tuple(params.get("order", ()))
            return SharedEncoding(kind, body, order, _row_major_placement(kind, params, order))
        return OpaqueEncoding(text)

    def parse(self, s: str) -> Type:
        known = self._type_cache.get(s)
        if known is None:
            known = self._type_cache[s] = self._parse(s)
        return known

    def _parse(self, s: str) -> Type:
        s = s.strip()
        if s in INT_WIDTHS or s in FLOAT_WIDTHS or s == "index":
            return ScalarType(s)
        if s.startswith("tensor<"):
            inner = _unwrap(s, "tensor<", ">")
            parts = split_top(inner)
            shape, elem = self._shape_and_elem(parts[0])
            enc = self.encoding(parts[1]) if len(parts) > 1 else None
            return TensorType(shape, elem, enc)
        if s.startswith("!tt.ptr<"):
            parts = split_top(_unwrap(s, "!tt.ptr<", ">"))
            space = parts[1].strip() if len(parts) > 1 else "1"
            # an address space number, or a quoted name (`tl.const` pointers print as `"constant"`)
            return PointerType(self.parse(parts[0]), int(space) if space.isdigit() else space)
        if s.startswith("!ttg.memdesc<"):
            parts = split_top(_unwrap(s, "!ttg.memdesc<", ">"))
            shape, elem = self._shape_and_elem(parts[0])
            enc = self.encoding(parts[1]) if len(parts) > 1 else None
            space = parts[2] if len(parts) > 2 else ""
            alloc = [p for p in parts[3:] if _ALLOC_SHAPE.fullmatch(p.strip())]
            alloc_shape = tuple(int(n) for n in alloc[0].split("x")) if alloc else None
            return MemDescType(shape, elem, enc, space, "mutable" in parts[3:], alloc_shape)
        if s.startswith("(") and "->" in s:
            arrow = find_top(s, "->")
            ins = [self.parse(t) for t in split_top(_unwrap(s[:arrow].strip(), "(", ")")) if t]
            return FunctionType(tuple(ins), tuple(self.parse_list(s[arrow + 2:])))
        return OpaqueType(s)

    def _shape_and_elem(self, s: str) -> Tuple[Tuple[int, ...], Type]:
        dims = []
        rest = s
        while True:
            m = _DIM.match(rest)
            if not m:
                break
            dims.append(int(m.group(1)))
            rest = rest[m.end():]
        return tuple(dims), self.parse(rest)

    def parse_list(self, s: str) -> List[Type]:
        known = self._list_cache.get(s)
        if known is None:
            t = s.strip()
            if t.startswith("(") and find_top(t, "->") < 0:
                t = t[1:-1]
            known = self._list_cache[s] = tuple(self.parse(x) for x in split_top(t) if x)
        return list(known)


# ----------------------------------------------------------------------------------------------
# Locations


class LocationTable:

    def __init__(self, aliases: Dict[str, str]):
        self.aliases = aliases
        self.cache: Dict[str, Location] = {}

    def resolve(self, expr: str) -> Location:
        expr = expr.strip()
        if expr in self.cache:
            return self.cache[expr]
        self.cache[expr] = UNKNOWN  # guards against cycles
        loc = self._resolve(expr)
        self.cache[expr] = loc
        return loc

    def _resolve(self, expr: str) -> Location:
        if expr.startswith("#"):
            return self.resolve(self.aliases.get(expr, "loc(unknown)"))
        if expr.startswith("loc(") and expr.endswith(")"):
            expr = expr[4:-1].strip()
        if expr == "unknown" or not expr:
            return UNKNOWN
        m = _FILE_LOC.fullmatch(expr)
        if m:
            return Location(m.group(1), int(m.group(2)), int(m.group(3)))
        m = _NAME_LOC.fullmatch(expr)
        if m:
            inner = self.resolve(m.group(2))
            return Location(inner.file, inner.line, inner.col, m.group(1))
        if expr.startswith("callsite(") and expr.endswith(")"):
            body = expr[len("callsite("):-1]
            at = find_top(body, " at ")
            callee, caller = self.resolve(body[:at]), self.resolve(body[at + 4:])
            # Code inlined from Triton's own library (tl.sum, tl.max, ...) is reported at the user's call.
            if not callee.file or "/triton/language/" in callee.file.replace("\\", "/"):
                return Location(caller.file, caller.line, caller.col, callee.name or caller.name)
            return callee
        if expr.startswith("fused"):
            start = expr.index("[")
            for part in split_top(expr[start + 1:expr.rindex("]")]):
                loc = self.resolve(part)
                if loc.file:
                    return loc
            return UNKNOWN
        if expr.startswith("#"):
            return self.resolve(expr)
        return UNKNOWN


# ----------------------------------------------------------------------------------------------
# The scanner


class _Scanner:

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def skip_ws(self) -> None:
        """Skip white space and `// ...` comments (MLIR prints `// pred: ^bb0` after block labels)."""
        t = self.text
        while self.pos < len(t):
            if t[self.pos] in " \t\r\n":
                self.pos += 1
            elif t.startswith("//", self.pos):
                end = t.find("\n", self.pos)
                self.pos = len(t) if end < 0 else end
            else:
                break

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def expect(self, s: str) -> None:
        if not self.peek(s):
            raise IRParseError(f"expected {s!r} at {self.context()}")
        self.pos += len(s)

    def context(self) -> str:
        line = self.text.count("\n", 0, self.pos) + 1
        end = self.text.find("\n", self.pos)
        return f"line {line}: {self.text[self.pos:end if end >= 0 else None]!r}"

    def read_balanced(self) -> str:
        """Read a bracketed group starting at the current position (which must be an opener)."""
        t, start, depth = self.text, self.pos, 0
        jump = _jump('"-' + _BRACKETS)
        while True:
            m = jump.search(t, self.pos)
            if not m:
                self.pos = len(t)
                break
            self.pos = m.start()
            c = t[self.pos]
            if c == '"':
                self.pos = _string_end(t, self.pos)
                continue
            if c == "-" and t.startswith("->", self.pos):
                self.pos += 2
                continue
            if c in "([{<":
                depth += 1
            elif c in ")]}>":
                depth -= 1
                if depth == 0:
                    self.pos += 1
                    return t[start:self.pos]
            self.pos += 1
        raise IRParseError(f"unbalanced group at {self.context()}")

    def at_region_open(self) -> bool:
        return _region_opens_at(self.text, self.pos)


def _region_opens_at(text: str, pos: int) -> bool:
    """A `{` that ends its line opens a region; an inline `{k = v}` is an attribute dictionary."""
    if not text.startswith("{", pos):
        return False
    j = pos + 1
    while j < len(text) and text[j] in " \t":
        j += 1
    return j >= len(text) or text[j] == "\n"


class ModuleParser:

    def __init__(self, text: str):
        self.aliases: Dict[str, str] = {}
        body_lines = []
        for line in text.splitlines():
            m = _ALIAS_LINE.match(line)
            if m:
                self.aliases[m.group(1)] = m.group(2).strip()
            else:
                body_lines.append(line)
        self.types = TypeParser(self.aliases)
        self.locs = LocationTable(self.aliases)
        self.sc = _Scanner("\n".join(body_lines))
        self.values: Dict[str, Value] = {}
        self._pending_successors: Dict[int, List[Tuple[str, List[Value]]]] = {}

    # -- module and functions -------------------------------------------------------------------

    def parse(self) -> Module:
        sc = self.sc
        sc.skip_ws()
        sc.expect("module")
        sc.skip_ws()
        attrs: Dict[str, object] = {}
        if sc.peek("attributes"):
            sc.expect("attributes")
            sc.skip_ws()
            attrs = parse_attr_dict(sc.read_balanced(), self.aliases)
            sc.skip_ws()
        sc.expect("{")
        functions = []
        while True:
            sc.skip_ws()
            if sc.peek("}"):
                sc.pos += 1
                break
            functions.append(self.parse_function())
        return Module(attrs, functions, dict(self.aliases))

    def parse_function(self) -> Function:
        sc = self.sc
        sc.expect("tt.func")
        sc.skip_ws()
        public = True
        for vis in ("public", "private", "nested"):
            if sc.peek(vis + " "):
                public = vis == "public"
                sc.pos += len(vis)
                sc.skip_ws()
        m = _SYMBOL_RE.match(sc.text, sc.pos)
        if not m:
            raise IRParseError(f"expected function name at {sc.context()}")
        name = m.group(1) or m.group(2)
        sc.pos = m.end()
        self.values = {}
        arg_text = sc.read_balanced()[1:-1]
        args, arg_attrs = [], []
        for i, item in enumerate(split_top(arg_text)):
            if not item:
                continue
            a_name, rest = item.split(":", 1)
            rest = rest.strip()
            loc = UNKNOWN
            li = find_top(rest, "loc(")
            if li >= 0:
                loc = self.locs.resolve(rest[li:])
                rest = rest[:li].strip()
            attrs: Dict[str, object] = {}
            ai = find_top(rest, "{")
            if ai >= 0:
                attrs = parse_attr_dict(rest[ai:], self.aliases)
                rest = rest[:ai].strip()
            v = Value(a_name.strip()[1:], self.types.parse(rest), None, i, loc)
            self.values[v.name] = v
            args.append(v)
            arg_attrs.append(attrs)
        sc.skip_ws()
        result_types: List[Type] = []
        if sc.peek("->"):
            sc.pos += 2
            sc.skip_ws()
            start = sc.pos
            if sc.peek("("):
                sc.read_balanced()
            else:
                while not sc.peek(" attributes") and not sc.at_region_open():
                    sc.pos += 1
            result_types = self.types.parse_list(sc.text[start:sc.pos])
            sc.skip_ws()
        fattrs: Dict[str, object] = {}
        if sc.peek("attributes"):
            sc.expect("attributes")
            sc.skip_ws()
            fattrs = parse_attr_dict(sc.read_balanced(), self.aliases)
            sc.skip_ws()
        body = self.parse_region([args])
        sc.skip_ws()
        loc = self.locs.resolve(self._read_loc()) if sc.peek("loc(") else UNKNOWN
        return Function(name, args, result_types, body, public, fattrs, loc, arg_attrs)

    def _read_loc(self) -> str:
        sc = self.sc
        start = sc.pos
        sc.expect("loc")
        sc.read_balanced()
        return sc.text[start:sc.pos]

    # -- regions, blocks and ops ----------------------------------------------------------------

    def parse_region(self, entry_args: Optional[List[List[Value]]] = None) -> Region:
        sc = self.sc
        sc.expect("{")
        region = Region()
        block: Optional[Block] = None
        if entry_args is not None:
            block = Block(label="", args=list(entry_args[0]))
            block.parent = region
            region.blocks.append(block)
            for a in block.args:
                a.owner = block
        while True:
            sc.skip_ws()
            if sc.peek("}"):
                sc.pos += 1
                break
            if sc.peek("^"):
                block = self.parse_block_header()
                block.parent = region
                region.blocks.append(block)
                continue
            if block is None:
                block = Block()
                block.parent = region
                region.blocks.append(block)
            op = self.parse_op()
            op.parent = block
            block.ops.append(op)
        if not region.blocks:  # `{}`: one block whose terminator MLIR did not print (an scf.if's empty `then`)
            block = Block()
            block.parent = region
            region.blocks.append(block)
        self._resolve_successors(region)
        return region

    def _resolve_successors(self, region: Region) -> None:
        by_label = {b.label or "bb0": b for b in region.blocks}
        for block in region.blocks:
            for op in block.ops:
                labels = self._pending_successors.pop(id(op), None)
                if labels is None:
                    continue
                try:
                    op.successors = [(by_label[label], args) for label, args in labels]
                except KeyError as e:
                    raise IRParseError(f"{op.name} branches to unknown block ^{e.args[0]}") from None

    def parse_block_header(self) -> Block:
        sc = self.sc
        m = _BLOCK_LABEL.match(sc.text, sc.pos)
        sc.pos = m.end()
        args = []
        if sc.peek("("):
            for i, item in enumerate(split_top(sc.read_balanced()[1:-1])):
                a_name, rest = item.split(":", 1)
                li = find_top(rest, "loc(")
                loc = self.locs.resolve(rest[li:]) if li >= 0 else UNKNOWN
                ty = self.types.parse(rest[:li] if li >= 0 else rest)
                v = Value(a_name.strip()[1:], ty, None, i, loc)
                self.values[v.name] = v
                args.append(v)
        sc.expect(":")
        block = Block(label=m.group(1), args=args)
        for a in args:
            a.owner = block
        return block

    def parse_op(self) -> Op:
        sc = self.sc
        start = sc.pos
        result_names: List[str] = []
        if sc.peek("%"):
            eq = sc.text.index(" = ", sc.pos)
            for item in sc.text[sc.pos:eq].split(","):
                item = item.strip()[1:]
                if ":" in item:
                    base, n = item.split(":")
                    result_names += [f"{base}#{k}" for k in range(int(n))]
                else:
                    result_names.append(item)
            sc.pos = eq + 3
        if sc.peek('"'):
            end = _string_end(sc.text, sc.pos)
            name = sc.text[sc.pos + 1:end - 1]
            sc.pos = end
        else:
            m = _OP_NAME.match(sc.text, sc.pos)
            if not m:
                raise IRParseError(f"expected an operation at {sc.context()}")
            name = m.group(0)
            sc.pos = m.end()
        # Collect the op's text up to its trailing location, cutting out nested regions (each becomes a mark).
        buf: List[str] = []
        regions_src: List[int] = []  # positions of region starts, parsed lazily below
        depth = 0
        t = sc.text
        pos = seg = sc.pos
        while True:
            m = _OP_STOPS.search(t, pos)
            if not m:
                raise IRParseError(f"unterminated op {name}")
            pos = m.start()
            c = t[pos]
            if c == '"':
                pos = _string_end(t, pos)
            elif c == "l":  # `loc(`: the op's location when outside every bracket
                if depth == 0:
                    break
                pos += 1
            elif c == "-":  # `->`, whose `>` closes nothing
                pos += 2
            elif c == "{" and _region_opens_at(t, pos):
                buf.append(t[seg:pos])
                buf.append(_REGION_MARK.format(len(regions_src)))
                regions_src.append(pos)
                sc.pos = pos
                self._skip_region()
                pos = seg = sc.pos
            else:
                depth += 1 if c in "([<{" else -1
                pos += 1
        buf.append(t[seg:pos])
        sc.pos = pos
        loc_text = self._read_loc()
        end_pos = sc.pos
        body = " ".join("".join(buf).split())
        op = self._interpret(name, result_names, body, regions_src, self.locs.resolve(loc_text),
                             t[start:end_pos])
        sc.pos = end_pos
        return op

    def _skip_region(self) -> None:
        sc = self.sc
        sc.read_balanced()

    def _parse_region_at(self, pos: int, entry_args: Optional[List[Value]] = None) -> Region:
        saved = self.sc.pos
        self.sc.pos = pos
        region = self.parse_region([entry_args] if entry_args is not None else None)
        self.sc.pos = saved
        return region

    # -- op interpretation ----------------------------------------------------------------------

    def _value(self, ref: str) -> Value:
        key = ref[1:]
        if key not in self.values:
            raise IRParseError(f"use of undefined value {ref}")
        return self.values[key]

    def _define(self, names: List[str], types: List[Type], loc: Location) -> List[Value]:
        if len(names) != len(types):
            raise IRParseError(f"cannot match results {names} with types {[str(t) for t in types]}")
        out = []
        for i, (n, ty) in enumerate(zip(names, types)):
            v = Value(n, ty, None, i, loc)
            self.values[n] = v
            out.append(v)
        return out

    def _interpret(self, name: str, result_names: List[str], body: str, region_pos: List[int], loc: Location,
                   text: str) -> Op:
        special = getattr(self, "_op_" + name.replace(".", "_"), None)
        if special is not None:
            return special(name, result_names, body, region_pos, loc, text)
        head, types_text = self._split_types(body)
        attrs: Dict[str, object] = {}
        head_wo_attrs = head
        # properties `<{...}>` (generic form) and trailing attribute dictionaries
        for m in list(_PROPERTIES.finditer(head)):
            grp = _Scanner(head)
            grp.pos = m.start()
            s = grp.read_balanced()
            attrs.update(parse_attr_dict(s[1:-1], self.aliases))
            head_wo_attrs = head_wo_attrs.replace(s, " ")
        while True:
            i = find_top(head_wo_attrs, "{")
            if i < 0:
                break
            grp = _Scanner(head_wo_attrs)
            grp.pos = i
            s = grp.read_balanced()
            attrs.update(parse_attr_dict(s, self.aliases))
            head_wo_attrs = head_wo_attrs[:i] + " " + head_wo_attrs[grp.pos:]
        m = _SYMBOL_RE.search(head_wo_attrs) if name == "tt.call" else None
        if m:
            attrs["callee"] = m.group(1) or m.group(2)
            head_wo_attrs = head_wo_attrs[:m.start()] + "@" + head_wo_attrs[m.end():]
        if name != "arith.constant":
            head_wo_attrs = self._custom_attributes(name, head_wo_attrs, attrs)
        if name == "arith.constant":
            attrs["value"] = head_wo_attrs.strip()
        if name == "ttg.memdesc_subslice":  # `%buf[16, 8]`: the view's offsets, printed after the operand
            m = re.search(r"\[([-\d,\s]*)\]", head_wo_attrs)
            if not m:
                raise IRParseError(f"{name}: cannot find the offsets in {head.strip()!r}")
            attrs["offsets"] = [int(x) for x in m.group(1).split(",") if x.strip()]
            head_wo_attrs = head_wo_attrs[:m.start()] + head_wo_attrs[m.end():]
        if name == "tt.dot_scaled":  # `%a scale %sa, %b, %c`: the operand list alone cannot say whose scale it is
            parts = split_top(_REGION_RE.sub(" ", head_wo_attrs))
            attrs["lhs_scaled"] = "scale" in parts[0].split()
            attrs["rhs_scaled"] = len(parts) > 1 and "scale" in parts[1].split()
        operands = [self._value(r) for r in _VALUE_RE.findall(_REGION_RE.sub(" ", head_wo_attrs))]
        result_types = self._result_types(name, types_text, operands, len(result_names), attrs)
        results = self._define(result_names, result_types, loc)
        regions = [self._parse_region_at(p) for p in region_pos]
        return Op(name, operands, results, attrs, regions, loc, text)

    def _custom_attributes(self, name: str, head: str, attrs: Dict[str, object]) -> str:
        """Read the attributes an op's custom assembly prints outside attribute dictionaries — leading
        keywords (`arith.cmpi slt, ...`), string literals (`tt.print " x: "`) and `key = value` pairs
        (`rounding = rtz`) — into `attrs`; return the rest. A keyword or string the op is not known to print
        is an error: silently dropping an attribute could change what the kernel computes."""
        strings = []

        def take_string(m):
            strings.append(bytes(m.group(1), "utf-8").decode("unicode_escape"))
            return " "

        head = _STRING_RE.sub(take_string, head)
        if strings:
            keys = _STRING_ATTRS.get(name, ())
            if len(strings) > len(keys):
                raise IRParseError(f"{name}: unexpected string attribute(s) {strings[len(keys):]}")
            attrs.update(zip(keys, strings))

        def take_pair(m):
            attrs[m.group(1)] = parse_attr_value(m.group(2), self.aliases)
            return " "

        head = _PAIR_RE.sub(take_pair, head)
        words = [w for w in head.replace(",", " ").split() if w != ":"]  # `tt.print "p" : %a, %b`
        leading = []
        for w in words:
            if w.startswith(("%", "(", "@", "\x00", "[", "{", "<")):
                break
            leading.append(w)
        for w in words[len(leading):]:  # bare words after the operands are unit attributes (`allow_reorder`,
            if _IDENTIFIER.fullmatch(w):  # `timeout %t`)
                attrs[w] = True
        keys = _KEYWORD_ATTRS.get(name, ())
        if len(leading) > len(keys):
            raise IRParseError(f"{name}: unknown keyword(s) {leading[len(keys):]} in {head.strip()!r}; the apple "
                               "backend's TTGIR reader does not know this form of the op")
        attrs.update(zip(keys, leading))
        return head

    def _split_types(self, body: str) -> Tuple[str, str]:
        if body.startswith(": "):  # an op with nothing before its type: `%0 = ub.poison : i32`
            return "", body[2:]
        i = find_top(body, " : ", last=True)
        if i < 0:
            return body, ""
        return body[:i], body[i + 3:]

    def _result_types(self, name: str, types_text: str, operands: List[Value], n: int, attrs) -> List[Type]:
        if n == 0:
            return []
        if name == "arith.constant" and not types_text:
            v = attrs.get("value", "")
            if v in ("true", "false"):
                return [I1]
        if not types_text:
            raise IRParseError(f"{name}: cannot find result types")
        arrow = find_top(types_text, "->", last=True)
        if arrow >= 0:
            tys = self.types.parse_list(types_text[arrow + 2:])
            return tys * n if len(tys) == 1 and n > 1 else tys  # `%a, %b = tt.split %x : T -> U`
        to = find_top(types_text, " to ")
        if to >= 0:
            return [self.types.parse(types_text[to + 4:])]
        tys = self.types.parse_list(types_text)
        if name in ("arith.cmpi", "arith.cmpf"):
            t = tys[0]
            return [t.with_element(I1) if isinstance(t, TensorType) else I1]
        if name == "tt.load":
            t = tys[0]
            if isinstance(t, TensorType):
                return [t.with_element(t.element.pointee)]
            return [t.pointee]
        if name == "tt.addptr":
            return [tys[0]]
        if len(tys) == n:
            return tys
        return [tys[-1]] if n == 1 else tys[-n:]

    def _op_scf_for(self, name, result_names, body, region_pos, loc, text) -> Op:
        m = re.match(r"(%[\w$.\-]+) = (%[\w$.\-#]+) to (%[\w$.\-#]+) step (%[\w$.\-#]+)(.*)", body)
        if not m:
            raise IRParseError(f"cannot parse scf.for header {body!r}")
        iv_name, lb, ub, step, rest = m.groups()
        # `... : i32 <region> {tt.num_stages = 2 : i32}`: loop attributes print after the body
        rest, _, after = _REGION_RE.split(rest, 1)
        attrs = parse_attr_dict(after.strip(), self.aliases) if after.strip() else {}
        inits, iter_names, iter_types = [], [], []
        ia = rest.find("iter_args(")
        if ia >= 0:
            grp = _Scanner(rest)
            grp.pos = ia + len("iter_args")
            inner = grp.read_balanced()[1:-1]
            for item in split_top(inner):
                lhs, rhs = item.split("=")
                iter_names.append(lhs.strip()[1:])
                inits.append(self._value(rhs.strip()))
            arrow = rest.find("->", grp.pos)
            colon = find_top(rest, " : ", last=True)
            iter_types = self.types.parse_list(rest[arrow + 2:colon if colon > arrow else None])
        colon = find_top(rest, " : ", last=True)
        iv_type = self.types.parse(rest[colon + 3:].strip()) if colon >= 0 else ScalarType("index")
        operands = [self._value(lb), self._value(ub), self._value(step)] + inits
        iv = Value(iv_name[1:], iv_type, None, 0, loc)
        self.values[iv.name] = iv
        iter_args = []
        for i, (n, ty) in enumerate(zip(iter_names, iter_types)):
            v = Value(n, ty, None, i + 1, loc)
            self.values[n] = v
            iter_args.append(v)
        region = self._parse_region_at(region_pos[0], [iv] + iter_args)
        results = self._define(result_names, [v.type for v in iter_args], loc)
        return Op(name, operands, results, attrs, [region], loc, text)

    def _op_cf_br(self, name, result_names, body, region_pos, loc, text) -> Op:
        return self._branch(name, [], [body.strip()], loc, text)

    def _op_cf_cond_br(self, name, result_names, body, region_pos, loc, text) -> Op:
        cond, *targets = split_top(body)
        return self._branch(name, [self._value(cond.strip())], [t.strip() for t in targets], loc, text)

    def _branch(self, name: str, operands: List[Value], targets: List[str], loc: Location, text: str) -> Op:
        """`^bb3` or `^bb3(%v, %w : type, type)`: successors are recorded by label (blocks may be printed
        after the branch) and resolved when the function's region is complete."""
        successors = []
        for t in targets:
            m = re.fullmatch(r"\^([A-Za-z0-9_]+)(?:\((.*)\))?", t, re.S)
            if not m:
                raise IRParseError(f"{name}: cannot read successor {t!r}")
            args = []
            if m.group(2):
                values = m.group(2)[:find_top(m.group(2), " : ")] if find_top(m.group(2), " : ") >= 0 else m.group(2)
                args = [self._value(v.strip()) for v in split_top(values)]
            successors.append((m.group(1), args))
        op = Op(name, operands + [a for _, args in successors for a in args], [], {}, [], loc, text)
        self._pending_successors[id(op)] = successors
        return op

    def _op_scf_if(self, name, result_names, body, region_pos, loc, text) -> Op:
        cond = _VALUE_RE.match(body)
        types: List[Type] = []
        arrow = find_top(body, "->")
        if arrow >= 0:
            tys = _REGION_RE.split(body[arrow + 2:])[0]
            types = self.types.parse_list(tys)
        results = self._define(result_names, types, loc)
        regions = [self._parse_region_at(p) for p in region_pos]
        return Op(name, [self._value(cond.group(0))], results, {}, regions, loc, text)

    def _op_scf_while(self, name, result_names, body, region_pos, loc, text) -> Op:
        grp = _Scanner(body)
        names, inits = [], []
        stripped = body.lstrip()
        if stripped.startswith("("):
            grp.pos = body.index("(")
            inner = grp.read_balanced()[1:-1]
        else:  # `scf.while : () -> ()` carries nothing
            inner = ""
        for item in split_top(inner):
            if not item:
                continue
            lhs, rhs = item.split("=")
            names.append(lhs.strip()[1:])
            inits.append(self._value(rhs.strip()))
        sig = _REGION_RE.split(body[grp.pos:])[0]
        colon = sig.index(":")
        fty = self.types.parse(sig[colon + 1:].strip())
        before_args = []
        for i, (n, ty) in enumerate(zip(names, fty.inputs)):
            v = Value(n, ty, None, i, loc)
            self.values[n] = v
            before_args.append(v)
        before = self._parse_region_at(region_pos[0], before_args)
        after = self._parse_region_at(region_pos[1])
        results = self._define(result_names, list(fty.results), loc)
        return Op(name, inits, results, {}, [before, after], loc, text)


def parse_module(text: str) -> Module:
    """Parse the printed form of a TTGIR module (with debug locations) into our IR."""
    return ModuleParser(text).parse()
