"""A representative workout of the C core, small enough for valgrind memcheck.

Records, sweeps, reclaims (many segments), errors, no_grad, optim, jvp,
wengert, bulk interop and a Program; run by .ci/run under valgrind.
"""
import numpy as np

import tapead
import tapead.nn
from tapead import demo
from tapead.optim import SGD, Adam

model, X, y = demo.setup(tapead.nn)
opt = SGD(model.parameters(), lr=0.5, momentum=0.9)
for k in range(2):
    loss, _ = demo.loss(model, X[:20], y[:20], tapead.Value)
    opt.zero_grad()
    loss.backward()
    opt.step()
adam = Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
adam.step()

s, x = tapead.Value(1.0), tapead.Value(0.5)
for _ in range(30000):          # ~30 segments: collections and slot reuse
    s = s * 0.999 + x
s.backward()
for bad in (lambda: x / 0, lambda: (x - 1).log(), lambda: (x * 2000).exp(), lambda: (-x) ** 0.5):
    try:
        bad()
    except (ZeroDivisionError, ValueError, OverflowError):
        pass
with tapead.no_grad():
    z = [(x * i).tanh() for i in range(5000)]
w = z[3] * x + x.sin() * x.cos() + x.sqrt() + abs(x) + tapead.maximum(x, 0.2) + x.sigmoid()
w.backward()
tapead.jvp(w, [x], [1.0])
str(tapead.wengert(w, [x], [1.0]))
vs = tapead.values(np.linspace(0, 1, 5000))
tapead.data(vs)
tapead.grads(vs)
tapead.to_dot(w)
# a Program: made, run (on the CPython front one C call over the arrays,
# csrc/python/program_call.c), a failing row, pickled and run again, then freed
u, v = tapead.Value(0.3), tapead.Value(-0.2)
prog = tapead.compile([(u * v).exp() + u.relu()], [u], wrt=[u, v], native=False)
prog.grad(np.linspace(-1, 1, 300).reshape(-1, 1))
prog.grad(np.linspace(-1, 1, 300).reshape(-1, 1), per_sample=True, threads=2)
try:
    prog(np.array([[0.5], [-1e6]]))
    raise AssertionError("the row should fail")
except OverflowError:
    pass
import pickle
pickle.loads(pickle.dumps(prog)).grad(np.ones((3, 1)), params=np.array([0.5]))
del s, z, vs, prog
tapead.collect()
assert tapead._c.lib.ta_validate() == 0
print("valgrind smoke ok", tapead.tape_stats()["nodes"])
