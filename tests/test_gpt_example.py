"""examples/gpt.py: the microgpt-style model gives the same losses, to the
bit, on the example's plain-Python scalar Value (microgpt's autograd, the
independent reference), on tapead.Value as a drop-in, and on the fast path
(tapead.linear, tapead.dot and tapead.optim.Adam); and it samples names."""
import importlib.util
import os
import random

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, os.pardir, "examples", "gpt.py")


@pytest.fixture(scope="module")
def gpt():
    spec = importlib.util.spec_from_file_location("gpt_example", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TINY = dict(n_embd=8, n_head=2, block_size=8)


def test_dropin_and_fast_losses_are_the_references(gpt):
    runs = {m: gpt.train(m, 4, **TINY) for m in ("reference", "dropin", "fast")}
    ref = runs["reference"][1]
    assert len(ref) == 4 and ref[-1] < ref[0] + 1.0
    assert runs["dropin"][1] == ref
    assert runs["fast"][1] == ref
    # and the parameters after the last update, to the bit
    params = {m: [p.data for p in runs[m][0].params] for m in runs}
    assert params["dropin"] == params["reference"] == params["fast"]


def test_reference_value_gradients_match_tapead(gpt):
    """The reference Value's backward against tapead's on one expression."""
    import tapead
    for V in (gpt.RefValue, tapead.Value):
        a, b = V(1.5), V(-0.25)
        y = ((a * b + a) ** 2 + (b * -1).exp() + a.log() + (a * b).relu()) * b ** -1
        y.backward()
        if V is gpt.RefValue:
            ref = (y.data, a.grad, b.grad)
    assert (y.data, a.grad, b.grad) == ref


def test_samples_names(gpt):
    model, losses, _, decode, bos = gpt.train("fast", 3, **TINY)
    rng = random.Random(1)
    names = [decode(model.sample(bos, 0.5, rng)) for _ in range(3)]
    assert all(isinstance(n, str) and len(n) <= TINY["block_size"] for n in names)
    assert all(set(n) <= set("".join(gpt.make_names())) for n in names)


def test_the_compiled_step_gives_the_fast_paths_losses_and_names(gpt):
    """--compiled: the fast path's step recorded once per name length
    (tapead.jit, the tokens its inputs through tapead.take, the softmax's
    shift through tapead.detach): the same losses, parameters and samples,
    to the bit."""
    runs = {m: gpt.train(m, 12, **TINY) for m in ("fast", "compiled")}
    assert runs["compiled"][1] == runs["fast"][1]
    assert [p.data for p in runs["compiled"][0].params] == [p.data for p in runs["fast"][0].params]
    names = {}
    for m, (model, _, _, decode, bos) in runs.items():
        rng = random.Random(2)
        names[m] = [decode(model.sample(bos, 0.5, rng)) for _ in range(4)]
    assert names["compiled"] == names["fast"]


def test_minibatches_give_the_same_bits_whatever_the_threads(gpt):
    runs = [gpt.train("compiled", 3, batch=8, threads=t, **TINY)[1] for t in (1, 2, 3)]
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 3
