// What a kernel's own source needs beyond the helpers it calls.

// @helper tt_threadgroup_buffer
/// Declares the kernel's threadgroup memory (kernels that use some): a plain static array on Metal; the
/// emulator defines the macro itself, to share one buffer per threadgroup.
#ifndef TT_THREADGROUP_BUFFER
#define TT_THREADGROUP_BUFFER(name, nbytes) threadgroup alignas(16) uchar name[nbytes]
#endif
