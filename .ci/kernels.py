"""Generated kernels, compiled (not linked, not run) by another compiler:
CI's check that the code generator's C builds for other targets (aarch64,
Windows by mingw-w64) and with other compilers.

    python .ci/kernels.py CC [--avx2]

For a few programs (a European call, micrograd's demo network, a program of
parameters, one of every op) and every CPU shape (tapead.codegen.SHAPES),
writes the kernel's translation units and compiles each with CC (its argv,
split as a shell would), the flags tapead builds kernels with
(tapead.native.opt_flags, tapead.codegen.build.flags) and -Werror=implicit-
function-declaration; --avx2 as on a CPU with AVX2.  Exit status 1, with the
compiler's messages, if any unit fails.
"""
import os
import shlex
import subprocess
import sys
import tempfile

import tapead
import tapead.nn
from tapead import Value, codegen, demo, native
from tapead.codegen import build


def programs():
    """name -> a Program (native=False: only its code is generated here)."""
    out = {}
    S0, K, r, sig, T = (Value(v) for v in (100.0, 105.0, 0.03, 0.2, 1.0))
    z = Value(0.0)
    ST = S0 * ((r - 0.5 * sig * sig) * T + sig * T.sqrt() * z).exp()
    out["european"] = tapead.compile([(ST - K).relu() * (-r * T).exp()], [z], wrt=[S0, sig, r], native=False)
    model, _, _ = demo.setup(tapead.nn)
    x0, x1, yi = Value(0.0), Value(0.0), Value(1.0)
    hinge = (1 + (-yi) * model([x0, x1])).relu()
    out["demo"] = tapead.compile([hinge], [x0, x1, yi], wrt=model.parameters(), native=False)
    ws = [Value(0.01 * k) for k in range(40)]
    loss = sum((w * w).tanh() for w in ws) * tapead.dot(ws, ws[::-1]).exp()
    out["parameters"] = tapead.compile([loss], [], wrt=ws, native=False)
    a, b = Value(0.7), Value(1.3)
    y = (a * b + a / b - b ** 2.5 + abs(a) + (-a).relu() + a.sqrt() + b.log() + a.log1p() + a.sigmoid()
         + a.sin() * b.cos() + tapead.maximum(a, b) - tapead.minimum(a, b) + 1.3 ** a + a ** b).tanh()
    out["every op"] = tapead.compile([y], [a], wrt=[a, b], native=False)
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cc = shlex.split(sys.argv[1])
    avx2 = "--avx2" in sys.argv[2:]
    os.environ["CC"] = sys.argv[1]       # (is_gcc asks the compiler CC names)
    gcc = build.is_gcc()
    include = [a for d in codegen.include_dirs() for a in ("-I", d)]
    failed = 0
    n = 0
    with tempfile.TemporaryDirectory() as d:
        for name, prog in programs().items():
            code = codegen.Code.of(prog)
            for shape in codegen.SHAPES.values():
                units, _ = codegen.source(code, shape, 2)
                opt = native.opt_flags(shape, gcc, avx2)
                for i, text in enumerate(units):
                    src = os.path.join(d, f"{name.replace(' ', '_')}-{shape.name}-{i}.c")
                    with open(src, "w") as f:
                        f.write(text)
                    argv = cc + build.flags(opt) + ["-Werror=implicit-function-declaration", *include,
                                                    "-c", src, "-o", src + ".o"]
                    r = subprocess.run(argv, capture_output=True, text=True)
                    n += 1
                    if r.returncode != 0:
                        failed += 1
                        print(f"FAILED: {name}, {shape.name} shape, unit {i}: {' '.join(argv)}\n{r.stderr}")
    print(f"{n - failed} of {n} kernel units compiled with {sys.argv[1]} ({'GCC' if gcc else 'not GCC'}"
          f"{', -mavx2' if avx2 else ''})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
