"""Our model of TTGIR: parsed from the printed module, printable back, able to carry Apple encodings."""
from .core import Block, Function, Location, Module, Op, Region, Value
from .parser import IRParseError, parse_module
from .printer import print_module
from .types import (BlockedEncoding, DotOperandEncoding, Encoding, GenericLinearEncoding, LinearEncoding, MemDescType,
                    PointerType, ScalarType, SharedEncoding, SliceEncoding, TensorType, Type)
