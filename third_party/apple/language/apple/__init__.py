"""`triton.language.extra.apple`: Apple-specific language extras and the libdevice mapping to Metal math."""
from . import libdevice
from .fp8 import convert_custom_types

__all__ = ["libdevice", "convert_custom_types"]
