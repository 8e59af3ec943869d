#!/usr/bin/env bash
# Installs everything the apple backend needs on a Debian 12 machine: clang 22 for the emulator (apt),
# the pinned Triton and PyTorch wheels, the test tools, and this package (pip).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

if ! command -v clang++-22 >/dev/null 2>&1 || [ ! -d /usr/lib/llvm-22/lib/clang/22/lib ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang-22 libclang-rt-22-dev >/dev/null
fi
# AArch64 cross headers/libraries, a linker for them and qemu: the emulator's native sources are checked for
# aarch64 and its runtime runs kernels under qemu-aarch64-static (test/emulator/test_emu_portability.py).
if [ ! -f /usr/aarch64-linux-gnu/include/stdio.h ] || [ ! -d /usr/aarch64-linux-gnu/include/c++ ] || \
   ! command -v ld.lld-22 >/dev/null 2>&1 || ! command -v qemu-aarch64-static >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libc6-dev-arm64-cross libstdc++-12-dev-arm64-cross \
    lld-22 qemu-user-static >/dev/null
fi

# The emulator's launcher (third_party/apple/backend/driver.c) is compiled on first use by Triton's
# compile_module_from_file, as Triton compiles its own launchers: it needs `gcc` or `clang` on PATH (or CC; the
# versioned clang-22 above is not looked for) and the headers of the Python that runs Triton. Debian's
# python3-pip only recommends them (build-essential, python3-dev), so an install without recommends lacks them.
# Triton's build reads the include directory of sysconfig's default scheme (posix_prefix for Debian's posix_local).
PY_INCLUDE=$(python -c 'import sysconfig as s; d = s.get_default_scheme(); print(s.get_paths(scheme="posix_prefix" if d == "posix_local" else d)["include"])')
if [ ! -f "$PY_INCLUDE/Python.h" ] || { [ -z "${CC:-}" ] && ! command -v gcc >/dev/null 2>&1 && ! command -v clang >/dev/null 2>&1; }; then
  if [ "$(python -c 'import sys; print(sys.base_prefix)')" = "/usr" ]; then  # Debian's own Python (or a venv of it)
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc python3-dev >/dev/null
  fi
  if [ ! -f "$PY_INCLUDE/Python.h" ]; then
    echo "install.sh: $PY_INCLUDE/Python.h is missing: install the headers of $(python -c 'import sys; print(sys.executable)')" >&2
    exit 1
  fi
fi

python -m pip install -q "torch==2.13.0" "triton==3.9.0" "numpy==2.4.6" "pytest==9.0.3" "pytest-xdist==3.8.0" "hypothesis==6.155.2" "nanobind==3.1.0"
# test/integration runs these libraries unmodified; they need only torch and triton, hence --no-deps.
python -m pip install -q --no-deps "liger-kernel==0.8.5"
# flash-linear-attention's core, unmodified, for test/integration/test_fla.py (its only dependency is einops;
# --no-deps keeps pip from touching the pinned torch/triton)
python -m pip install -q --no-deps "fla-core==0.6.0" "einops==0.8.2"
# Editable: edits to third_party/apple are live without reinstalling. pip's editable build leaves an egg-info
# directory in the checkout; the installed metadata lives in site-packages, so it is removed (a stale one would
# make `import triton` look for the backend after `pip uninstall triton-apple`).
python -m pip install -q --no-deps -e .
rm -rf triton_apple.egg-info
python -c "import triton; assert 'apple' in triton.backends.backends, triton.backends.backends.keys(); print('triton backends:', sorted(triton.backends.backends))"
