"""Where tests run kernels (the emulator's `cpu` device or a Mac's `mps`) and compiling for the apple target
without launching."""


def device_name() -> str:
    from triton.backends.apple.driver import device_mode
    return "mps" if device_mode() == "metal" else "cpu"


def compile_for_apple(fn, signature: dict, constexprs: dict = None, num_warps: int = 4, family: str = "apple7",
                      **options):
    """Compile `fn` for the apple target without launching it; returns triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    names = list(signature)
    consts = {(names.index(k), ): v for k, v in (constexprs or {}).items()}
    sig = dict(signature)
    for k in (constexprs or {}):
        sig[k] = "constexpr"
    src = ASTSource(fn, sig, consts)
    from triton.backends.apple.driver import device_mode, target_name
    target = GPUTarget(target_name(device_mode()), family, 32)  # `cpu` on the emulator, `mps` on a Mac
    return triton.compile(src, target=target, options={"num_warps": num_warps, **options})
