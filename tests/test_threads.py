"""Each thread records on its own tape: foreign Values are refused, and
concurrent training gives exactly the results of sequential training."""
import random
import sys
import threading

import pytest

import tapead
from tapead import Value

from conftest import assert_every_use_refused, on_fresh_tape


def test_values_from_another_thread_raise_tape_error():
    foreign = on_fresh_tape(lambda: [Value(2.0), Value(3.0) * 4])   # thread has ended
    mine = Value(1.0)
    for v in foreign:
        assert_every_use_refused(v, mine, tapead.TapeError)
    before = tapead.tape_stats()["nodes"]
    assert mine.data == 1.0
    del foreign   # the foreign tokens die in this thread: no effect on this tape
    assert tapead.tape_stats()["nodes"] == before
    y = mine * 5
    y.backward()
    assert mine.grad == 5.0


def test_this_threads_values_refused_in_a_live_other_thread():
    mine = Value(2.0)
    w = mine * 3

    def use():
        errors = 0
        for f in (lambda: mine.data, lambda: w + 1, lambda: w.backward(), lambda: Value(1.0) * mine):
            try:
                f()
            except tapead.TapeError:
                errors += 1
        return errors
    assert on_fresh_tape(use) == 4
    w.backward()
    assert (w.data, mine.grad) == (6.0, 3.0)


def train(seed, steps=40):
    """A tiny MLP (2-4-1, tanh) trained by SGD; returns loss history and weights."""
    rnd = random.Random(seed)
    w1 = [[Value(rnd.uniform(-1, 1)) for _ in range(2)] for _ in range(4)]
    b1 = [Value(0.0) for _ in range(4)]
    w2 = [Value(rnd.uniform(-1, 1)) for _ in range(4)]
    b2 = Value(0.0)
    params = [p for row in w1 for p in row] + b1 + w2 + [b2]
    data = [((rnd.uniform(-1, 1), rnd.uniform(-1, 1)), rnd.choice((-1.0, 1.0))) for _ in range(16)]
    losses = []
    for k in range(steps):
        loss = 0
        for (x0, x1), y in data:
            h = [(w[0] * x0 + w[1] * x1 + b).tanh() for w, b in zip(w1, b1)]
            out = sum((wi * hi for wi, hi in zip(w2, h)), b2)
            loss = loss + (1 + -y * out).relu()
        loss = loss / len(data)
        for p in params:
            p.grad = 0
        loss.backward()
        lr = 0.5 - 0.4 * k / steps
        for p in params:
            p.data -= lr * p.grad
        losses.append(loss.data)
    return losses, [p.data for p in params], [p.grad for p in params]


def test_four_models_in_four_threads_equal_sequential():
    seeds = [11, 22, 33, 44]
    sequential = [train(s) for s in seeds]
    results = [None] * 4
    errors = []
    start = threading.Barrier(4)

    def worker(k):
        try:
            start.wait()
            results[k] = train(seeds[k])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)   # interleave the threads as finely as possible
    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert results == sequential
    assert sequential[0][0][-1] < sequential[0][0][0]   # it did learn


def test_threads_churning_segments_concurrently():
    """Threads that each cross many segments and collections at once stay correct."""
    def work(seed):
        rnd = random.Random(seed)
        keep = Value(rnd.uniform(1, 2))
        for _ in range(12):
            junk = [Value(rnd.uniform(-1, 1)) * keep for _ in range(2048)]
            del junk
        y = keep * keep
        y.backward()
        return keep.data, keep.grad, tapead.tape_stats()["collections"]

    expect = [work(s) for s in range(4)]
    out = [None] * 4

    def worker(k):
        out[k] = work(k)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (d, g, _), (d2, g2, c2) in zip(expect, out):
        assert (d, g) == (d2, g2) and g == 2 * d
        assert c2 > 0


def test_collect_in_another_thread_leaves_the_fast_path_intact():
    # the fast-path thread keeps its current segment token while another thread collects
    a = Value(1.5)
    b = a * 2.0                       # fast path, current segment token
    t = threading.Thread(target=lambda: (Value(3.0) * 2, tapead.collect()))
    t.start()
    t.join()
    c = b * 3.0                       # still the fast path: its Value must hold its segment
    assert tapead.FRONT == "cpython" or c._t.key == c._i >> tapead._c.SHIFT
    tapead.collect()
    assert (c.data, b.data) == (9.0, 3.0)
    c.backward()
    assert a.grad == 6.0
    assert tapead._c.lib.ta_validate() == 0


def _first_op_raises():
    with pytest.raises(ZeroDivisionError):
        Value(1.0) / 0          # Value(1.0) is a leaf: its token comes first
    return True


def _stats_only():
    return tapead.tape_stats()["nodes"] == 0


def _failed_c_call_only():
    from tapead import _c
    return _c.lib.ta_opc(tapead.engine.RDIVC, 0, 0.0, -2) < 0   # refused (id 0 is no node here), after C made the tape


@pytest.mark.parametrize("body", [_stats_only, _failed_c_call_only, _first_op_raises,
                                  lambda: (Value(2.0) ** 2).data == 4.0])
def test_a_finished_threads_tape_is_freed(body):
    """Every tape a thread made is freed once the thread and its Values are
    gone, also when the thread never made a Value (its only call was
    tape_stats(), or a C call that failed).  C frees a tape when its thread
    has exited (a thread-exit destructor, which runs just after join()
    returns) and its last hold is dropped."""
    import gc
    import time
    from tapead import _c
    gc.collect()   # earlier tests' threads and Values: let their tapes go first
    time.sleep(0.05)
    alive = _c.lib.ta_tapes_alive()
    for _ in range(5):
        assert on_fresh_tape(body)
    gc.collect()
    deadline = time.monotonic() + 5
    while _c.lib.ta_tapes_alive() > alive and time.monotonic() < deadline:
        time.sleep(0.001)
    assert _c.lib.ta_tapes_alive() <= alive   # 5 tapes made, 5 freed
