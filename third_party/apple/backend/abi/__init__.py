"""The contract between a compiled kernel and its launchers: how scalar types are spelled and stored on each
side (`scalars`), which buffer slot takes which launch value (`slots`, `arguments`), and the buffers the
backend adds to a launch. The lowering writes it into the kernel's metadata; the Metal launch and the
emulator's launcher read it. Nothing here imports the lowering, the driver or the emulator."""
