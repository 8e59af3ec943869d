// Native part of the apple backend for upstream's in-tree plugin build: libtriton's main.cc calls
// init_triton_apple(m.def_submodule("apple")) for every plugin, so this function must exist.
//
// It binds nothing, on purpose. Python never calls into libtriton for this backend:
//   * the Metal path launches through PyTorch's MPS stream (torch.mps.compile_shader);
//   * the emulator path compiles its runtime (backend/emulator/native/emulator_runtime.cpp) and each kernel
//     with the host's clang on first use, loads the runtime RTLD_GLOBAL and launches through its own native
//     launcher (backend/emulator/native/launcher.c, compiled like upstream's launchers). It has to: compiled
//     kernels resolve the runtime's hooks (__tt_barrier, __tt_simd, ...) from a runtime loaded RTLD_GLOBAL,
//     and libtriton is loaded RTLD_LOCAL, so a copy linked in here could never serve them.
// Keeping the emulator runtime out of libtriton also keeps its platform code (signal contexts, fibers)
// out of Triton's own build. The native sources ship inside backend/, which the plugin install copies.
#include <nanobind/nanobind.h>

namespace nb = nanobind;

void init_triton_apple(nb::module_ &m) {
  m.doc() = "apple backend (Metal); no native entry points: see third_party/apple/triton_apple.cc";
}
