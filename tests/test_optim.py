"""tapead.optim against a plain-Python transcription of PyTorch's update rules
(torch.optim.SGD and torch.optim.Adam, single-tensor path), over several
steps with a learning rate that changes between steps; and Adam against
microgpt's update, written as microgpt writes it, bit for bit."""
import math
import threading

import pytest
from hypothesis import example, given, strategies as st

from conftest import lonely, move_and_reclaim, untouched

import tapead
from tapead import Value
from tapead.optim import SGD, Adam

START = [0.5, -1.25, 2.0, 0.0, -3.5]
TARGET = [1.0, 0.5, -1.0, 2.0, 0.25]
LRS = [0.1, 0.05, 0.2, 0.01, 0.3, 0.07]


def loss_value(ps):
    """A smooth loss recorded on the tape."""
    s = 0
    for i, (p, t) in enumerate(zip(ps, TARGET)):
        s = s + (i + 1) * (p - t) ** 2
    return s + ps[0] * ps[1] + (ps[2] * ps[3]).tanh()


def loss_grad(x):
    """Its gradient in closed form (the reference's own, not read from tapead)."""
    g = [2 * (i + 1) * (xi - t) for i, (xi, t) in enumerate(zip(x, TARGET))]
    g[0] += x[1]
    g[1] += x[0]
    d = 1 - math.tanh(x[2] * x[3]) ** 2
    g[2] += d * x[3]
    g[3] += d * x[2]
    return g


class RefSGD:
    """torch.optim.SGD (dampening 0, no nesterov)."""

    def __init__(self, x, lr, momentum=0.0, weight_decay=0.0):
        self.x, self.lr, self.mom, self.wd = list(x), lr, momentum, weight_decay
        self.buf = None

    def step(self, grads):
        d = [g + self.wd * p if self.wd != 0 else g for g, p in zip(grads, self.x)]
        if self.mom != 0:
            if self.buf is None:
                self.buf = list(d)                      # torch.clone(d_p)
            else:
                self.buf = [self.mom * b + di for b, di in zip(self.buf, d)]
            d = self.buf
        self.x = [p - self.lr * di for p, di in zip(self.x, d)]


class RefAdam:
    """torch.optim.Adam (amsgrad off, L2 weight decay added to the gradient)."""

    def __init__(self, x, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.x, self.lr, self.b1, self.b2, self.eps, self.wd = list(x), lr, *betas, eps, weight_decay
        self.m = [0.0] * len(x)
        self.v = [0.0] * len(x)
        self.t = 0

    def step(self, grads):
        self.t += 1
        b1, b2 = self.b1, self.b2
        c1 = 1 - b1 ** self.t
        c2 = 1 - b2 ** self.t
        step_size = self.lr / c1
        for i, g in enumerate(grads):
            p = self.x[i]
            if self.wd != 0:
                g = g + self.wd * p
            self.m[i] = self.m[i] + (g - self.m[i]) * (1 - b1)         # exp_avg.lerp_(grad, 1-b1)
            self.v[i] = self.v[i] * b2 + (1 - b2) * g * g               # mul_(b2).addcmul_(g, g)
            denom = math.sqrt(self.v[i]) / math.sqrt(c2) + self.eps
            self.x[i] = p - step_size * self.m[i] / denom


def run(make_opt, ref, steps=6):
    ps = [Value(x) for x in START]
    opt = make_opt(ps)
    for k in range(steps):
        opt.lr = ref.lr = LRS[k % len(LRS)]
        opt.zero_grad()
        loss_value(ps).backward()
        g = loss_grad(ref.x)
        assert [p.grad for p in ps] == pytest.approx(g, rel=1e-9, abs=1e-12)
        opt.step()
        ref.step(g)
        assert [p.data for p in ps] == pytest.approx(ref.x, rel=1e-9, abs=1e-12), f"step {k}"
    return ps


@pytest.mark.parametrize("momentum", [0.0, 0.9, 0.5])
@pytest.mark.parametrize("wd", [0.0, 1e-2, 0.3])
def test_sgd_matches_pytorch_rule(momentum, wd):
    run(lambda ps: SGD(ps, lr=0.1, momentum=momentum, weight_decay=wd),
        RefSGD(START, 0.1, momentum, wd))


@pytest.mark.parametrize("wd", [0.0, 1e-2, 0.5])
@pytest.mark.parametrize("betas,eps", [((0.9, 0.999), 1e-8), ((0.5, 0.9), 1e-3)])
def test_adam_matches_pytorch_rule(wd, betas, eps):
    run(lambda ps: Adam(ps, lr=0.1, betas=betas, eps=eps, weight_decay=wd),
        RefAdam(START, 0.1, betas, eps, wd), steps=8)


def test_sgd_plain_is_micrograd_update_bit_for_bit():
    """No momentum, no decay: exactly micrograd's p.data -= lr * p.grad."""
    ps = [Value(x) for x in START]
    qs = [Value(x) for x in START]
    opt = SGD(ps, lr=0.3)
    for k in range(4):
        opt.lr = LRS[k]
        opt.zero_grad()
        for q in qs:
            q.grad = 0
        loss_value(ps).backward()
        loss_value(qs).backward()
        opt.step()
        for q in qs:
            q.data -= LRS[k] * q.grad
        assert [p.data for p in ps] == [q.data for q in qs]


class MicrogptAdam:
    """Karpathy's microgpt's Adam loop, as it is written there (Python floats;
    its p.grad = 0 after the update is tapead's opt.zero_grad())."""

    def __init__(self, x, beta1=0.85, beta2=0.99, eps_adam=1e-8):
        self.x, self.beta1, self.beta2, self.eps = list(x), beta1, beta2, eps_adam
        self.m = [0.0] * len(x)
        self.v = [0.0] * len(x)

    def step(self, step, lr_t, grads):
        beta1, beta2 = self.beta1, self.beta2
        for i, g in enumerate(grads):
            self.m[i] = beta1 * self.m[i] + (1 - beta1) * g
            self.v[i] = beta2 * self.v[i] + (1 - beta2) * g ** 2
            m_hat = self.m[i] / (1 - beta1 ** (step + 1))
            v_hat = self.v[i] / (1 - beta2 ** (step + 1))
            self.x[i] -= lr_t * m_hat / (v_hat ** 0.5 + self.eps)


def adam_against_microgpt(start, grads_per_step):
    """tapead.optim.Adam with microgpt's betas and eps and its linear
    learning-rate decay set through opt.lr, step by step beside microgpt's
    loop: the same parameters to the bit, the gradients zeroed."""
    ps = [Value(x) for x in start]
    ref = MicrogptAdam(start)
    opt = Adam(ps, lr=0.01, betas=(0.85, 0.99), eps=1e-8)
    n = len(grads_per_step)
    for step, grads in enumerate(grads_per_step):
        lr_t = 0.01 * (1 - step / n)
        for p, g in zip(ps, grads):
            p.grad = g
        opt.lr = lr_t
        opt.step()
        opt.zero_grad()
        ref.step(step, lr_t, grads)
        assert [p.data for p in ps] == ref.x, f"step {step}"
        assert [p.grad for p in ps] == [0.0] * len(ps)


# gradients, including squares that lie near a midpoint (few mantissa bits:
# pow(g, 2.0) and g * g can part there) and tiny and huge ones
GRADS = st.floats(-1e6, 1e6, allow_nan=False) | st.integers(-2 ** 27, 2 ** 27).map(lambda k: k * 2.0 ** -20) \
    | st.sampled_from([0.0, -0.0, 1e-200, -3e-310, 1e150, 134217729.0, 1.0000000149011612])


@given(st.lists(st.lists(GRADS, min_size=4, max_size=4), min_size=1, max_size=8))
# squares where libm's pow and g*g part (CPython's g**2 is the one, PyPy's the other)
@example([[0.0] * 4, [0.0] * 4, [0.0, 0.0, 0.0, 103.6988172531128]])
@example([[-127.51853245733109, 1.0, 2.0, 3.0], [-127.51853245733109] * 4])
def test_adam_is_microgpt_update_bit_for_bit(grads_per_step):
    adam_against_microgpt([0.5, -1.25, 2.0, 0.0], grads_per_step)


def test_adam_roots_where_pow_and_sqrt_part_are_microgpts():
    """microgpt's v_hat ** 0.5 is libm's pow, which differs from the
    correctly rounded sqrt where the exact root lies near a midpoint (about
    one v_hat in 1,500 here): Adam takes sqrt only where that is certainly
    pow's number.  Gradients whose first step's v_hat is such a root, and
    others around them, over three steps."""
    import random
    rng = random.Random(11)
    c2 = 1 - 0.99 ** 1
    hard = []
    for _ in range(400_000):
        g = rng.uniform(-3, 3) * 2.0 ** rng.randrange(-30, 30)
        v_hat = (1 - 0.99) * g ** 2 / c2         # microgpt's first step, as it computes it
        if math.pow(v_hat, 0.5) != math.sqrt(v_hat):
            hard.append(g)
            if len(hard) == 40:
                break
    if not hard:
        pytest.skip("this libm's pow(x, 0.5) is sqrt(x) wherever tried: no root where they part")
    grads = hard + [rng.uniform(-3, 3) * 2.0 ** rng.randrange(-30, 30) for _ in range(200)]
    adam_against_microgpt([rng.uniform(-1, 1) for _ in grads],
                          [[g * 1.5 ** step for g in grads] for step in range(3)])


def test_adam_first_step_moves_each_parameter_by_about_lr():
    ps = [Value(x) for x in START]
    opt = Adam(ps, lr=0.01)
    loss_value(ps).backward()
    grads = [p.grad for p in ps]
    opt.step()
    for p, x, g in zip(ps, START, grads):
        assert p.data == pytest.approx(x - 0.01 * math.copysign(1, g), rel=1e-6)


def test_zero_grad_and_step_accept_any_iterable():
    ps = [Value(x) for x in START]
    opt = SGD((p for p in ps), lr=0.5)   # a generator, like model.parameters() in a genexp
    loss_value(ps).backward()
    assert all(p.grad != 0 for p in ps)
    opt.zero_grad()
    assert [p.grad for p in ps] == [0.0] * len(ps)
    before = [p.data for p in ps]
    opt.step()   # zero gradients: nothing moves
    assert [p.data for p in ps] == before
    # zero_grad on an MLP's parameters, and an empty optimizer
    SGD([], lr=1.0).step()
    Adam([]).zero_grad()


def test_step_leaves_gradients_alone():
    ps = [Value(x) for x in START]
    opt = Adam(ps, lr=0.1)
    loss_value(ps).backward()
    g = [p.grad for p in ps]
    opt.step()
    assert [p.grad for p in ps] == g


@pytest.mark.parametrize("bad", [1.0, "w", None, [1.0]])
@pytest.mark.parametrize("cls", [SGD, Adam])
def test_non_value_parameters_raise_type_error(cls, bad):
    ok = Value(1.0)
    with pytest.raises(TypeError):
        cls([ok, bad], lr=0.1)


def foreign_values():
    out = []
    t = threading.Thread(target=lambda: out.extend([Value(2.0), Value(3.0) * 4]))
    t.start()
    t.join()
    return out


@pytest.mark.parametrize("make", [
    lambda ps: SGD(ps, lr=0.1),
    lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.1),
    lambda ps: Adam(ps, lr=0.1, weight_decay=0.1),
])
def test_values_from_another_thread_raise_and_change_nothing(make):
    mine = [Value(x) for x in START]
    loss_value(mine).backward()
    foreign = foreign_values()
    opt = make(mine[:2] + foreign + mine[2:])   # foreign ones in the middle
    before = [(p.data, p.grad) for p in mine]
    nodes = tapead.tape_stats()["nodes"]
    with pytest.raises(tapead.TapeError):
        opt.step()
    with pytest.raises(tapead.TapeError):
        opt.zero_grad()
    assert [(p.data, p.grad) for p in mine] == before
    assert tapead.tape_stats()["nodes"] == nodes
    assert tapead._c.lib.ta_validate() == 0
    # the Values still train normally afterwards
    ref = RefSGD([d for d, _ in before], 0.1)
    SGD(mine, lr=0.1).step()
    ref.step([g for _, g in before])
    assert [p.data for p in mine] == ref.x


# ------------------------------------------- sizes, parameters, checkpoints
@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: Adam(ps, lr=0.1)])
def test_sizes_are_read_only_and_parameters_fixed(make):
    """C sizes its arrays from the parameters given at construction: writing
    n once overflowed them, and appending to params was silently ignored."""
    ps = [Value(x) for x in START]
    opt = make(ps)
    assert opt.n == len(ps) and opt.params == tuple(ps)
    with pytest.raises(AttributeError):
        opt.n = 100000
    with pytest.raises(AttributeError):
        opt.params = ps + [Value(1.0)]
    extra = Value(7.0)
    for grow in (lambda: opt.params.append(extra), lambda: opt.params.extend([extra]),
                 lambda: opt.params.insert(0, extra)):
        with pytest.raises(TypeError, match="fixed when it is made"):
            grow()
    with pytest.raises(TypeError):
        opt.params += (extra,)
    assert opt.n == len(ps) and opt.params == tuple(ps)
    loss_value(ps).backward()
    opt.step()                                          # still works, on the same five
    assert tapead._c.lib.ta_validate() == 0


def test_repeated_parameter_is_refused():
    p = Value(0.0)
    p.grad = 1.0
    with pytest.raises(ValueError, match="distinct"):
        SGD([p, p], lr=1.0)                             # would step p twice
    assert p.data == 0.0


@pytest.mark.parametrize("make,match", [
    (lambda w: Adam([w], betas=(1.0, 0.999)), r"betas\[0\] must be in \[0, 1\)"),
    (lambda w: Adam([w], betas=(0.9, -0.1)), r"betas\[1\]"),
    (lambda w: Adam([w], betas=(0.9,)), "pair"),
    (lambda w: Adam([w], eps=float("nan")), "eps"),
    (lambda w: SGD([w], lr=-0.1), "lr"),
    (lambda w: SGD([w], lr=0.1, momentum=float("inf")), "momentum"),
    (lambda w: SGD([w], lr=0.1, weight_decay=-1), "weight_decay"),
])
def test_bad_hyperparameters_raise_value_error(make, match):
    w = Value(1.0)
    with pytest.raises(ValueError, match=match):
        make(w)


def test_bad_hyperparameter_set_later_raises():
    opt = Adam([Value(1.0)])
    with pytest.raises(TypeError, match="lr must be a real number"):
        opt.lr = "0.1"
    with pytest.raises(ValueError, match="betas"):
        opt.betas = (0.9, 1.0)
    assert (opt.lr, opt.betas) == (1e-3, (0.9, 0.999))


@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
                                  lambda ps: Adam(ps, lr=0.1, weight_decay=0.01)])
@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_optimizer_checkpoint_resumes_the_same_trajectory(make, how):
    """pickle / deepcopy of (parameters, optimizer) together: the copy holds
    the copied parameters and the optimizer state, and continues exactly as
    the original does."""
    import copy
    import pickle
    ps = [Value(x) for x in START]
    opt = make(ps)
    for _ in range(3):
        opt.zero_grad(); loss_value(ps).backward(); opt.step()
    ps2, opt2 = (pickle.loads(pickle.dumps((ps, opt))) if how == "pickle"
                 else copy.deepcopy((ps, opt)))
    assert opt2.params == tuple(ps2) and all(a is not b for a, b in zip(ps, ps2))
    for _ in range(3):
        for q, o in ((ps, opt), (ps2, opt2)):
            o.zero_grad(); loss_value(q).backward(); o.step()
    assert [p.data for p in ps2] == [p.data for p in ps]


# ------------------------------------------------- parameters that __init__ moves
OPTS = {
    "SGD": (lambda ps: SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
            lambda x: RefSGD(x, 0.1, 0.9, 0.01)),
    "Adam": (lambda ps: Adam(ps, lr=0.1, weight_decay=0.01),
             lambda x: RefAdam(x, 0.1, weight_decay=0.01)),
}


@pytest.mark.parametrize("name", sorted(OPTS))
def test_a_parameter_that_init_moves_is_stepped_and_zeroed_where_it_now_is(name):
    """p.__init__(x) moves p to a new node: step() and zero_grad() follow p
    there (its momentum or moments kept, as torch.optim keeps a tensor's
    state when its .data is replaced), as the reference does with x."""
    make, ref = OPTS[name]
    ps = [Value(x) for x in START]
    opt, r = make(ps), ref(START)
    for k in range(7):
        if k in (2, 5):                               # re-initialise some, mid-run
            for i in range(k % 3, len(ps), 2):
                r.x[i] = r.x[i] * 0.5 + 0.25
                ps[i].__init__(r.x[i])
                ps[i].grad = 9.0                      # for zero_grad to clear
        opt.zero_grad()
        assert [p.grad for p in ps] == [0.0] * len(ps)
        loss_value(ps).backward()
        g = loss_grad(r.x)
        opt.step()
        r.step(g)
        assert [p.data for p in ps] == pytest.approx(r.x, rel=1e-9, abs=1e-12), f"step {k}"


@pytest.mark.parametrize("name", sorted(OPTS))
def test_a_step_never_writes_values_in_a_moved_parameters_old_slots(name):
    """The optimizer used to keep node ids: after p.__init__(x) and a
    reclamation, those ids named other Values, whose data step() changed
    and whose grads zero_grad() zeroed."""
    make, ref = OPTS[name]
    ps = lonely([1.0, 1.0, 1.0])
    opt = make(ps)
    others = move_and_reclaim(ps, 5.0)
    for p in ps:
        p.grad = 2.0
    opt.step()
    r = ref([5.0] * 3)
    r.step([2.0] * 3)
    assert [p.data for p in ps] == pytest.approx(r.x, rel=1e-12)
    opt.zero_grad()
    assert [p.grad for p in ps] == [0.0] * 3
    assert untouched(others)
    assert tapead._c.lib.ta_validate() == 0


@pytest.mark.parametrize("name", sorted(OPTS))
def test_a_parameter_moved_to_another_thread_raises_and_changes_nothing(name):
    """v.__init__ in another thread makes v that thread's: the next step
    raises TapeError, changing nothing, as for any other thread's Value."""
    make, _ = OPTS[name]
    ps = [Value(x) for x in START]
    opt = make(ps)
    loss_value(ps).backward()
    opt.step()
    t = threading.Thread(target=lambda: ps[1].__init__(7.0))
    t.start(); t.join()
    mine = ps[:1] + ps[2:]
    before = [(p.data, p.grad) for p in mine]
    with pytest.raises(tapead.TapeError):
        opt.step()
    with pytest.raises(tapead.TapeError):
        opt.zero_grad()
    assert [(p.data, p.grad) for p in mine] == before
