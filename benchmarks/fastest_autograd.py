"""The "Fastest Autograd in the West" workload (A. Rogozhnikov, 2023) as a tapead Program.

100 inputs, then n_ops operations cycling over the growing list of nodes:
softplus of the node 10 back (log1p(exp x): 2 nodes), the sum of four
nodes (nodes[-30:-10:5], 3 adds), a product of the nodes 20 and 10 back,
and a softmax of the last 4 nodes (each shifted by the recorded maximum,
exp, their sum, 4 divisions: 15 nodes).  At 10,000 ops: 52,600 nodes.
The output is the last node; gradients w.r.t. all 100 inputs.

    python benchmarks/fastest_autograd.py [n_ops]     # prints the program's size
"""
import sys

import tapead
from tapead import Value


def record(n_ops=10_000, n_in=100):
    """The workload's Program: outputs [last node], inputs and wrt the n_in leaves."""
    tapead.clear_guards()
    xs = [Value(float(i) / n_in) for i in range(n_in)]
    return tapead.compile(graph(xs, n_ops), xs, wrt=xs)


def graph(xs, n_ops):
    """The workload's last node, recorded from the leaves xs."""
    nodes = list(xs)
    for op in range(n_ops):
        k = op % 4
        if k == 0:
            nodes.append(nodes[-10].exp().log1p())
        elif k == 1:
            a, b, c, d = nodes[-30:-10:5]
            nodes.append(a + b + c + d)
        elif k == 2:
            nodes.append(nodes[-20] * nodes[-10])
        else:
            window = nodes[-4:]
            m = max(v.data for v in window)        # the shift: a constant, as softmax allows
            e = [(v - m).exp() for v in window]
            s = e[0] + e[1] + e[2] + e[3]
            nodes.extend(x / s for x in e)
    return nodes[-1]


if __name__ == "__main__":
    p = record(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
    print(p)
