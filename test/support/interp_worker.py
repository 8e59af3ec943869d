"""Runs generated Triton kernels under Triton's own interpreter (``TRITON_INTERPRET=1``).

The interpreter has to be switched on before ``triton`` is imported: the helpers of
``triton.language.standard`` (``tl.sum``'s combine function, ``tl.sigmoid``, ``tl.cumsum``, ...) are
decorated at import time and only become interpretable functions when the variable is already set.
So the interpreter side of the differential fuzzer runs in a separate process, started with
``TRITON_INTERPRET=1``.

Two ways to use it:

* one shot: ``TRITON_INTERPRET=1 python interp_worker.py MODULE.py JOB.pt RESULT.pt``
* server (what the fuzzer does): ``python interp_worker.py --serve`` reads one JSON request per line
  on stdin, ``{"module": path, "kernel": name, "job": path, "result": path}``, and answers one JSON line
  on its protocol channel (the original stdout), ``{"ok": true}`` or ``{"ok": false, "error": text}``.

A job file (``torch.save``) holds ``{"args": [...], "kwargs": {...}, "grid": (...), "outputs": [i, ...]}``:
positional kernel arguments (tensors or Python scalars), constexpr keyword arguments, the launch grid
and the indices of the arguments whose final contents are the result. The result file holds the
list of those tensors after the launch.
"""
import importlib.util
import json
import os
import sys
import traceback
import warnings

os.environ["TRITON_INTERPRET"] = "1"

_modules = {}


def _load(path: str):
    mod = _modules.get(path)
    if mod is None:
        name = "fuzz_interp_" + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        _modules[path] = mod
    return mod


def run_job(module: str, kernel: str, job: str, result: str) -> None:
    import numpy as np
    import torch
    fn = getattr(_load(module), kernel)
    spec = torch.load(job, weights_only=False)
    args = spec["args"]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        fn[tuple(spec["grid"])](*args, **spec["kwargs"])
    torch.save([args[i] for i in spec["outputs"]], result)


def serve() -> None:
    # Keep the protocol channel private: anything the kernel or a library prints goes to stderr.
    proto = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    import triton  # noqa: F401  (import once, with the interpreter on)
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        try:
            run_job(req["module"], req["kernel"], req["job"], req["result"])
            reply = {"ok": True}
        except BaseException as e:  # report, keep serving
            reply = {"ok": False, "error": "".join(traceback.format_exception(e))[-6000:]}
        proto.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    elif len(sys.argv) == 4:
        run_job(sys.argv[1], "kernel", sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
