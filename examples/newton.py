"""Newton's method on the Rosenbrock function with tapead.grad and tapead.hessian.

    python examples/newton.py

From (-1.2, 1) it reaches the minimum (1, 1) to 1e-10 in a few iterations,
printing each step.  Each step records f once and asks C for the gradient
and the Hessian (no Python walk over the graph).
"""
import numpy as np

from tapead import Value, grad, hessian


def rosenbrock(x, y):
    return (1 - x) ** 2 + 100 * (y - x ** 2) ** 2


def newton(p, tol=1e-10, max_iter=30):
    p = np.array(p, dtype=float)
    for k in range(max_iter):
        xs = [Value(float(c)) for c in p]
        f = rosenbrock(*xs)
        g = np.array(grad(f, xs))
        H = hessian(f, xs)
        print(f"step {k:2d}  x = ({p[0]: .12f}, {p[1]: .12f})  f = {f.data:.3e}  |grad| = {np.linalg.norm(g):.3e}")
        if np.max(np.abs(p - 1.0)) < tol and np.linalg.norm(g) < tol:
            return p, k
        p = p - np.linalg.solve(H, g)
    raise RuntimeError("Newton did not converge")


if __name__ == "__main__":
    p, k = newton([-1.2, 1.0])
    print(f"converged to ({float(p[0])!r}, {float(p[1])!r}) after {k} Newton steps")
    assert np.max(np.abs(p - 1.0)) < 1e-10 and k < 30
