"""Tape lifetime: deep chains, self-reclaiming training loops, and handles
that can never see a reclaimed or reused slot."""
import gc
import random

import pytest

import tapead
from tapead import Value

from conftest import assert_every_use_refused, on_fresh_tape, release_garbage

SEG = 2048


def test_stats_keys():
    st = tapead.tape_stats()
    assert set(st) == {"nodes", "capacity", "bytes", "segments", "collections", "limit",
                       "peak_nodes"}
    assert st["capacity"] == st["segments"] * SEG


def test_deep_chain_of_a_million_ops():
    x = Value(1.0)
    s = x
    for _ in range(500_000):
        s = (s + x) * 1.0          # two recorded ops per iteration
    assert s.data == 500_001.0
    s.backward()
    assert x.grad == 500_001.0     # d/dx of (n+1) x
    st = tapead.tape_stats()
    assert st["nodes"] >= 1_000_000
    del s, x


def test_deep_chain_product_closed_form():
    x = Value(0.5)
    s = Value(1.0)
    n = 200_000
    c = 1.000001
    for _ in range(n):
        s = s * c + x * 0.0         # three ops, a real fan-in of x at every step
    s.backward()
    assert s.data == pytest.approx(c ** n, rel=1e-9)
    assert x.grad == 0.0


def _train(steps, seed=0):
    """A tiny micrograd-style loop: fresh graph every step, no tape API calls."""
    rnd = random.Random(seed)
    w, b = Value(rnd.uniform(-1, 1)), Value(0.0)
    most = 0
    loss = None
    for k in range(steps):
        x = rnd.uniform(-1, 1)
        y = 3.0 * x - 0.5
        loss = (w * x + b - y) ** 2          # 4 nodes per step
        w.grad = 0
        b.grad = 0
        loss.backward()
        w.data -= 0.1 * w.grad
        b.data -= 0.1 * b.grad
        release_garbage(every=SEG)           # this step's graph is garbage now
        if k % 50 == 0:
            most = max(most, tapead.tape_stats()["nodes"])
    return w, b, most


def test_training_loop_reclaims_tape():
    on_fresh_tape(_training_loop_reclaims_tape)


def _training_loop_reclaims_tape():
    base = tapead.tape_stats()["nodes"]
    w, b, most = _train(10_000)
    step = 4
    # live: the parameters' segment, the last step's and the current one.  The
    # tape collects when its segment count doubles since the last collection
    # (amortised O(1)), so it may hold twice the live segments: a few segments
    # in all, never the 10,000 steps' 40,000 nodes.
    assert most - base <= 8 * step + 8 * SEG, tapead.tape_stats()
    assert tapead.tape_stats()["collections"] > 0
    assert w.data == pytest.approx(3.0, abs=1e-3) and b.data == pytest.approx(-0.5, abs=1e-3)


def test_training_loop_with_a_multi_segment_step():
    on_fresh_tape(_training_loop_with_a_multi_segment_step)


def _training_loop_with_a_multi_segment_step():
    """One step records ~6,400 nodes (three segments); 40 steps stay within a
    small multiple of one step."""
    rnd = random.Random(1)
    ws = [Value(rnd.uniform(-1, 1)) for _ in range(20)]
    base = tapead.tape_stats()["nodes"]
    most = 0
    step_nodes = None
    for k in range(40):
        n0 = tapead.tape_stats()["nodes"]
        loss = Value(0.0)
        for i in range(200):
            x = rnd.uniform(-1, 1)
            act = sum((w * x for w in ws[:14]), ws[19]).tanh()
            release_garbage(every=2 * SEG)   # Values that point into the tape die as the loop runs
            loss = loss + (act - x) ** 2
        if k == 0:
            step_nodes = tapead.tape_stats()["nodes"] - n0
        for w in ws:
            w.grad = 0
        loss.backward()
        for w in ws:
            w.data -= 0.01 * w.grad
        most = max(most, tapead.tape_stats()["nodes"])
    assert 6000 < step_nodes < 7000
    assert most - base <= 3 * step_nodes + 4 * SEG, (step_nodes, tapead.tape_stats())


def test_collect_reclaims_now():
    import gc
    # (no cyclic collection while it runs: one could free earlier tests'
    # Values in the middle, and the tape's own collection reclaim them)
    gc.collect()
    gc.disable()
    try:
        release_garbage()
        tapead.collect()
        before = tapead.tape_stats()["nodes"]
        xs = [Value(float(i)) for i in range(5 * SEG)]
        assert tapead.tape_stats()["nodes"] >= before + 5 * SEG
        del xs
        release_garbage()
        freed = tapead.collect()
        assert freed >= 4
        assert tapead.tape_stats()["nodes"] <= before + SEG
    finally:
        gc.enable()


def test_old_handle_survives_churn():
    keep = Value(2.5)
    kept_expr = keep * keep + 1            # an intermediate kept from early on
    keep.grad = 7.0
    collections = tapead.tape_stats()["collections"]
    for r in range(60):
        junk = [Value(float(i)) * 2 for i in range(SEG)]   # two segments per round
        del junk
        if r % 10 == 0:
            tapead.collect()
    st = tapead.tape_stats()
    assert st["collections"] > collections
    assert keep.data == 2.5 and keep.grad == 7.0
    assert kept_expr.data == 7.25
    keep.grad = 0
    kept_expr.backward()
    assert keep.grad == 5.0 and kept_expr.grad == 1.0
    y = kept_expr * keep                   # new ops on old handles work too
    y.backward()
    assert y.data == 7.25 * 2.5 and keep.grad == 5.0 + (2 * 2.5 * 2.5 + 7.25)


def test_handle_values_distinct_after_slot_reuse():
    """Slots freed by the collector are reused; every live handle still reads its own node."""
    live = []
    for r in range(40):
        batch = [Value(float(r * 10_000 + i)) for i in range(SEG)]
        live.append(batch[r])                 # keep one node of each segment
        del batch
        if r % 5 == 0:
            tapead.collect()
    gc.collect()
    tapead.collect()
    for r, v in enumerate(live):
        assert v.data == float(r * 10_000 + r)
        assert v.grad == 0.0


@pytest.mark.parametrize("bogus", [0, 1, 12345, 2**31 - 1, 2**40 + 17, 2**62, -1, -12345,
                                   -(2**63)])
@pytest.mark.skipif(tapead.FRONT != "cffi", reason="a C Value's node cannot be set from Python")
def test_forged_handles_raise_tape_error(bogus):
    v = Value.__new__(Value)
    v._i = bogus
    v._t = None
    assert_every_use_refused(v, Value(1.0), tapead.TapeError)


@pytest.mark.parametrize("make", [lambda: Value.__new__(Value), lambda: object.__new__(Value)])
def test_a_value_never_initialised_refuses_every_use(make):
    """Made without __init__: a clear error on every use, on either front,
    and no memory touched that it does not own."""
    try:
        v = make()
    except TypeError:   # the C type refuses object.__new__ outright
        assert tapead.FRONT == "cpython"
        return
    assert_every_use_refused(v, Value(1.0), TypeError)


@pytest.mark.skipif(tapead.FRONT != "cffi", reason="a C Value's node cannot be set from Python")
def test_forged_handle_to_an_unused_slot_of_this_tape():
    """Refs past the nodes of a segment in use, to a slot with no segment,
    and past every slot, on a new thread's tape (one node): each refused.
    (On a new tape, so what earlier tests left alive cannot fill the slots.)"""
    import threading
    failures = []

    done = []

    def probe():
        try:
            real = Value(1.0)
            tag, slot = real._i >> 32, (real._i & 0xFFFFFFFF) >> 11
            for ref in ((slot << 11) | 2047, ((slot + 1) << 11) | 5, (4000 << 11) | 5, 0xFFFFFFFF):
                v = Value.__new__(Value)
                v._i = (tag << 32) | ref
                v._t = None
                for use in (lambda: v.data, lambda: v * real):
                    try:
                        use()
                        failures.append(f"ref {ref:#x}: not refused")
                    except tapead.TapeError:
                        pass
            done.append(True)
        except BaseException as e:            # anything else fails the test, not just the thread
            failures.append(repr(e))
    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert done and not failures, failures
