"""Scalar values of the emulator's own API (`EmulatorKernel.launch`): a value and the Metal type it is passed as,
packed by the backend's one scalar packer (`abi.scalars`)."""
from __future__ import annotations

import re
from typing import Any, Optional, Tuple

from ..abi import scalars


def _parse_type(type_name: str) -> Tuple[str, int]:
    """An MSL scalar or vector type name -> (its scalar type's MSL name, lanes)."""
    t = " ".join(type_name.split())
    m = re.fullmatch(r"([a-z_]+?)([234])", t)
    try:
        if m and m.group(1) != "tt_double":
            return scalars.msl_scalar(m.group(1)).name, int(m.group(2))
        return scalars.msl_scalar(t).name, 1
    except KeyError:
        raise ValueError(f"unknown Metal scalar type {type_name!r}") from None


def _is_integer(msl: str) -> bool:
    return scalars.MSL_SCALARS[msl].kind in ("int", "bool")


class Scalar:
    """A value for a ``constant T&`` parameter, packed as the Metal type ``type_name``
    (``"int"``, ``"uint"``, ``"long"``, ``"ulong"``, ``"float"``, ``"half"``, ``"bfloat"``, ``"bool"``,
    ``"short"``, ``"ushort"``, ``"char"``, ``"uchar"``, ``"tt_double"`` (the backend's software float64) and
    vectors such as ``"uint3"``/``"float4"`` with a sequence value; vec3 is padded to 4 elements as in Metal).
    Values are packed by the backend's one scalar packer (``abi.scalars.pack``), with its rules.

    A value that does not fit the type (``Scalar(1e300, "float")``, ``Scalar(2**40, "int")``) is recorded in
    ``problem`` and refused when the scalar is bound to a kernel parameter, so that the error can name the
    kernel and the parameter. An unknown ``type_name`` raises ValueError at once."""

    def __init__(self, value: Any, type_name: str = "int"):
        self.value = value
        self.type_name = type_name
        base, n = _parse_type(type_name)
        self.base = base
        self.width = n
        self.problem: Optional[str] = None
        vals = [value]
        if n > 1:
            vals = list(value) if hasattr(value, "__iter__") else [value] * n
            if len(vals) != n:
                raise ValueError(f"Scalar {type_name} needs {n} values, got {len(vals)}")
            if n == 3:
                vals = vals + [0]
        parts = []
        for v in vals:
            try:
                parts.append(scalars.pack(base, v))
            except scalars.ScalarValueError as e:
                self.problem = self.problem or str(e)
                parts.append(bytes(scalars.MSL_SCALARS[base].nbytes))
        self.data = b"".join(parts)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def __repr__(self):
        return f"Scalar({self.value!r}, {self.type_name!r})"
