/*
 * The emulator's native launcher (the role upstream's generated CUDA launchers play): the per-launch hot path of
 * the Metal-on-CPU emulator.
 *
 * Compiled on first use by backend/emulator/launcher.py with Triton's compile_so_from_file and kept in
 * Triton's cache, as upstream compiles its launcher. It talks to the emulator runtime only through the runtime's
 * C ABI (native/include/emulator_runtime.h), by function addresses the Python side takes from the runtime library it
 * has already loaded: this module links against nothing but Python.
 *
 * What it does per launch, instead of the ctypes marshalling it replaces:
 *   - turns each bound argument into a tt_buffer_desc: a CPU torch tensor into its data pointer and the bytes
 *     its view spans (sizes and strides), once they are known to lie inside the tensor's storage; a Python
 *     int/float/bool into the bytes of its Metal scalar type with the range checks of the Python binder;
 *     anything else (and anything these checks refuse) goes to a Python hook, which either binds it (numpy arrays, bytes, emulator.Scalar, triton.reinterpret views) or raises
 *     the error that names the kernel, the argument and what was wrong;
 *   - calls the launch-enter hook, then runs tt_emu_launch_begin / tt_emu_launch_wait in slices of
 *     WAIT_SLICE_MS with the GIL released, running Python's signal handlers between slices: Ctrl-C cancels the
 *     launch, waits for it to stop and raises KeyboardInterrupt;
 *   - returns None when the launch succeeded without events, else the launch result as a tuple that the
 *     Python side turns into warnings and an EmulatorLaunchError (MSL lines, symbolized fault address).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "emulator_runtime.h"

#if PY_VERSION_HEX < 0x030B0000 /* public from Python 3.11 on */
#define PyFloat_Pack2(x, p, le) _PyFloat_Pack2((x), (unsigned char *)(p), (le))
#define PyFloat_Pack4(x, p, le) _PyFloat_Pack4((x), (unsigned char *)(p), (le))
#endif

#define WAIT_SLICE_MS 50 /* how long the caller waits in C before Python runs its signal handlers */

/* ---- the runtime's functions, by address ---------------------------------------------------------------- */

typedef int (*launch_begin_fn)(const tt_launch_desc *, tt_launch_result *, uint32_t, uint64_t);
typedef int (*launch_wait_fn)(uint64_t, uint32_t);
typedef void (*launch_cancel_fn)(uint64_t, int32_t);
typedef int (*abi_version_fn)(void);

/* The header's declarations and these pointer types must agree: a signature change fails to compile here. */
_Static_assert(__builtin_types_compatible_p(__typeof__(&tt_emu_launch_begin), launch_begin_fn),
               "tt_emu_launch_begin changed: update launcher.c");
_Static_assert(__builtin_types_compatible_p(__typeof__(&tt_emu_launch_wait), launch_wait_fn),
               "tt_emu_launch_wait changed: update launcher.c");
_Static_assert(__builtin_types_compatible_p(__typeof__(&tt_emu_launch_cancel), launch_cancel_fn),
               "tt_emu_launch_cancel changed: update launcher.c");
_Static_assert(__builtin_types_compatible_p(__typeof__(&tt_emu_abi_version), abi_version_fn),
               "tt_emu_abi_version changed: update launcher.c");

static launch_begin_fn rt_begin;
static launch_wait_fn rt_wait;
static launch_cancel_fn rt_cancel;
static uint64_t next_token; /* launch tokens, unique in this process (only this module begins launches) */

/* ---- launch settings from the environment -------------------------------------------------------------- */

/* The TRITON_APPLE_EMULATOR_* settings are read at every launch (tests and users change them between
   launches), but parsed only when one of them changed: getenv costs nanoseconds, Python's knobs microseconds.
   os.environ writes through to the C environment (putenv/unsetenv), so getenv sees every change. */
#define MAX_CONFIG_ENV 8
static PyObject *config_fn;     /* config_fn(kernel_name) -> config tuple, from the knobs */
static PyObject *config_cached; /* the tuple computed for env_seen */
static char *env_names[MAX_CONFIG_ENV];
static char *env_seen[MAX_CONFIG_ENV]; /* the values config_cached was computed from (NULL: unset) */
static int n_env;

/* ---- binding plans -------------------------------------------------------------------------------------- */

enum {
  KIND_POINTER = 0, /* a Triton pointer argument: a CPU torch tensor here, anything else through the hook */
  KIND_SCALAR = 1,  /* a Triton scalar argument: a Python int/float/bool packed as `scalar`, else the hook */
  KIND_ANY = 2,     /* emulator API: a CPU torch tensor here, anything else through the hook */
  KIND_HOOK = 3,    /* always through the hook */
};

/* Scalar types the fast path packs (the Python names of each, including the unsigned ones, which take the
   same values as the signed type of their width, are in SCALAR_TYPES: see PyInit_apple_launcher). */
enum { S_BOOL, S_CHAR, S_SHORT, S_INT, S_LONG, S_HALF, S_BFLOAT, S_FLOAT, S_DOUBLE, S_COUNT };

typedef struct {
  Py_ssize_t pos; /* index into the launch's args tuple; -1 - k: item k of the `extra` tuple (the buffers the
                     backend adds: debug buffer, lock table) */
  uint32_t slot;
  uint32_t kind;
  uint32_t scalar;
  uint32_t elem_size; /* of the parameter; 0: the tensor's element size */
  uint32_t readonly;
  char *name;
} slot_spec;

typedef struct {
  char *kernel_name;
  Py_ssize_t n;
  PyObject *tensor_type; /* torch.Tensor, or NULL: no tensor fast path */
  PyObject *hook;        /* hook(i, value) -> (host, nbytes, flags, elem_size, keep) */
  slot_spec *slots;
} plan_t;

#define PLAN_CAPSULE "triton_apple.launch_plan"

static void plan_free(plan_t *p) {
  if (!p)
    return;
  if (p->slots)
    for (Py_ssize_t i = 0; i < p->n; ++i)
      PyMem_Free(p->slots[i].name);
  PyMem_Free(p->slots);
  PyMem_Free(p->kernel_name);
  Py_XDECREF(p->tensor_type);
  Py_XDECREF(p->hook);
  PyMem_Free(p);
}

static void plan_capsule_free(PyObject *capsule) {
  plan_free((plan_t *)PyCapsule_GetPointer(capsule, PLAN_CAPSULE));
}

static char *copy_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *c = PyMem_Malloc(n);
  if (c)
    memcpy(c, s, n);
  else
    PyErr_NoMemory();
  return c;
}

/* make_plan(kernel_name, slots, tensor_type, hook): slots is a sequence of
   (pos, slot, kind, scalar, elem_size, readonly, name), in the order of the kernel's buffer parameters. */
static PyObject *make_plan(PyObject *self, PyObject *args) {
  const char *kernel_name;
  PyObject *slots, *tensor_type, *hook;
  if (!PyArg_ParseTuple(args, "sOOO:make_plan", &kernel_name, &slots, &tensor_type, &hook))
    return NULL;
  if (!PyCallable_Check(hook))
    return PyErr_Format(PyExc_TypeError, "make_plan: hook must be callable");
  if (tensor_type != Py_None && !PyType_Check(tensor_type))
    return PyErr_Format(PyExc_TypeError, "make_plan: tensor_type must be a type or None");
  PyObject *seq = PySequence_Fast(slots, "make_plan: slots must be a sequence");
  if (!seq)
    return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > TT_EMU_MAX_SLOTS + 1) {
    Py_DECREF(seq);
    return PyErr_Format(PyExc_ValueError, "make_plan: %zd buffer parameters (at most %d)", n, TT_EMU_MAX_SLOTS);
  }
  plan_t *p = PyMem_Calloc(1, sizeof(plan_t));
  if (!p) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  p->n = n;
  p->slots = PyMem_Calloc(n ? n : 1, sizeof(slot_spec));
  p->kernel_name = copy_str(kernel_name);
  if (!p->slots || !p->kernel_name)
    goto fail;
  for (Py_ssize_t i = 0; i < n; ++i) {
    slot_spec *s = &p->slots[i];
    const char *name;
    int readonly;
    unsigned int slot, kind, scalar, elem_size;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "nIIIIps;make_plan: a slot is (pos, slot, kind, "
                          "scalar, elem_size, readonly, name)", &s->pos, &slot, &kind, &scalar, &elem_size,
                          &readonly, &name))
      goto fail;
    if (kind > KIND_HOOK || (kind == KIND_SCALAR && scalar >= S_COUNT)) {
      PyErr_Format(PyExc_ValueError, "make_plan: bad slot %zd (kind %u, scalar %u, pos %zd)", i, kind, scalar,
                   s->pos);
      goto fail;
    }
    s->slot = slot;
    s->kind = kind;
    s->scalar = scalar;
    s->elem_size = elem_size;
    s->readonly = (uint32_t)readonly;
    if (!(s->name = copy_str(name)))
      goto fail;
  }
  Py_DECREF(seq);
  p->tensor_type = tensor_type == Py_None ? NULL : Py_NewRef(tensor_type);
  p->hook = Py_NewRef(hook);
  PyObject *capsule = PyCapsule_New(p, PLAN_CAPSULE, plan_capsule_free);
  if (!capsule)
    plan_free(p);
  return capsule;
fail:
  Py_DECREF(seq);
  plan_free(p);
  return NULL;
}

/* ---- arguments ------------------------------------------------------------------------------------------ */

typedef struct {
  _Alignas(16) unsigned char bytes[16];
} scalar_bytes;

/* A NaN narrowed from a double: its sign, an all-ones exponent, the leading `mant_bits` bits of its payload and
   the quiet bit (abi/scalars.py `_nan_bits`). */
static uint32_t nan_bits(double x, int exp_bits, int mant_bits) {
  uint64_t d;
  memcpy(&d, &x, sizeof d);
  uint64_t sign = d >> 63, payload = (d & ((1ULL << 52) - 1)) >> (52 - mant_bits);
  return (uint32_t)((sign << (exp_bits + mant_bits)) | (((1ULL << exp_bits) - 1) << mant_bits) | payload |
                    (1ULL << (mant_bits - 1)));
}

/* The bfloat nearest to finite `x` (ties to even, one rounding from the double), as bits; 0 when that is
   infinite (abi/scalars.py `_bfloat_bits`). */
static int bfloat_bits(double x, uint16_t *out) {
  const double bf16_max = 3.3895313892515355e38; /* 0x7F7F */
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  double a = fabs(x);
  if (a == 0.0) {
    *out = sign;
    return 1;
  }
  int e;
  (void)frexp(a, &e); /* a = m * 2^e, 0.5 <= m < 1 */
  /* 8 significant bits; below 2^-126 bfloat's values are multiples of its subnormal step 2^-133 */
  int shift = e - 8 < -133 ? -133 : e - 8;
  double r = ldexp(nearbyint(ldexp(a, -shift)), shift); /* exact scalings; the default mode rounds ties to even */
  if (r > bf16_max)
    return 0;
  float f = (float)r; /* exact: r is a bfloat */
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  *out = (uint16_t)(sign | (b >> 16));
  return 1;
}

/* The bytes of a Python number for scalar type `t`: abi/scalars.py `pack`, byte for byte, for the values it
   handles here (test/abi pins the two together). 1: packed; 0: not handled here (the hook decides: it binds
   what Python accepts and raises the error for the rest); -1: a Python error is set. */
static int pack_scalar(PyObject *v, uint32_t t, scalar_bytes *out, uint32_t *nbytes) {
  if (t == S_HALF || t == S_FLOAT || t == S_BFLOAT || t == S_DOUBLE) {
    if (!PyFloat_Check(v) && !PyLong_Check(v))
      return 0;
    double x = PyFloat_AsDouble(v); /* an int too large for a double: OverflowError, raised by the hook */
    if (x == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return 0;
    }
    if (t == S_DOUBLE) {
      memcpy(out->bytes, &x, 8); /* little-endian hosts only: the runtime refuses others */
      *nbytes = 8;
      return 1;
    }
    uint32_t bits;
    if (isnan(x)) {
      bits = t == S_HALF ? nan_bits(x, 5, 10) : t == S_BFLOAT ? nan_bits(x, 8, 7) : nan_bits(x, 8, 23);
    } else if (t == S_BFLOAT) {
      uint16_t b16;
      if (isinf(x))
        b16 = x < 0 ? 0xFF80 : 0x7F80;
      else if (!bfloat_bits(x, &b16))
        return 0; /* would become infinity: the hook raises the error */
      bits = b16;
    } else { /* Python's packers round once, to nearest even, and refuse what would become infinity */
      unsigned char b[4];
      if ((t == S_HALF ? PyFloat_Pack2(x, (char *)b, 1) : PyFloat_Pack4(x, (char *)b, 1)) < 0) {
        PyErr_Clear();
        return 0;
      }
      bits = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    }
    uint32_t n = t == S_FLOAT ? 4 : 2;
    for (uint32_t k = 0; k < n; ++k)
      out->bytes[k] = (unsigned char)(bits >> (8 * k));
    *nbytes = n;
    return 1;
  }
  if (!PyLong_Check(v))
    return 0;
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (x == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  uint64_t bits;
  if (overflow > 0) { /* above the signed range: the unsigned range of long is still accepted */
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      return 0;
    }
    if (t != S_LONG)
      return 0;
    bits = u;
  } else if (overflow < 0) {
    return 0;
  } else {
    static const int width[] = {[S_BOOL] = 1, [S_CHAR] = 8, [S_SHORT] = 16, [S_INT] = 32, [S_LONG] = 64};
    int w = width[t];
    if (t == S_BOOL) {
      if (x != 0 && x != 1)
        return 0;
    } else if (w < 64) {
      long long lo = -(1LL << (w - 1)), umax = (long long)((1ULL << w) - 1);
      if (x < lo || x > umax) /* the signed range, or the unsigned range of the same width */
        return 0;
    }
    bits = (uint64_t)x;
  }
  uint32_t n = t == S_BOOL || t == S_CHAR ? 1 : t == S_SHORT ? 2 : t == S_INT ? 4 : 8;
  for (uint32_t k = 0; k < n; ++k) /* little-endian two's complement, as struct.pack("<...") */
    out->bytes[k] = (unsigned char)(bits >> (8 * k));
  *nbytes = n;
  return 1;
}

static PyObject *str_is_cpu, *str_data_ptr, *str_shape, *str_stride, *str_element_size, *str_untyped_storage,
    *str_nbytes;

static int as_u64(PyObject *o, uint64_t *out) {
  if (!o)
    return -1;
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  Py_DECREF(o);
  if (v == (unsigned long long)-1 && PyErr_Occurred())
    return -1;
  *out = v;
  return 0;
}

static int as_i64(PyObject *o, int64_t *out) {
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred())
    return -1;
  *out = v;
  return 0;
}

/* A CPU torch tensor's data pointer, the bytes its view spans and its element size (emulator.runtime's
   torch binding). 1: done; 0: not a case handled here (another device, negative strides, anything odd): the
   hook binds it or raises the error; -1: a Python error is set. */
static int bind_tensor(PyObject *t, uint64_t *host, uint64_t *nbytes, uint32_t *itemsize) {
  PyObject *o = PyObject_GetAttr(t, str_is_cpu);
  if (!o)
    goto odd;
  int cpu = o == Py_True;
  Py_DECREF(o);
  if (!cpu)
    return 0;
  uint64_t isz;
  if (as_u64(PyObject_CallMethodNoArgs(t, str_element_size), &isz) < 0 || isz == 0 || isz > 0xFFFFFFFFu)
    goto odd;
  PyObject *shape = PyObject_GetAttr(t, str_shape);
  if (!shape)
    goto odd;
  PyObject *stride = PyObject_CallMethodNoArgs(t, str_stride);
  if (!stride) {
    Py_DECREF(shape);
    goto odd;
  }
  int rc = 0;
  if (PyTuple_Check(shape) && PyTuple_Check(stride) && PyTuple_GET_SIZE(shape) == PyTuple_GET_SIZE(stride)) {
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    uint64_t last = 0; /* element offset of the last element */
    int empty = 0, ok = 1;
    for (Py_ssize_t d = 0; d < nd && ok; ++d) {
      int64_t sz, st;
      uint64_t step;
      if (as_i64(PyTuple_GET_ITEM(shape, d), &sz) < 0 || as_i64(PyTuple_GET_ITEM(stride, d), &st) < 0) {
        PyErr_Clear();
        ok = 0;
      } else if (st < 0 || sz < 0) {
        ok = 0; /* negative strides: the hook refuses them, with the message */
      } else if (sz == 0) {
        empty = 1;
      } else if (__builtin_mul_overflow((uint64_t)(sz - 1), (uint64_t)st, &step) ||
                 __builtin_add_overflow(last, step, &last)) {
        ok = 0; /* no such tensor in memory: let Python's binding say what it is */
      }
    }
    uint64_t span;
    if (ok && (empty || !__builtin_mul_overflow(last + 1, isz, &span))) {
      *nbytes = empty ? 0 : span;
      rc = 1;
    }
  }
  Py_DECREF(shape);
  Py_DECREF(stride);
  if (rc != 1)
    return rc;
  if (as_u64(PyObject_CallMethodNoArgs(t, str_data_ptr), host) < 0)
    goto odd;
  if (*nbytes) { /* the view must lie inside its storage (freed or shrunk by resize_: the hook says so) */
    PyObject *st = PyObject_CallMethodNoArgs(t, str_untyped_storage);
    if (!st)
      goto odd;
    uint64_t base, size;
    int bad = as_u64(PyObject_CallMethodNoArgs(st, str_data_ptr), &base) < 0 ||
              as_u64(PyObject_CallMethodNoArgs(st, str_nbytes), &size) < 0;
    Py_DECREF(st);
    if (bad)
      goto odd;
    if (base == 0 || *host < base || *host - base > size || *nbytes > size - (*host - base))
      return 0;
  }
  *itemsize = (uint32_t)isz;
  return 1;
odd: /* an attribute missing or failing: the hook goes through Python's binding, which says what is wrong */
  if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt))
    return -1;
  PyErr_Clear();
  return 0;
}

/* hook(i, value) -> (host, nbytes, flags, elem_size, keep); the result is kept alive in *keep. */
static int call_hook(plan_t *p, Py_ssize_t i, PyObject *value, tt_buffer_desc *d, PyObject **keep) {
  PyObject *r = PyObject_CallFunction(p->hook, "nO", i, value);
  if (!r)
    return -1;
  unsigned long long host, nbytes;
  unsigned int flags, elem_size;
  PyObject *kept;
  if (!PyTuple_Check(r) || !PyArg_ParseTuple(r, "KKIIO;the launch hook returns (host, nbytes, flags, elem_size, "
                                             "keep)", &host, &nbytes, &flags, &elem_size, &kept)) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_TypeError, "kernel '%s': the launch hook returned %R, not a tuple", p->kernel_name, r);
    Py_DECREF(r);
    return -1;
  }
  d->host = (void *)(uintptr_t)host;
  d->nbytes = nbytes;
  d->flags = flags;
  d->elem_size = elem_size;
  *keep = r;
  return 0;
}

/* ---- launching ------------------------------------------------------------------------------------------ */

static int dims3(PyObject *o, uint32_t out[3], const char *what) {
  if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 3) {
    PyErr_Format(PyExc_TypeError, "launch: %s must be a tuple of 3 ints", what);
    return -1;
  }
  for (int k = 0; k < 3; ++k) {
    unsigned long v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(o, k));
    if ((v == (unsigned long)-1 && PyErr_Occurred()) || v > 0xFFFFFFFFul) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "launch: %s %R is not 3 integers from 0 to 2^32-1", what, o);
      return -1;
    }
    out[k] = (uint32_t)v;
  }
  return 0;
}

static PyObject *event_tuple(const tt_event *e) {
  return Py_BuildValue("(IIIILLy#)", e->kind, e->line, e->col, e->count, (long long)e->a, (long long)e->b, e->file,
                       (Py_ssize_t)strnlen(e->file, sizeof e->file));
}

/* (status, slot, index, is_write, tg, thread, lines, pc, pc_offset, pc_module, events, message) */
static PyObject *result_tuple(int status, const tt_launch_result *r) {
  uint32_t nl = r->nlines < TT_EMU_MAX_LINES ? r->nlines : TT_EMU_MAX_LINES;
  uint32_t ne = r->nevents < TT_EMU_MAX_EVENTS ? r->nevents : TT_EMU_MAX_EVENTS;
  PyObject *lines = PyList_New(nl), *events = PyList_New(ne);
  if (!lines || !events)
    goto fail;
  for (uint32_t k = 0; k < nl; ++k) {
    PyObject *n = PyLong_FromUnsignedLong(r->lines[k]);
    if (!n)
      goto fail;
    PyList_SET_ITEM(lines, k, n);
  }
  for (uint32_t k = 0; k < ne; ++k) {
    PyObject *e = event_tuple(&r->events[k]);
    if (!e)
      goto fail;
    PyList_SET_ITEM(events, k, e);
  }
  return Py_BuildValue("(iiLi(III)iNKKy#Ny#)", status, r->slot, (long long)r->index, r->is_write, r->tg[0],
                       r->tg[1], r->tg[2], r->thread, lines, (unsigned long long)r->pc,
                       (unsigned long long)r->pc_offset, r->pc_module,
                       (Py_ssize_t)strnlen(r->pc_module, sizeof r->pc_module), events, r->message,
                       (Py_ssize_t)strnlen(r->message, sizeof r->message));
fail:
  Py_XDECREF(lines);
  Py_XDECREF(events);
  return NULL;
}

/* The exception being raised, taken out (NULL if none), and put back. */
#if PY_VERSION_HEX >= 0x030C0000
static PyObject *fetch_exception(void) { return PyErr_GetRaisedException(); }
static void restore_exception(PyObject *exc) { PyErr_SetRaisedException(exc); }
#else
static PyObject *fetch_exception(void) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (!type)
    return NULL;
  PyErr_NormalizeException(&type, &value, &tb);
  if (tb)
    PyException_SetTraceback(value, tb);
  Py_DECREF(type);
  Py_XDECREF(tb);
  return value;
}
static void restore_exception(PyObject *exc) {
  if (exc)
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
}
#endif

/* Runs the launch while this thread waits in slices with the GIL released. Returns its final status, or
   INT32_MIN with a Python exception set when a signal handler raised (Ctrl-C): then the launch has been
   cancelled and waited for, so no kernel keeps running on buffers the caller is about to free. */
static int run_launch(const tt_launch_desc *desc, tt_launch_result *res) {
  uint64_t token = __atomic_add_fetch(&next_token, 1, __ATOMIC_RELAXED);
  int st = TT_EMU_BUSY;
  for (;;) {
    Py_BEGIN_ALLOW_THREADS
    st = rt_begin(desc, res, WAIT_SLICE_MS, token);
    Py_END_ALLOW_THREADS
    if (st != TT_EMU_BUSY)
      break;
    if (PyErr_CheckSignals() < 0)
      goto interrupted;
  }
  while (st == TT_EMU_PENDING) {
    if (PyErr_CheckSignals() < 0)
      goto interrupted;
    Py_BEGIN_ALLOW_THREADS
    st = rt_wait(token, WAIT_SLICE_MS);
    Py_END_ALLOW_THREADS
  }
  return st == TT_EMU_DONE ? res->status : st;

interrupted:;
  PyObject *exc = fetch_exception();
  rt_cancel(token, TT_ERR_INTERRUPTED);
  for (;;) {
    int w;
    Py_BEGIN_ALLOW_THREADS
    w = rt_wait(token, WAIT_SLICE_MS);
    Py_END_ALLOW_THREADS
    if (w != TT_EMU_PENDING)
      break;
    if (PyErr_CheckSignals() < 0) {
      if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        PyErr_Clear(); /* a second Ctrl-C while the launch is being stopped */
      } else { /* another handler raised: that exception goes on, once the launch has stopped */
        Py_XDECREF(exc);
        exc = fetch_exception();
      }
    }
  }
  restore_exception(exc);
  return INT32_MIN;
}

static int same_value(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

/* The config tuple of the current environment (a new reference), or NULL with an exception (a bad knob). */
static PyObject *env_config(const char *kernel_name) {
  int changed = config_cached == NULL;
  for (int k = 0; k < n_env && !changed; ++k)
    changed = !same_value(getenv(env_names[k]), env_seen[k]);
  if (!changed)
    return Py_NewRef(config_cached);
  if (!config_fn)
    return PyErr_Format(PyExc_RuntimeError, "launch: set_config_source() was not called");
  char *seen[MAX_CONFIG_ENV] = {0};
  for (int k = 0; k < n_env; ++k) { /* before calling Python, which may change the environment */
    const char *v = getenv(env_names[k]);
    if (v && !(seen[k] = copy_str(v))) {
      for (int j = 0; j < k; ++j)
        PyMem_Free(seen[j]);
      return NULL;
    }
  }
  PyObject *config = PyObject_CallFunction(config_fn, "s", kernel_name);
  if (!config) {
    for (int k = 0; k < n_env; ++k)
      PyMem_Free(seen[k]);
    return NULL;
  }
  for (int k = 0; k < n_env; ++k) {
    PyMem_Free(env_seen[k]);
    env_seen[k] = seen[k];
  }
  Py_XSETREF(config_cached, Py_NewRef(config));
  return config;
}

/* set_config_source(env_names, fn): launches given config=None take fn(kernel_name), recomputed only when
   one of the environment variables env_names changed. */
static PyObject *set_config_source(PyObject *self, PyObject *args) {
  PyObject *names, *fn;
  if (!PyArg_ParseTuple(args, "O!O:set_config_source", &PyTuple_Type, &names, &fn))
    return NULL;
  if (!PyCallable_Check(fn))
    return PyErr_Format(PyExc_TypeError, "set_config_source: fn must be callable");
  Py_ssize_t n = PyTuple_GET_SIZE(names);
  if (n > MAX_CONFIG_ENV)
    return PyErr_Format(PyExc_ValueError, "set_config_source: at most %d variables", MAX_CONFIG_ENV);
  char *copies[MAX_CONFIG_ENV] = {0};
  for (Py_ssize_t k = 0; k < n; ++k) {
    const char *name = PyUnicode_Check(PyTuple_GET_ITEM(names, k)) ? PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, k))
                                                                     : NULL;
    if (!name || !(copies[k] = copy_str(name))) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "set_config_source: env_names must be strings");
      for (Py_ssize_t j = 0; j < k; ++j)
        PyMem_Free(copies[j]);
      return NULL;
    }
  }
  for (int k = 0; k < MAX_CONFIG_ENV; ++k) {
    PyMem_Free(env_names[k]);
    PyMem_Free(env_seen[k]);
    env_names[k] = copies[k];
    env_seen[k] = NULL;
  }
  n_env = (int)n;
  Py_XSETREF(config_fn, Py_NewRef(fn));
  Py_CLEAR(config_cached);
  Py_RETURN_NONE;
}

/* launch(plan, entry, grid, tg, config, args, extra, enter_hook, metadata) -> None | result tuple
   (`extra`: a tuple of the buffers the backend adds, bound by slots with pos -1, -2, ...)
   config: (host_threads, stack_kb, schedule, seed, ub_mode, timeout_ms), or None: from the environment
   (set_config_source). */
static PyObject *launch(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
  if (argc != 9)
    return PyErr_Format(PyExc_TypeError, "launch() takes 9 arguments (%zd given)", argc);
  if (!rt_begin)
    return PyErr_Format(PyExc_RuntimeError, "launch: bind_runtime() was not called");
  plan_t *p = PyCapsule_GetPointer(argv[0], PLAN_CAPSULE);
  if (!p)
    return NULL;
  unsigned long long entry = PyLong_AsUnsignedLongLong(argv[1]);
  if (entry == (unsigned long long)-1 && PyErr_Occurred())
    return NULL;
  if (entry == 0)
    return PyErr_Format(PyExc_ValueError, "kernel '%s': no entry point", p->kernel_name);
  tt_launch_desc desc;
  memset(&desc, 0, sizeof desc);
  if (dims3(argv[2], desc.grid, "grid") < 0 || dims3(argv[3], desc.tg, "threadgroup") < 0)
    return NULL;
  unsigned long long seed;
  PyObject *config = argv[4] == Py_None ? env_config(p->kernel_name) : Py_NewRef(argv[4]);
  if (!config)
    return NULL;
  int config_ok = PyTuple_Check(config) &&
                  PyArg_ParseTuple(config, "IIIKII;launch: config is (host_threads, stack_kb, schedule, seed, "
                                   "ub_mode, timeout_ms)", &desc.host_threads, &desc.stack_kb, &desc.schedule, &seed,
                                   &desc.ub_mode, &desc.timeout_ms);
  Py_DECREF(config);
  if (!config_ok) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "launch: config must be a tuple");
    return NULL;
  }
  desc.seed = seed;
  PyObject *args = argv[5], *extra = argv[6], *enter_hook = argv[7], *metadata = argv[8];
  if (!PyTuple_Check(args))
    return PyErr_Format(PyExc_TypeError, "launch: args must be a tuple");
  Py_ssize_t nargs = PyTuple_GET_SIZE(args);

  tt_buffer_desc descs[TT_EMU_MAX_SLOTS + 1];
  scalar_bytes scalars[TT_EMU_MAX_SLOTS + 1];
  PyObject *keep[TT_EMU_MAX_SLOTS + 1];
  Py_ssize_t nkeep = 0;
  PyObject *ret = NULL;
  for (Py_ssize_t i = 0; i < p->n; ++i) {
    slot_spec *s = &p->slots[i];
    tt_buffer_desc *d = &descs[i];
    memset(d, 0, sizeof *d);
    d->slot = s->slot;
    d->name = s->name;
    PyObject *v;
    if (s->pos < 0) {
      Py_ssize_t k = -1 - s->pos;
      if (!PyTuple_Check(extra) || k >= PyTuple_GET_SIZE(extra)) {
        PyErr_Format(PyExc_IndexError, "kernel '%s': parameter '%s' is added buffer %zd, but the launch adds %zd",
                     p->kernel_name, s->name, k, PyTuple_Check(extra) ? PyTuple_GET_SIZE(extra) : (Py_ssize_t)0);
        goto done;
      }
      v = PyTuple_GET_ITEM(extra, k);
    } else if (s->pos < nargs) {
      v = PyTuple_GET_ITEM(args, s->pos);
    } else {
      PyErr_Format(PyExc_IndexError, "kernel '%s': parameter '%s' is argument %zd, but the launch has %zd",
                   p->kernel_name, s->name, s->pos, nargs);
      goto done;
    }
    int got = 0;
    if ((s->kind == KIND_POINTER || s->kind == KIND_ANY) && p->tensor_type &&
        PyObject_TypeCheck(v, (PyTypeObject *)p->tensor_type)) {
      uint64_t host, nbytes;
      uint32_t itemsize;
      got = bind_tensor(v, &host, &nbytes, &itemsize);
      if (got == 1) {
        d->host = (void *)(uintptr_t)host;
        d->nbytes = nbytes;
        d->flags = s->readonly ? TT_BUF_READONLY : 0;
        d->elem_size = s->elem_size ? s->elem_size : itemsize;
      }
    } else if (s->kind == KIND_SCALAR) {
      uint32_t n;
      got = pack_scalar(v, s->scalar, &scalars[i], &n);
      if (got == 1) {
        d->host = scalars[i].bytes;
        d->nbytes = n;
        d->flags = (s->readonly ? TT_BUF_READONLY : 0) | TT_BUF_SCALAR;
        d->elem_size = n;
      }
    }
    if (got < 0)
      goto done;
    if (got == 0) {
      if (call_hook(p, i, v, d, &keep[nkeep]) < 0)
        goto done;
      ++nkeep;
    }
  }
  desc.entry = (tt_entry_fn)(uintptr_t)entry;
  desc.kernel_name = p->kernel_name;
  desc.nbuffers = (uint32_t)p->n;
  desc.buffers = descs;
  if (enter_hook != Py_None) {
    PyObject *r = PyObject_CallOneArg(enter_hook, metadata);
    if (!r)
      goto done;
    Py_DECREF(r);
  }
  {
    tt_launch_result res;
    memset(&res, 0, sizeof res);
    int status = run_launch(&desc, &res);
    if (status == INT32_MIN)
      goto done;
    if (status == 0 && res.nevents == 0)
      ret = Py_NewRef(Py_None);
    else
      ret = result_tuple(status, &res);
  }
done:
  for (Py_ssize_t k = 0; k < nkeep; ++k)
    Py_DECREF(keep[k]);
  return ret;
}

/* pack_scalar(value, type) -> bytes | None: what a launch binds for `value` as scalar type SCALAR_TYPES[...]
   (None: the hook would bind it). For the tests that pin this fast path to abi/scalars.py. */
static PyObject *pack_scalar_py(PyObject *self, PyObject *args) {
  PyObject *v;
  unsigned int t;
  if (!PyArg_ParseTuple(args, "OI:pack_scalar", &v, &t))
    return NULL;
  if (t >= S_COUNT)
    return PyErr_Format(PyExc_ValueError, "pack_scalar: no scalar type %u", t);
  scalar_bytes b;
  uint32_t n = 0;
  int got = pack_scalar(v, t, &b, &n);
  if (got < 0)
    return NULL;
  if (got == 0)
    Py_RETURN_NONE;
  return PyBytes_FromStringAndSize((const char *)b.bytes, n);
}

/* bind_runtime(begin, wait, cancel, abi_version): addresses of the loaded runtime's functions. */
static PyObject *bind_runtime(PyObject *self, PyObject *args) {
  unsigned long long b, w, c, a;
  if (!PyArg_ParseTuple(args, "KKKK:bind_runtime", &b, &w, &c, &a))
    return NULL;
  if (!b || !w || !c || !a)
    return PyErr_Format(PyExc_ValueError, "bind_runtime: a null function address");
  int abi = ((abi_version_fn)(uintptr_t)a)();
  if (abi != TT_EMU_ABI_VERSION)
    return PyErr_Format(PyExc_RuntimeError,
                        "the emulator runtime has ABI %d, the launcher (launcher.c) was compiled for ABI %d", abi,
                        TT_EMU_ABI_VERSION);
  rt_begin = (launch_begin_fn)(uintptr_t)b;
  rt_wait = (launch_wait_fn)(uintptr_t)w;
  rt_cancel = (launch_cancel_fn)(uintptr_t)c;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind_runtime", bind_runtime, METH_VARARGS, "bind_runtime(begin, wait, cancel, abi_version)"},
    {"pack_scalar", pack_scalar_py, METH_VARARGS, "pack_scalar(value, type) -> bytes | None"},
    {"set_config_source", set_config_source, METH_VARARGS, "set_config_source(env_names, fn)"},
    {"make_plan", make_plan, METH_VARARGS, "make_plan(kernel_name, slots, tensor_type, hook) -> plan"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(plan, entry, grid, tg, config, args, extra, enter_hook, metadata) -> None | result"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "apple_launcher", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_apple_launcher(void) {
  if (!(str_is_cpu = PyUnicode_InternFromString("is_cpu")) ||
      !(str_data_ptr = PyUnicode_InternFromString("data_ptr")) ||
      !(str_shape = PyUnicode_InternFromString("shape")) || !(str_stride = PyUnicode_InternFromString("stride")) ||
      !(str_element_size = PyUnicode_InternFromString("element_size")) ||
      !(str_untyped_storage = PyUnicode_InternFromString("untyped_storage")) ||
      !(str_nbytes = PyUnicode_InternFromString("nbytes")))
    return NULL;
  PyObject *m = PyModule_Create(&module);
  if (!m)
    return NULL;
  if (PyModule_AddIntConstant(m, "ABI_VERSION", TT_EMU_ABI_VERSION) < 0 ||
      PyModule_AddIntConstant(m, "WAIT_SLICE_MS", WAIT_SLICE_MS) < 0 ||
      PyModule_AddIntConstant(m, "KIND_POINTER", KIND_POINTER) < 0 ||
      PyModule_AddIntConstant(m, "KIND_SCALAR", KIND_SCALAR) < 0 ||
      PyModule_AddIntConstant(m, "KIND_ANY", KIND_ANY) < 0 || PyModule_AddIntConstant(m, "KIND_HOOK", KIND_HOOK) < 0 ||
      PyModule_AddIntConstant(m, "MAX_SLOTS", TT_EMU_MAX_SLOTS) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  /* MSL name -> the fast path's packing (unsigned types take the values of the signed type of their width) */
  static const struct {
    const char *name;
    int type;
  } scalar_names[] = {{"bool", S_BOOL},   {"char", S_CHAR},    {"uchar", S_CHAR},      {"short", S_SHORT},
                      {"ushort", S_SHORT}, {"int", S_INT},      {"uint", S_INT},        {"long", S_LONG},
                      {"ulong", S_LONG},   {"half", S_HALF},    {"bfloat", S_BFLOAT},   {"float", S_FLOAT},
                      {"tt_double", S_DOUBLE}};
  PyObject *scalars = PyDict_New();
  if (!scalars) {
    Py_DECREF(m);
    return NULL;
  }
  for (size_t k = 0; k < sizeof scalar_names / sizeof scalar_names[0]; ++k) {
    PyObject *v = PyLong_FromLong(scalar_names[k].type);
    if (!v || PyDict_SetItemString(scalars, scalar_names[k].name, v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(scalars);
      Py_DECREF(m);
      return NULL;
    }
    Py_DECREF(v);
  }
  if (PyModule_AddObject(m, "SCALAR_TYPES", scalars) < 0) {
    Py_DECREF(scalars);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
