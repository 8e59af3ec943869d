// Native part of the apple backend for upstream's in-tree plugin build: libtriton's main.cc calls
// init_triton_apple(m.def_submodule("apple")), so these functions appear as
// triton._C.libtriton.apple.emulator.*.
//
// They expose the emulator runtime's C entry points (include/emulator_runtime.h). Arguments are the
// addresses of the same ctypes structures the Python side builds (tt_launch_desc, tt_launch_result),
// so both paths share one marshalling implementation. Note that compiled kernels resolve their runtime
// hooks (__tt_barrier, __tt_simd, ...) from a runtime loaded RTLD_GLOBAL; libtriton is loaded
// RTLD_LOCAL, so the Python side keeps using its own copy of the runtime for launches and this module
// is an alternative entry for embedders that build the runtime into their process.
#include <nanobind/nanobind.h>

#include <cstdint>

#include "emulator_runtime.h"

namespace nb = nanobind;

void init_triton_apple(nb::module_ &m) {
  nb::module_ emu = m.def_submodule("emulator", "Metal-on-CPU emulator runtime");
  emu.def("abi_version", []() { return tt_emu_abi_version(); },
          "ABI version of the emulator runtime (TT_EMU_ABI_VERSION).");
  emu.def(
      "launch",
      [](std::uintptr_t desc, std::uintptr_t result) {
        nb::gil_scoped_release release;
        return tt_emu_launch(reinterpret_cast<const tt_launch_desc *>(desc),
                             reinterpret_cast<tt_launch_result *>(result));
      },
      nb::arg("desc"), nb::arg("result"),
      "Run a kernel grid. `desc`/`result` are addresses of tt_launch_desc / tt_launch_result; returns the "
      "status (0 on success), details are in the result structure.");
  emu.def("set_ub_mode", [](int mode) { tt_emu_set_ub_mode(mode); }, nb::arg("mode"),
          "0: warn about undefined behaviour (default), 1: make it fatal, 2: ignore it.");
  emu.def(
      "bench_switch",
      [](std::uint32_t n) {
        nb::gil_scoped_release release;
        return tt_emu_bench_switch(n);
      },
      nb::arg("n") = 1000000, "Nanoseconds per fiber context switch.");
}
