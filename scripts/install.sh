#!/usr/bin/env bash
# Installs the apple backend on a Debian 12 machine, in layers:
#   bash scripts/install.sh          what running kernels needs: clang 22 for the emulator (apt), a C compiler and
#                                    Python's headers for its launcher, the pinned Triton, PyTorch and NumPy wheels,
#                                    and this package (pip, editable)
#   bash scripts/install.sh --test   the above, plus what the test suite needs: pytest and friends, matplotlib (the
#                                    profiler's roofline plots), the libraries test/integration and test/models
#                                    run unmodified (liger-kernel, fla-core, transformers, mamba-ssm without its
#                                    CUDA build), and the AArch64 cross toolchain and qemu of the emulator's
#                                    portability tests (about 440 MB of apt)
# Each step says on one line what it installs. PyTorch: `pip install torch==2.13.0` from PyPI is a CUDA build of
# several GB on Linux; the emulator needs only the CPU build: set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# to take it from PyTorch's CPU-only index.
set -euo pipefail
cd "$(dirname "$0")/.."

TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) TEST=1 ;;
    *) echo "install.sh: unknown option $arg (use --test for the test tools)" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
step() { echo "install.sh: $*"; }
apt_install() {
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

if ! command -v clang++-22 >/dev/null 2>&1 || [ ! -d /usr/lib/llvm-22/lib/clang/22/lib ]; then
  step "apt: clang-22 and libclang-rt-22-dev, the emulator's compiler (~300 MB)"
  apt_install clang-22 libclang-rt-22-dev
fi

# The emulator's launcher (backend/emulator/native/launcher.c) is compiled on first use by Triton's
# compile_module_from_file, as Triton compiles its own launchers: it needs `gcc` or `clang` on PATH (or CC; the
# versioned clang-22 above is not looked for) and the headers of the Python that runs Triton. Debian's
# python3-pip only recommends them (build-essential, python3-dev), so an install without recommends lacks them.
# Triton's build reads the include directory of sysconfig's default scheme (posix_prefix for Debian's posix_local).
PY_INCLUDE=$(python -c 'import sysconfig as s; d = s.get_default_scheme(); print(s.get_paths(scheme="posix_prefix" if d == "posix_local" else d)["include"])')
if [ ! -f "$PY_INCLUDE/Python.h" ] || { [ -z "${CC:-}" ] && ! command -v gcc >/dev/null 2>&1 && ! command -v clang >/dev/null 2>&1; }; then
  if [ "$(python -c 'import sys; print(sys.base_prefix)')" = "/usr" ]; then  # Debian's own Python (or a venv of it)
    step "apt: gcc and python3-dev, for the emulator's launcher (~60 MB)"
    apt_install gcc python3-dev
  fi
  if [ ! -f "$PY_INCLUDE/Python.h" ]; then
    echo "install.sh: $PY_INCLUDE/Python.h is missing: install the headers of $(python -c 'import sys; print(sys.executable)')" >&2
    exit 1
  fi
fi

step "pip: torch==2.13.0${TORCH_INDEX_URL:+ (from $TORCH_INDEX_URL)}, triton==3.9.0, numpy==2.4.6"
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  python -m pip install -q --index-url "$TORCH_INDEX_URL" "torch==2.13.0"
fi
python -m pip install -q "torch==2.13.0" "triton==3.9.0" "numpy==2.4.6"

if [ "$TEST" = 1 ]; then
  # AArch64 cross headers/libraries, a linker for them and qemu: the emulator's native sources are checked for
  # aarch64 and its runtime runs kernels under qemu-aarch64-static (test/emulator/test_emu_portability.py).
  if [ ! -f /usr/aarch64-linux-gnu/include/stdio.h ] || [ ! -d /usr/aarch64-linux-gnu/include/c++ ] || \
     ! command -v ld.lld-22 >/dev/null 2>&1 || ! command -v qemu-aarch64-static >/dev/null 2>&1; then
    step "apt (tests): the AArch64 cross toolchain, lld-22 and qemu-user-static for the portability tests (~440 MB)"
    apt_install libc6-dev-arm64-cross libstdc++-12-dev-arm64-cross lld-22 qemu-user-static
  fi
  step "pip (tests): pytest, pytest-xdist, pytest-timeout, hypothesis, nanobind, setuptools; liger-kernel, fla-core, einops (unmodified libraries)"
  # setuptools builds the wheel test/packaging installs from (pip wheel --no-build-isolation); pytest-timeout is the
  # per-test timeout of the macOS workflow, whose behaviour test/lowering/test_macos_workflow.py checks here
  python -m pip install -q "pytest==9.0.3" "pytest-xdist==3.8.0" "pytest-timeout==2.4.0" "hypothesis==6.155.2" \
    "nanobind==3.1.0" "setuptools==84.2.1"
  # The profiler's roofline plots (emulator/roofline.py; test/emulator/test_profile.py reads one back).
  step "pip (tests): matplotlib and its dependencies, for the profiler's roofline plots"
  python -m pip install -q "matplotlib==3.11.2" "contourpy==1.3.3" "cycler==0.12.1" "fonttools==4.68.0" \
    "kiwisolver==1.5.1" "packaging==26.4" "pillow==13.0.0" "pyparsing==3.3.3" "python-dateutil==4.0.0" "tzdata==2026.6"
  # test/integration runs these libraries unmodified; they need only torch and triton, hence --no-deps.
  python -m pip install -q --no-deps "liger-kernel==0.8.5" "fla-core==0.6.0" "einops==0.8.2"
  # test/models builds tiny models from transformers' own classes (its dependencies from PyPI, pinned where the
  # models need them), and runs mamba-ssm's Triton kernels: its CUDA extension is skipped with its own switch, and
  # MAMBA_FORCE_BUILD=TRUE builds the wheel here instead of fetching a prebuilt CUDA wheel from outside PyPI (its
  # setup.py would try, and fails on a CPU-only torch). --no-deps: its other dependencies (tilelang, quack-kernels)
  # serve CUDA-only paths the tests never import.
  step "pip (tests): transformers, tokenizers, safetensors, huggingface-hub; mamba-ssm without its CUDA build"
  python -m pip install -q "transformers==5.23.0" "tokenizers==0.23.3" "safetensors==0.8.0" "huggingface-hub==2.4.0"
  # Its setup.py imports torch and wheel at build time (hence --no-build-isolation, and wheel here).
  python -m pip install -q "wheel==0.48.0"
  MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE python -m pip install -q --no-build-isolation --no-deps \
    "mamba-ssm==2.3.2.post1"
fi

# Editable: edits to third_party/apple are live without reinstalling. pip's editable build leaves an egg-info
# directory in the checkout; the installed metadata lives in site-packages, so it is removed (a stale one would
# make `import triton` look for the backend after `pip uninstall triton-apple`).
step "pip: this package (triton-apple, editable)"
python -m pip install -q --no-deps -e .
rm -rf triton_apple.egg-info
python -c "import triton; assert 'apple' in triton.backends.backends, triton.backends.backends.keys(); print('install.sh: triton backends:', sorted(triton.backends.backends))"
