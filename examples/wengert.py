"""The textbook example (Griewank & Walther, "Evaluating Derivatives", Table 1.2/1.3):

    y = ln(x1) + x1 * x2 - sin(x2)   at (x1, x2) = (2, 5)

Prints the Wengert list with the forward tangent along x1 (dy/dx1) and the
adjoints from a reverse sweep (dy/dx1, dy/dx2 on the leaf rows).
Run: python examples/wengert.py
"""
import tapead
from tapead import Value


def f(x1, x2):
    return tapead.log(x1) + x1 * x2 - tapead.sin(x2)


def main():
    x1, x2 = Value(2.0, label="x1"), Value(5.0, label="x2")
    y = f(x1, x2)
    table = tapead.wengert(y, inputs=[x1, x2], tangents=[1.0, 0.0])
    print(table)
    print()
    print(f"y       = {y.data:.3f}")
    print(f"dy/dx1  = {tapead.jvp(y, [x1, x2], [1.0, 0.0]):.3f}   (forward mode, one tangent sweep)")
    adj = {r["label"]: r["adjoint"] for r in table.rows if r["label"]}
    print(f"adjoints: dy/dx1 = {adj['x1']:.3f}, dy/dx2 = {adj['x2']:.3f}   (one reverse sweep)")


if __name__ == "__main__":
    main()
