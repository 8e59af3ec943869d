"""AppleBackend: options and the ttir -> ttgir -> msl stages of the `apple` backend."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import pathlib
import re
import sys
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Dict, Tuple

from triton._C.libtriton import ir, passes
from triton.backends.compiler import BaseBackend, GPUTarget, Language

from . import compile_log, knobs
from .analysis.addresses import reads_addresses
from .errors import InvalidOptionError, UnsupportedFeatureError
from .host import default_family
from .upstream_pipeline import OpCensus, ttgir_passes
from .target import DEFAULT_FAMILY, DEFAULT_MSL_VERSION, GPU_FAMILIES, MAX_WARPS, MSL_VERSIONS, SIMD_WIDTH, default_msl_version


@dataclass(frozen=True)
class AppleOptions:
    num_warps: int = 4
    num_ctas: int = 1
    num_stages: int = 1
    warp_size: int = SIMD_WIDTH
    arch: str = DEFAULT_FAMILY
    # The Metal Shading Language version compiled for (target.MSL_VERSIONS): what needs a newer one is refused
    # naming the macOS it needs (TRITON_APPLE_MSL_VERSION, default the Mac's own).
    msl_version: str = DEFAULT_MSL_VERSION
    debug: bool = False
    instrumentation_mode: str = ""
    fpsan_homomorphic_casts: bool = False
    # Metal's default math mode is fast (NaN/Inf undefined); Triton semantics need safe math.
    # `fast_math=True` is an explicit opt-in to Metal's fast mode.
    fast_math: bool = False
    # Metal has no double: float64 is computed in software (IEEE binary64 on 64-bit integers, exact but
    # slow). With this opt-in, float64 *values* inside a kernel (constants, casts, math) are computed in
    # float32 instead, and float64 tensors are refused (float32 cannot read or write them).
    allow_fp64_demotion: bool = False
    enable_fp_fusion: bool = True
    launch_cooperative_grid: bool = False
    supported_fp8_dtypes: Tuple[str, ...] = ("fp8e5", "fp8e4nv", "fp8e4b15")
    deprecated_fp8_dot_operand_dtypes: Tuple[str, ...] = ()
    # Every dot is computed with IEEE float32 products: Metal has no tf32, and the split-precision
    # emulations of float32 (tf32x3, bf16x3, bf16x6) are at most as accurate, so they are accepted and
    # computed the IEEE way (documented in README).
    default_dot_input_precision: str = "ieee"
    allowed_dot_input_precisions: Tuple[str, ...] = ("ieee", "tf32", "tf32x3", "bf16x3", "bf16x6")
    max_num_imprecise_acc_default: int = 0
    extern_libs: Any = None
    sanitize_overflow: bool = False
    # As upstream (`cuda`, `hip`): the name of the target compiled for, i.e. the torch device type.
    backend_name: str = "cpu"
    # AMD occupancy/MMA hints that configs written for HIP carry (Triton's matmul tutorial picks its HIP configs
    # on any non-CUDA device): accepted so such configs run, and ignored, as Apple GPUs have no equivalent.
    waves_per_eu: int = 0
    matrix_instr_nonkdim: int = 0
    kpack: int = 1

    def __post_init__(self):
        # num_warps is checked by the first compile stage (check_num_warps), which knows the kernel's name.
        if self.num_ctas != 1:
            raise UnsupportedFeatureError(f"apple backend: num_ctas={self.num_ctas} is not supported; Metal has "
                                          "no thread-block clusters, use num_ctas=1")
        if self.arch not in GPU_FAMILIES:
            raise ValueError(f"apple backend: unknown GPU family {self.arch!r}; expected one of {tuple(GPU_FAMILIES)}")
        if self.msl_version not in MSL_VERSIONS:
            raise ValueError(f"apple backend: unknown MSL version {self.msl_version!r}; expected one of "
                             f"{tuple(MSL_VERSIONS)}")
        if self.num_stages < 1:
            raise ValueError(f"apple backend: num_stages must be >= 1, got {self.num_stages}")
        object.__setattr__(self, "extern_libs", tuple(sorted(dict(self.extern_libs or {}).items())))

    def hash(self) -> str:
        key = "_".join(f"{k}-{v}" for k, v in sorted(self.__dict__.items()))
        return hashlib.sha256(key.encode()).hexdigest()


def check_num_warps(kernel_name: str, opt: AppleOptions) -> None:
    """Refuse a `num_warps` a threadgroup cannot hold, naming the kernel (options are parsed before Triton
    knows which kernel they are for, so the first compile stage checks them)."""
    nw = opt.num_warps
    if not (isinstance(nw, int) and 1 <= nw <= MAX_WARPS and nw & (nw - 1) == 0):
        raise InvalidOptionError(f"apple backend: kernel '{kernel_name}': num_warps must be a power of 2 in "
                                 f"[1, {MAX_WARPS}] (a threadgroup holds at most {MAX_WARPS} simdgroups of "
                                 f"{SIMD_WIDTH} threads), got num_warps={nw!r}")


def _past_frontend() -> None:
    """Triton's frontend is done with this compile: on the emulator, an autotune lookahead thread lets the other
    start its next compile (emulator/lookahead.py; nothing happens in any other thread)."""
    from .emulator import lookahead
    lookahead.past_frontend()


def _ttg_target(opt: AppleOptions) -> str:
    return f"metal:{opt.arch}"


def min_dot_size(target: GPUTarget):
    """Every dot shape is accepted: shapes simdgroup_matrix cannot tile take the FMA path."""

    def check(*_operand_types):
        return (1, 1, 1)

    return check


_HASHED_SUFFIXES = (".py", ".metal", ".h", ".c", ".cpp", ".cc")


@functools.lru_cache(None)
def _source_hash() -> str:
    """Hash of this package's sources: a change to the lowering, the MSL library (`.metal`) or the emulator's
    native sources invalidates cached kernels."""
    h = hashlib.sha256()
    root = pathlib.Path(__file__).parent
    for path in sorted(root.rglob("*")):
        headers = path.parent.name == "include"  # the emulator's headers, `metal_stdlib` has no suffix
        if (path.suffix in _HASHED_SUFFIXES or headers) and path.is_file() and "__pycache__" not in path.parts:
            h.update(path.relative_to(root).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


class AppleBackend(BaseBackend):
    """Compiles Triton IR to Metal Shading Language for `GPUTarget(name, family, 32)`.

    Upstream names a target after the torch device type its kernels run on (docs/conventions.md): `mps` for
    kernels launched on a Mac's GPU, `cpu` for the emulator (that name is served by the `cpu` entry point,
    `cpu/compiler.py`). `metal`, this backend's earlier name, stays accepted as an alias: it is also the
    emulator's target name when another installed backend owns `cpu`. `family` is `apple7`/`apple8`/`apple9`;
    "" (what inductor passes for devices without a compute capability) means the default family.
    """
    TARGET_NAMES: Tuple[str, ...] = ("mps", "metal")

    @classmethod
    def supports_target(cls, target: GPUTarget) -> bool:
        return target.backend in cls.TARGET_NAMES

    def __init__(self, target: GPUTarget) -> None:
        super().__init__(target)
        if target.arch in GPU_FAMILIES:
            self.family = target.arch
        elif target.arch in ("", None):
            self.family = default_family()
        else:
            raise ValueError(f"apple backend: unknown GPU family {target.arch!r} for target "
                             f"{target.backend!r}; expected one of {tuple(GPU_FAMILIES)} (or \"\" for the default)")
        if target.warp_size != SIMD_WIDTH:
            raise ValueError(f"apple backend: SIMD-group width is {SIMD_WIDTH}, got warp_size={target.warp_size}")
        # Triton reads the binary stage's file as bytes and every other stage as text. The binary here is the
        # `.metal` source Apple's compiler (torch.mps.compile_shader) or the emulator's clang consumes, so
        # `asm["msl"]` stays readable text and `asm["metal"]` holds the same source as the bytes Triton hands
        # to `load_binary`.
        self.binary_ext = "metal"

    def get_target_name(self, options: AppleOptions) -> str:
        """The `ttg.target` module attribute (Gluon sets it before its layouts are verified)."""
        return _ttg_target(options)

    def hash(self) -> str:
        return f"apple-{self.target.backend}-{self.family}-{_source_hash()}"

    def parse_options(self, opts: dict) -> AppleOptions:
        args = {"arch": self.family, "backend_name": self.target.backend, "msl_version": default_msl_version()}
        fields = AppleOptions.__dataclass_fields__
        args.update({k: opts[k] for k in fields if k in opts and opts[k] is not None})
        # num_stages asks for software pipelining of loops (asynchronous copies into shared memory), which this
        # backend does not do (Metal has no asynchronous copy into threadgroup memory): every value compiles to
        # the same kernel. The value is checked, then recorded as 1, so that configs differing only in
        # num_stages (autotune lists often multiply their configs by several) share one compile: Triton's
        # cache key is the options' hash.
        return dataclasses.replace(AppleOptions(**args), num_stages=1)

    def pack_metadata(self, metadata):
        return (metadata.num_warps, metadata.num_ctas, metadata.shared)

    def get_codegen_implementation(self, options):
        from triton.language.extra.apple import convert_custom_types
        return {"min_dot_size": min_dot_size(self.target), "convert_custom_types": convert_custom_types}

    def get_module_map(self) -> Dict[str, ModuleType]:
        from triton.language.extra.apple import libdevice
        return {"triton.language.extra.libdevice": libdevice}

    def load_dialects(self, ctx) -> None:
        pass

    @staticmethod
    def make_ttir(mod, metadata, opt: AppleOptions):
        _past_frontend()
        check_num_warps(mod.get_entry_func_name(), opt)
        if opt.allow_fp64_demotion:
            _refuse_float64_arguments(mod.str())
        return _run_passes(mod, "make_ttir", [
            passes.common.add_inliner, passes.ttir.add_rewrite_tensor_descriptor_to_pointer,
            passes.common.add_canonicalizer, passes.ttir.add_combine, passes.ttir.add_reorder_broadcast,
            passes.common.add_cse, passes.common.add_symbol_dce, passes.ttir.add_loop_unroll
        ])

    @staticmethod
    def make_ttgir(mod, metadata, opt: AppleOptions):
        def to_ttgpuir(pm):
            passes.ttir.add_convert_to_ttgpuir(pm, _ttg_target(opt), opt.num_warps, SIMD_WIDTH, opt.num_ctas)

        return _run_passes(mod, "make_ttgir", ttgir_passes(OpCensus.of(mod), to_ttgpuir))

    @staticmethod
    def make_msl(mod, metadata, opt: AppleOptions) -> str:
        from .ir import parse_module, print_module
        from .lowering import lower_module
        from .passes.loads_in_use_layout import loads_in_use_layout
        from .passes import accelerate_matmul, allocate_shared_memory, casts_around_moves, loop_carried_layouts
        from .passes.decompose_scaled_dot import decompose_scaled_dot
        from .portability import warn_where_nvidia_refuses
        started = time.perf_counter()  # our passes + lowering, for compile_log
        module = parse_module(mod if isinstance(mod, str) else mod.str())
        check_num_warps(module.kernel.name, opt)  # for a TTGIR source, whose compile starts here
        warn_where_nvidia_refuses(module, module.kernel.name)
        metadata["reads_addresses"] = reads_addresses(module)  # pointer tables: refused on a Mac (driver.py)
        decompose_scaled_dot(module)
        accelerate_matmul(module)
        loop_carried_layouts(module)
        casts_around_moves(module)
        loads_in_use_layout(module)
        allocate_shared_memory(module)
        if knobs.dump_ir.get():
            print(f"// -----// apple IR after Apple passes //----- //\n{print_module(module)}", file=sys.stderr)
        kernel = lower_module(module, opt)
        metadata["soft_f64"] = kernel.soft_f64
        metadata["name"] = kernel.name
        metadata["shared"] = kernel.shared_bytes
        metadata["kernel_signature"] = kernel.signature_json()
        metadata["msl_locations"] = kernel.locations_json()
        metadata["debug_formats"] = json.dumps(kernel.debug_formats)
        metadata["msl_std"] = kernel.msl_std  # the oldest `-std=metal3.x` the source compiles at
        compile_log.emit(kernel.name, compile_log.LOWERED, compile_log.target_name(opt), time.perf_counter() - started)
        return kernel.source

    def add_stages(self, stages: dict, options: AppleOptions, language: Language) -> None:
        if language == Language.TRITON:
            stages["ttir"] = lambda src, metadata: self.make_ttir(src, metadata, options)
            stages["ttgir"] = lambda src, metadata: self.make_ttgir(src, metadata, options)
        elif language == Language.GLUON:
            stages["glir"] = lambda src, metadata: src  # Gluon's IR is TTGIR with explicit layouts already
            stages["ttgir"] = lambda src, metadata: self.gluon_to_ttgir(src, metadata, options)
        stages["msl"] = lambda src, metadata: self.make_msl(src, metadata, options)
        stages["metal"] = lambda src, metadata: src.encode()

    @staticmethod
    def gluon_to_ttgir(mod, metadata, opt: AppleOptions):
        _past_frontend()
        check_num_warps(mod.get_entry_func_name(), opt)
        return _run_passes(mod, "gluon_to_ttgir", [
            passes.gluon.add_inliner, passes.gluon.add_infer_coalesced_encodings,
            passes.gluon.add_resolve_auto_encodings, passes.gluon.add_canonicalizer, passes.common.add_sccp,
            passes.ttir.add_loop_aware_cse, passes.gluon.add_canonicalizer,
            passes.ttgpuir.add_combine_tensor_select_and_if, passes.ttgpuir.add_allocate_shared_memory
        ])


_KERNEL_HEAD = re.compile(r"tt\.func public @([\w$.]+)\((.*?)\)\s*(?:->|attributes|\{)")
_F64_POINTER_ARG = re.compile(r"%([\w$.-]+): !tt\.ptr<f64>")


def _refuse_float64_arguments(ttir: str) -> None:
    """With allow_fp64_demotion (float64 values computed in float32), a float64 tensor argument cannot be read
    or written: refused before anything else with the kernel's and the argument's names (the arguments' SSA
    names in the TTIR Triton's frontend prints). Without the option float64 is software binary64."""
    head = _KERNEL_HEAD.search(ttir)
    if head is None:
        return
    for arg in _F64_POINTER_ARG.findall(head.group(2)):
        raise UnsupportedFeatureError(
            f"apple backend: kernel '{head.group(1)}' argument '{arg}' is a float64 tensor: float64 tensors are "
            f"not supported with allow_fp64_demotion=True, which computes float64 in float32. Pass `{arg}` as a "
            "float32 tensor, or drop the option to compute in software float64")


def _run_passes(mod, name: str, adders) -> Any:
    """Run upstream passes, in order, on `mod` (each `adder(pm)` adds one pass to the pass manager)."""
    pm = ir.pass_manager(mod.context)
    pm.enable_debug()
    for add in adders:
        add(pm)
    pm.run(mod, name)
    return mod
