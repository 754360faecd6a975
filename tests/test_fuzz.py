"""A fuzzer: random programs over every spelling of every op
(tests/opcases.py), run on tapead and on plain Python floats (values and
exceptions), then differentiated by a small reference reverse mode written
here, against tapead's gradients bit for bit."""
import contextlib
import math
import os
import sys

import pytest
from hypothesis import given, settings, strategies as st

import tapead
import tapead.nn
from tapead import Value
from tapead._c import lib
from conftest import same
from opcases import BY_OP, FORMS as FORMS_BY_NAME

INF, NAN = math.inf, math.nan


def nodes():
    return tapead.tape_stats()["nodes"]


# ================================================================= fuzzing
# Random programs over every spelling of every op (tests/opcases.py), run on
# tapead and mirrored on plain Python floats (values and exceptions), then
# differentiated by a small reference reverse mode written here in plain
# Python over the op cases' closed-form partials, in micrograd's forms and
# conventions: relu'(0) = 0, |x|'(0) = 0, max/min split a tie evenly,
# d(b**y)/dy = 0 at b == 0 with y >= 0 (PyTorch's limit).

SPECIALS = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, 1e308, -1e308, 5e-324, -5e-324,
            1e-300, 700.0, -745.0, NAN, INF, -INF]
consts = st.one_of(st.sampled_from(SPECIALS), st.floats(-4, 4),
                   st.floats(allow_nan=True, allow_infinity=True))

FORMS = sorted(FORMS_BY_NAME)     # every spelling of every op, from the op cases


def reference_backward(nodes_, root):
    """nodes_: (form, input indices, constant, value) in creation order. Returns adjoints."""
    adj = [0.0] * len(nodes_)
    reached = [False] * len(nodes_)
    reached[root] = True
    adj[root] = 1.0
    for k in range(root, -1, -1):
        if not reached[k]:
            continue
        form, ins, c, r = nodes_[k]
        if form in ("leaf", "const") or BY_OP[FORMS_BY_NAME[form].op].stop:
            continue                                  # (detach: nothing flows back, not even 0 * g)
        g = adj[k]
        vals = [nodes_[i][3] for i in ins]
        x = vals[0]
        y = vals[1] if len(vals) > 1 else 0.0
        d = FORMS_BY_NAME[form].d(x, y, c, r)
        for i, di in zip(ins, d):
            if nodes_[i][0] == "const":           # a no_grad result: a constant here
                continue
            if not reached[i]:
                reached[i] = True
                if nodes_[i][0] != "leaf":
                    adj[i] = 0.0
            adj[i] += di * g
    return adj


FUZZ = {"programs": 0, "ops": 0, "raised": 0}
FUZZ_EXAMPLES = int(os.environ.get("TAPEAD_FUZZ_EXAMPLES", "1500"))


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(leaves=st.lists(consts, min_size=1, max_size=4),
       prog=st.lists(st.tuples(st.sampled_from(FORMS), st.integers(0, 63), st.integers(0, 63),
                               consts, st.integers(0, 7)), min_size=1, max_size=14),
       root_pick=st.integers(0, 63))
def test_fuzz_every_op_against_python_and_reference_gradients(leaves, prog, root_pick):
    """One op in eight runs under no_grad: its result must then act as a constant."""
    with _pypy_jit_off():
        _fuzz_one(leaves, prog, root_pick)


@contextlib.contextmanager
def _pypy_jit_off():
    """PyPy 7.3.11's JIT aborts the process (SIGABRT inside libpypy, above a
    ta_op1 frame) in about one full fuzz run in three; with the JIT off the
    same examples pass, and the CPython runs, under ASan too, find nothing in
    tapead's C.  So on PyPy this test runs interpreted."""
    try:
        import pypyjit  # type: ignore[import-not-found]
    except ImportError:
        yield
        return
    pypyjit.set_param("off")
    try:
        yield
    finally:
        pypyjit.set_param("default")


def _fuzz_one(leaves, prog, root_pick):
    tv = [Value(x) for x in leaves]                  # tapead handles, one per node
    ref = [("leaf", (), 0.0, x) for x in leaves]     # mirrored nodes
    pool = list(range(len(tv)))                      # nodes with a handle of ours
    for form, i, j, c, mode in prog:
        f = FORMS_BY_NAME[form]
        ng = mode == 0
        ia, ib = pool[i % len(pool)], pool[j % len(pool)]
        a, b = tv[ia], tv[ib]
        x, y = ref[ia][3], ref[ib][3]
        try:
            want = f.py(x, y, c)
        except (ArithmeticError, ValueError) as e:
            want = e
        n0 = nodes()
        try:
            if ng:
                with tapead.no_grad():
                    got = f.ta(a, b, c)
            else:
                got = f.ta(a, b, c)
        except (ArithmeticError, ValueError) as e:
            got = e
        FUZZ["ops"] += 1
        if ng and not f.leafc:                        # leafc: makes a tape leaf for c first
            assert nodes() == n0, (form, "no_grad recorded on the tape")
        if isinstance(want, Exception):
            FUZZ["raised"] += 1
            assert type(got) is type(want), (form, x, y, c, got, want)
            assert nodes() == n0, (form, "tape changed by a failed op")
            continue
        assert isinstance(got, Value), (form, x, y, c, got, want)
        assert same(got.data, want), (form, x, y, c, got.data, want)
        if ng:                                        # a constant for the graph
            ref.append(("const", (), 0.0, want))
            pool.append(len(tv))
            tv.append(got)
            continue
        if f.leafc:                                   # the constant became a leaf first
            ref.append(("leaf", (), 0.0, c))
            tv.append(None)                           # its handle is internal
            ib = len(ref) - 1
        ins = (ia, ib) if f.nargs == 2 or f.leafc else (ia,)
        if f.leafc == "before":
            ins = (ib, ia)                            # minimum(c, a): c is the first input
        ref.append((form, ins, c, want))              # c as spelled: f.d reads it so
        pool.append(len(tv))
        tv.append(got)
    # a backward pass from a chosen node, compared with the reference on every node
    root = pool[root_pick % len(pool)]
    if ref[root][0] == "const":
        with pytest.raises(tapead.TapeadError):
            tv[root].backward()
        root = 0                                      # a leaf of the program instead
    tv[root].backward()
    want_adj = reference_backward(ref, root)
    for k in pool:
        assert same(tv[k].grad, want_adj[k]), (k, ref[k], tv[k].grad, want_adj[k])
    assert lib.ta_validate() == 0
    FUZZ["programs"] += 1


def teardown_module(module):
    if FUZZ["programs"]:
        sys.stderr.write(f"\nfuzz: {FUZZ['programs']} programs, {FUZZ['ops']} ops, "
                         f"{FUZZ['raised']} raising\n")
