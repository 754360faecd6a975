"""tapead.nn against micrograd.nn: same weights from the same seed, same
parameters() order, same shapes of outputs and reprs, and micrograd's demo
giving the same losses step by step."""
import gc
import random

import micrograd.engine
import micrograd.nn
import pytest

import tapead
import tapead.nn
from tapead import Value
from tapead import demo

from conftest import collect_all, move_and_reclaim, untouched

SHAPES = [(1, [1]), (2, [1]), (3, [4, 4, 1]), (2, [16, 16, 1]), (5, [3, 2]), (4, [7])]


def build(nn, nin, nouts, seed):
    random.seed(seed)
    return nn.MLP(nin, nouts)


@pytest.mark.parametrize("nin,nouts", SHAPES)
@pytest.mark.parametrize("seed", [0, 1, 1337])
def test_same_seed_same_weights_same_order(nin, nouts, seed):
    ours = build(tapead.nn, nin, nouts, seed)
    theirs = build(micrograd.nn, nin, nouts, seed)
    po, pt = ours.parameters(), theirs.parameters()
    assert len(po) == len(pt) == sum((a + 1) * b for a, b in zip([nin] + nouts, nouts))
    assert [p.data for p in po] == [p.data for p in pt]   # exact: same uniform draws, in order
    assert all(isinstance(p, tapead.Value) for p in po)
    # the generator was advanced by the same number of draws
    assert random.random() == (build(micrograd.nn, nin, nouts, seed), random.random())[1]


@pytest.mark.parametrize("nin,nouts", SHAPES)
def test_same_reprs(nin, nouts):
    ours, theirs = build(tapead.nn, nin, nouts, 3), build(micrograd.nn, nin, nouts, 3)
    assert repr(ours) == repr(theirs)
    for lo, lt in zip(ours.layers, theirs.layers):
        assert repr(lo) == repr(lt)
        for no, nt in zip(lo.neurons, lt.neurons):
            assert repr(no) == repr(nt)
    for nonlin in (True, False):
        assert repr(tapead.nn.Neuron(3, nonlin=nonlin)) == repr(micrograd.nn.Neuron(3, nonlin=nonlin))
    assert repr(tapead.nn.Layer(2, 3, nonlin=False)) == repr(micrograd.nn.Layer(2, 3, nonlin=False))


def test_module_parameters_and_zero_grad():
    assert tapead.nn.Module().parameters() == micrograd.nn.Module().parameters() == []
    n = tapead.nn.Neuron(3)
    assert n.parameters() == n.w + [n.b]
    assert n.b.data == 0.0
    m = build(tapead.nn, 2, [3, 1], 5)
    out = m([1.0, -2.0])
    out.backward()
    assert any(p.grad != 0 for p in m.parameters())
    m.zero_grad()
    assert all(p.grad == 0.0 for p in m.parameters())
    tapead.nn.Module().zero_grad()  # no parameters: fine


@pytest.mark.parametrize("nin,nouts", SHAPES)
def test_forward_and_gradients_match(nin, nouts):
    ours, theirs = build(tapead.nn, nin, nouts, 7), build(micrograd.nn, nin, nouts, 7)
    x = [0.3 * (i + 1) * (-1) ** i for i in range(nin)]
    yo = ours([tapead.Value(v) for v in x])
    yt = theirs([micrograd.engine.Value(v) for v in x])
    if nouts[-1] == 1:   # a bare Value, not a list of one
        assert isinstance(yo, tapead.Value) and isinstance(yt, micrograd.engine.Value)
        yo, yt = [yo], [yt]
    else:
        assert isinstance(yo, list) and len(yo) == len(yt) == nouts[-1]
    assert [v.data for v in yo] == pytest.approx([v.data for v in yt], rel=1e-12, abs=1e-15)
    so, st = sum(yo), sum(yt)
    so.backward()
    st.backward()
    assert [p.grad for p in ours.parameters()] == pytest.approx(
        [p.grad for p in theirs.parameters()], rel=1e-12, abs=1e-15)


def test_bare_value_from_one_output_layer():
    random.seed(0)
    layer = tapead.nn.Layer(3, 1)
    out = layer([1.0, 2.0, 3.0])
    assert type(out) is tapead.Value
    out2 = tapead.nn.Layer(3, 2)([1.0, 2.0, 3.0])
    assert type(out2) is list and len(out2) == 2


def test_inputs_may_be_plain_numbers():
    ours, theirs = build(tapead.nn, 2, [4, 1], 11), build(micrograd.nn, 2, [4, 1], 11)
    assert ours([0.5, -1.5]).data == pytest.approx(theirs([0.5, -1.5]).data, rel=1e-12, abs=1e-15)


def test_demo_matches_micrograd_step_by_step():
    """micrograd's notebook, three SGD steps, both from seed 1337."""
    model_o, X, y = demo.setup(tapead.nn)
    model_t, Xt, yt = demo.setup(micrograd.nn)
    assert (X == Xt).all() and (y == yt).all()
    assert [p.data for p in model_o.parameters()] == [p.data for p in model_t.parameters()]
    enabled = gc.isenabled()
    gc.disable()   # micrograd's node<->closure cycles make the collector dominate its step
    try:
        for k in range(3):
            lo, acc_o = demo.step(model_o, X, y, tapead.Value, k)
            lt, acc_t = demo.step(model_t, Xt, yt, micrograd.engine.Value, k)
            if k == 0:
                assert lo == 0.8958441028683222
                assert lt == 0.8958441028683222
            assert lo == pytest.approx(lt, rel=1e-9, abs=0)
            assert acc_o == acc_t
            assert [p.data for p in model_o.parameters()] == pytest.approx(
                [p.data for p in model_t.parameters()], rel=1e-9, abs=1e-12)
    finally:
        if enabled:
            gc.enable()
        gc.collect()


# ------------------------------------------- the fused Layer path (ta_layer)
def _op_by_op(layer, x):
    """micrograd's Layer.__call__, spelled out: every node through a Python operator."""
    out = [n(x) for n in layer.neurons]
    return out[0] if len(out) == 1 else out


@pytest.mark.parametrize("inputs", ["values", "floats", "mixed"])
def test_fused_layer_records_what_the_python_loop_records(inputs):
    random.seed(7)
    layer = tapead.nn.Layer(5, 4)
    raw = [0.3, -1.2, 2.5, 0.0, -0.7]
    x = {"values": [Value(v) for v in raw], "floats": raw,
         "mixed": [Value(v) if i % 2 else v for i, v in enumerate(raw)]}[inputs]
    fused = layer(x)
    loop = _op_by_op(layer, x)
    assert [v.data for v in fused] == [v.data for v in loop]
    for v in fused + loop:
        v.grad = 0.0
    s1 = sum(v * v for v in fused)
    s1.backward()
    g1 = [p.grad for p in layer.parameters()] + [v.grad for v in x if isinstance(v, Value)]
    layer.zero_grad()
    for v in x:
        if isinstance(v, Value):
            v.grad = 0.0
    s2 = sum(v * v for v in loop)
    s2.backward()
    g2 = [p.grad for p in layer.parameters()] + [v.grad for v in x if isinstance(v, Value)]
    assert g1 == g2  # bit for bit
    assert tapead._c.lib.ta_validate() == 0


def test_fused_layer_sees_changed_weights_and_flags():
    random.seed(3)
    layer = tapead.nn.Layer(3, 2)
    x = [Value(1.0), Value(2.0), Value(-3.0)]
    before = [v.data for v in layer(x)]
    layer.neurons[0].w[1] = Value(10.0)                # in-place list change
    layer.neurons[1].b = Value(-100.0)                 # attribute change
    after = [v.data for v in layer(x)]
    assert after == [v.data for v in _op_by_op(layer, x)]
    assert after != before
    layer.neurons[1].nonlin = False                     # mixed nonlin: op-by-op path
    assert [v.data for v in layer(x)] == [v.data for v in _op_by_op(layer, x)]
    assert layer(x)[1].data < 0                         # the linear neuron is not clipped


def test_fused_layer_falls_back_where_micrograd_would_differ():
    random.seed(5)
    layer = tapead.nn.Layer(3, 2)
    short = [Value(1.0), Value(2.0)]                    # zip truncates in micrograd
    assert [v.data for v in layer(short)] == [v.data for v in _op_by_op(layer, short)]
    with tapead.no_grad():                              # no recording: op-by-op path
        n0 = tapead.tape_stats()["nodes"]
        layer([1.0, 2.0, 3.0])
        assert tapead.tape_stats()["nodes"] == n0
    with pytest.raises(TypeError):
        layer([1.0, "2", 3.0])


def test_fused_layer_respects_a_patched_neuron(monkeypatch):
    random.seed(11)
    layer = tapead.nn.Layer(2, 2)
    x = [Value(0.5), Value(-1.5)]
    monkeypatch.setattr(tapead.nn.Neuron, "__call__", lambda self, x: Value(42.0))
    assert [v.data for v in layer(x)] == [42.0, 42.0]


def test_fused_layer_sees_state_restored_behind_its_back():
    """A cache kept by the fused path must not survive changes that bypass
    attribute assignment: layer.__dict__.update (restoring a checkpoint),
    vars(neuron)[...] = ..., list methods called on the base class."""
    random.seed(2)
    layer, restored = tapead.nn.Layer(2, 2), tapead.nn.Layer(2, 2)
    for p in restored.parameters():
        p.data = 100.0
    x = [1.0, 1.0]
    layer(x)                                            # the cache is built
    layer.__dict__.update(restored.__dict__)
    assert [v.data for v in layer(x)] == [300.0, 300.0] == [v.data for v in _op_by_op(layer, x)]
    n0 = layer.neurons[0]
    vars(n0)["w"] = [Value(1.0), Value(2.0)]
    vars(n0)["b"] = Value(0.5)
    assert layer(x)[0].data == 3.5
    list.__setitem__(n0.w, 1, Value(-4.0))
    assert layer(x)[0].data == 0.0                      # relu(0.5 + 1 - 4)
    vars(n0)["nonlin"] = False
    assert layer(x)[0].data == -2.5
    list.__setitem__(layer.neurons, 1, tapead.nn.Neuron(2, nonlin=False))
    assert [v.data for v in layer(x)] == [v.data for v in _op_by_op(layer, x)]
    del restored
    assert tapead._c.lib.ta_validate() == 0


def test_fused_layer_refuses_objects_that_merely_carry_an_id():
    """Any object with an int attribute `_i` used to reach C as a node id
    (and a negative one as a constant read through a NULL pointer)."""
    class Feature:
        def __init__(self, i):
            self._i = i

    model = tapead.nn.MLP(2, [3, 1])
    for bad in ([Feature(-1), Feature(-1)], [Feature(0), Feature(1 << 40)], [Feature(-1), 1.0]):
        with pytest.raises(TypeError, match="Feature"):
            model(bad)
    if tapead.FRONT == "cffi":                          # (a C Value cannot be forged)
        forged = Value(1.0)
        forged._i = -1                                  # a handle naming no node
        with pytest.raises(tapead.TapeError):
            model([forged, Value(2.0)])
        with pytest.raises(tapead.TapeError):
            model([forged, 2.0])
    unmade = Value.__new__(Value)                       # never initialised
    with pytest.raises(TypeError):
        model([unmade, Value(2.0)])
    assert tapead._c.lib.ta_validate() == 0


def test_ta_layer_checks_what_it_is_handed():
    """C never trusts its caller: NULL arrays, a count that wraps, an input
    id < 0 with no constants array, an output list too small are statuses,
    not crashes."""
    lib, ffi = tapead._c.lib, tapead._c.ffi
    x = Value(1.0)
    ids = ffi.new("int64_t[]", [x._i]); out = tapead._c.holds.held_list(1)
    assert lib.ta_layer(ids, ids, 1, 1, ids, ffi.NULL, 1, ffi.new("int64_t[]", 3)) == lib.TA_EARG
    assert lib.ta_layer(ids, ids, 1, 1, ids, ffi.NULL, 1, ffi.NULL) == lib.TA_EARG
    neg = ffi.new("int64_t[]", [-1])
    assert lib.ta_layer(ids, ids, 1, 1, neg, ffi.NULL, 1, out) == lib.TA_EBADID
    assert lib.ta_layer(ffi.NULL, ids, 1, 1, ids, ffi.NULL, 1, out) == lib.TA_EARG
    assert lib.ta_layer(ids, ffi.NULL, 1, 1, ids, ffi.NULL, 1, out) == lib.TA_EARG
    assert lib.ta_layer(ids, ids, 1, 1, ffi.NULL, ffi.NULL, 1, out) == lib.TA_EARG
    assert lib.ta_layer(ids, ids, 1 << 20, 1 << 20, ids, ffi.NULL, 1, out) == lib.TA_EARG
    assert lib.ta_layer(ids, ids, 1, 1, ids, ffi.NULL, 1, out) == 0


def test_fused_layer_follows_weights_that_init_moves():
    """The cache holds weight ids; w.__init__(x) moves a weight to a new node,
    and the old one's slot, once reclaimed, goes to other Values.  The
    layer must read the weights where they now are, and backward() must
    reach them, never those other Values.  Reference: plain Python."""
    random.seed(4)
    collect_all()
    layer = tapead.nn.Layer(3, 2)                       # its weights alone in a segment
    x = [1.5, -2.0, 0.5]
    layer(x)                                            # the cache is made
    params = layer.parameters()
    new = [0.25 * (k - 3) for k in range(len(params))]  # w00 w01 w02 b0 w10 w11 w12 b1
    others = move_and_reclaim(params, 0.0, n=8000)
    for p, v in zip(params, new):
        p.data = v
    out = layer(x)
    acts = [sum((w * xi for w, xi in zip(new[4 * j:4 * j + 3], x)), new[4 * j + 3]) for j in (0, 1)]
    assert [v.data for v in out] == [max(a, 0.0) for a in acts]
    (out[0] + out[1]).backward()
    want = []
    for j in (0, 1):
        on = 1.0 if acts[j] > 0 else 0.0
        want += [on * xi for xi in x] + [on]
    assert [p.grad for p in params] == want
    assert untouched(others)
    assert tapead._c.lib.ta_validate() == 0
