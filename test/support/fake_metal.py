"""A stand-in for `xcrun -sdk macosx metal` in the tests of tools/compile_with_xcrun.py (no Mac here): it takes the
same command line (`-std=metalX.Y -fno-fast-math -ferror-limit=0 [-Werror] -c SRC -o OUT`), knows -std=metal3.1 and
metal3.2 only (as Xcode 16's compiler), applies the one preprocessor rule the backend's sources depend on (an
`#error` under `#if __METAL_VERSION__ < N`), rejects sources holding `FAKE_REJECT` and warns on `FAKE_WARN`, with
diagnostics shaped as clang's (`file:line:col: error: message`)."""
import sys


def main(argv) -> int:
    std = next(a.split("=", 1)[1] for a in argv if a.startswith("-std="))
    werror = "-Werror" in argv
    src = argv[argv.index("-c") + 1]
    out = argv[argv.index("-o") + 1]
    if std not in ("metal3.1", "metal3.2"):
        print(f"error: invalid value '{std}' in '-std={std}'", file=sys.stderr)
        return 1
    version = {"metal3.1": 310, "metal3.2": 320}[std]
    lines = open(src).read().splitlines()
    errors, warnings = [], []
    below = None
    for n, line in enumerate(lines, 1):
        if line.startswith("#if __METAL_VERSION__ < "):
            below = version < int(line.rsplit(" ", 1)[1])
        elif line.startswith("#endif"):
            below = None
        elif line.startswith("#error") and below:
            errors.append((n, line[len("#error "):]))
        if "FAKE_REJECT" in line:
            errors.append((n, "use of undeclared identifier 'FAKE_REJECT'"))
        if "FAKE_WARN" in line:
            warnings.append((n, "unused variable 'FAKE_WARN' [-Wunused-variable]"))
    for n, msg in warnings:
        print(f"{src}:{n}:5: {'error' if werror else 'warning'}: {msg}", file=sys.stderr)
    for n, msg in errors:
        print(f"{src}:{n}:2: error: {msg}", file=sys.stderr)
    if errors or (warnings and werror):
        return 1
    open(out, "w").write("AIR\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
