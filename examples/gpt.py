"""A small character-level GPT on scalar Values, in the style of Karpathy's
microgpt: token and position embeddings, causal multi-head attention with a
key/value cache, rmsnorm, an MLP, Adam with a decaying learning rate, and
temperature sampling; trained on made-up names (built from syllables here,
no download), one name per step.

    python examples/gpt.py                  # the fast path: tapead.linear + tapead.optim.Adam
    python examples/gpt.py --dropin         # tapead.Value as a drop-in: the same code as --reference
    python examples/gpt.py --reference      # a plain-Python scalar Value (defined below)
    python examples/gpt.py --compiled       # the fast path's step recorded once per name length (tapead.jit)
    python examples/gpt.py --compiled --batch 16   # 16 names a step, over every core
    python examples/gpt.py --steps 50 --compare   # all four, same seed: losses must agree

The three runs compute the same floating-point operations in the same
order: the model uses only +, *, ** and log / exp / relu (a - b is written
a + b * -1, a / b as a * b ** -1), the reference Value's backward visits
nodes in reverse creation order as tapead's tape does, tapead.dot and
tapead.linear record exactly the generator sums they replace, and
tapead.optim.Adam is microgpt's update operation for operation.  So the
printed losses are the same to the last bit in all of them.

--compiled records the fast path's training step once per name length
(tapead.jit) and replays it in C: the tokens are the recorded step's inputs,
so the embedding row and the target's probability are taken by index
(tapead.take, where the other runs index Python lists), and the softmax's
shift is computed in the graph without a gradient (tapead.detach of the
largest logit, where the other runs read it as a number: the same value,
so the same losses).
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time

# ------------------------------------------------------------ the data


def make_names(n=2000, seed=42):
    """n made-up names from syllables (a fixed seed: the same list every run)."""
    rng = random.Random(seed)
    starts = ["a", "e", "i", "o", "ka", "ma", "la", "ra", "sa", "ta", "na", "da", "ja", "ba",
              "ke", "le", "me", "ne", "re", "se", "li", "mi", "ni", "ri", "jo", "lo", "mo", "no", "ro"]
    middles = ["ri", "la", "na", "li", "ne", "ra", "le", "ni", "ma", "ta", "ri", "sa", "vi", "ke", "lo"]
    ends = ["a", "a", "e", "i", "o", "y", "n", "ah", "el", "an", "en", "on", "ie", "ia", "is", "ra", "na"]
    out = []
    for _ in range(n):
        name = rng.choice(starts) + "".join(rng.choice(middles) for _ in range(rng.randint(0, 2)))
        out.append(name + rng.choice(ends))
    return out


# ------------------------------------------- a plain-Python scalar Value


class RefValue:
    """microgpt's autograd: each op records its children and its local
    gradients; backward() multiplies them along the graph.  (Its one change:
    it visits nodes in reverse creation order -- a topological order, the
    one tapead's tape has -- so gradients are summed in tapead's order.)"""
    __slots__ = ("data", "grad", "_children", "_local_grads", "_n")
    _count = 0

    def __init__(self, data, children=(), local_grads=()):
        self.data = data
        self.grad = 0
        self._children = children
        self._local_grads = local_grads
        RefValue._count += 1
        self._n = RefValue._count

    def __add__(self, other):
        other = other if isinstance(other, RefValue) else RefValue(other)
        return RefValue(self.data + other.data, (self, other), (1, 1))

    def __mul__(self, other):
        other = other if isinstance(other, RefValue) else RefValue(other)
        return RefValue(self.data * other.data, (self, other), (other.data, self.data))

    def __pow__(self, other):
        return RefValue(self.data ** other, (self,), (other * self.data ** (other - 1),))

    def log(self):
        return RefValue(math.log(self.data), (self,), (1 / self.data,))

    def exp(self):
        e = math.exp(self.data)
        return RefValue(e, (self,), (e,))

    def relu(self):
        return RefValue(max(0, self.data), (self,), (float(self.data > 0),))

    def __radd__(self, other):
        return self + other

    def __rmul__(self, other):
        return self * other

    def backward(self):
        topo, seen, stack = [], set(), [self]
        while stack:                      # every node reached from self
            v = stack.pop()
            if id(v) not in seen:
                seen.add(id(v))
                topo.append(v)
                stack.extend(v._children)
        topo.sort(key=lambda v: v._n, reverse=True)
        self.grad = 1
        for v in topo:
            for child, local_grad in zip(v._children, v._local_grads):
                child.grad += local_grad * v.grad


# ---------------------------------------------------------- the model


class GPT:
    """One transformer layer over characters.  `fast`: tapead.dot /
    tapead.linear for the weighted sums and tapead.optim.Adam for the update;
    else the generator sums and microgpt's Adam loop in Python floats."""

    def __init__(self, Value, vocab_size, n_embd=16, n_head=4, n_layer=1, block_size=16,
                 fast=False, compiled=False, seed=42, lr=0.01, betas=(0.85, 0.99), eps=1e-8):
        random.seed(seed)
        self.Value, self.fast = Value, fast
        self.n_embd, self.n_head, self.n_layer, self.block_size = n_embd, n_head, n_layer, block_size
        self.head_dim = n_embd // n_head

        def matrix(nout, nin, std=0.08):
            return [[Value(random.gauss(0, std)) for _ in range(nin)] for _ in range(nout)]
        self.sd = {"wte": matrix(vocab_size, n_embd), "wpe": matrix(block_size, n_embd),
                   "lm_head": matrix(vocab_size, n_embd)}
        for i in range(n_layer):
            for name in ("attn_wq", "attn_wk", "attn_wv", "attn_wo"):
                self.sd[f"layer{i}.{name}"] = matrix(n_embd, n_embd)
            self.sd[f"layer{i}.mlp_fc1"] = matrix(4 * n_embd, n_embd)
            self.sd[f"layer{i}.mlp_fc2"] = matrix(n_embd, 4 * n_embd)
        self.params = [p for mat in self.sd.values() for row in mat for p in row]
        self.lr, self.betas, self.eps = lr, betas, eps
        if fast:
            import tapead
            from tapead.optim import Adam
            self.dot, self.linear = tapead.dot, tapead.linear
            self.opt = Adam(self.params, lr=lr, betas=betas, eps=eps)
        else:
            self.dot = lambda ws, xs: sum(w * x for w, x in zip(ws, xs))
            self.linear = lambda x, w: [sum(wi * xi for wi, xi in zip(wo, x)) for wo in w]
            self.m = [0.0] * len(self.params)
            self.v = [0.0] * len(self.params)
        self.compiled = compiled
        if compiled:            # tokens may be Values (the recorded step's inputs)
            import functools
            import tapead
            self.take = tapead.take
            self.shift = lambda logits: tapead.detach(functools.reduce(tapead.maximum, logits))
        else:
            self.take = lambda seq, i: seq[i]
            self.shift = lambda logits: max(v.data for v in logits)

    # -- pieces
    def softmax(self, logits):
        top = self.shift(logits)          # the largest logit, carrying no gradient
        exps = [(v + -top).exp() for v in logits]
        inv = sum(exps) ** -1
        return [e * inv for e in exps]

    def rmsnorm(self, x):
        ms = sum(xi * xi for xi in x) * (1.0 / len(x))
        scale = (ms + 1e-5) ** -0.5
        return [xi * scale for xi in x]

    def forward(self, token_id, pos_id, keys, values):
        """Logits for the next token; keys/values: the cache, one list per layer."""
        sd, linear, dot, hd = self.sd, self.linear, self.dot, self.head_dim
        x = [t + p for t, p in zip(self.take(sd["wte"], token_id), sd["wpe"][pos_id])]
        x = self.rmsnorm(x)
        for li in range(self.n_layer):
            res = x
            x = self.rmsnorm(x)
            q = linear(x, sd[f"layer{li}.attn_wq"])
            keys[li].append(linear(x, sd[f"layer{li}.attn_wk"]))
            values[li].append(linear(x, sd[f"layer{li}.attn_wv"]))
            att = []
            for h in range(self.n_head):
                s = slice(h * hd, (h + 1) * hd)
                q_h = q[s]
                k_h = [k[s] for k in keys[li]]
                v_h = [v[s] for v in values[li]]
                w = self.softmax([dot(q_h, k) * hd ** -0.5 for k in k_h])
                att.extend(dot(w, [v[j] for v in v_h]) for j in range(hd))
            x = linear(att, sd[f"layer{li}.attn_wo"])
            x = [a + b for a, b in zip(x, res)]
            res = x
            x = self.rmsnorm(x)
            x = [v.relu() for v in linear(x, sd[f"layer{li}.mlp_fc1"])]
            x = linear(x, sd[f"layer{li}.mlp_fc2"])
            x = [a + b for a, b in zip(x, res)]
        return linear(x, sd["lm_head"])

    def loss(self, tokens):
        n = min(self.block_size, len(tokens) - 1)
        keys, values = [[] for _ in range(self.n_layer)], [[] for _ in range(self.n_layer)]
        losses = []
        for pos in range(n):
            probs = self.softmax(self.forward(tokens[pos], pos, keys, values))
            losses.append(self.take(probs, tokens[pos + 1]).log() * -1)
        return sum(losses) * (1.0 / n)

    def update(self, step, num_steps):
        """Adam with a linearly decaying learning rate; gradients zeroed after."""
        lr_t = self.lr * (1 - step / num_steps)
        if self.fast:
            self.opt.lr = lr_t
            self.opt.step()
            self.opt.zero_grad()
            return
        beta1, beta2 = self.betas
        m, v = self.m, self.v
        for i, p in enumerate(self.params):
            m[i] = beta1 * m[i] + (1 - beta1) * p.grad
            v[i] = beta2 * v[i] + (1 - beta2) * p.grad ** 2
            m_hat = m[i] / (1 - beta1 ** (step + 1))
            v_hat = v[i] / (1 - beta2 ** (step + 1))
            p.data -= lr_t * m_hat / (v_hat ** 0.5 + self.eps)
            p.grad = 0

    def sample(self, bos, temperature=0.5, rng=None):
        """One name: tokens drawn from softmax(logits / temperature) until BOS."""
        rng = rng or random
        keys, values = [[] for _ in range(self.n_layer)], [[] for _ in range(self.n_layer)]
        token, out = bos, []
        for pos in range(self.block_size):
            logits = [v.data / temperature for v in self.forward(token, pos, keys, values)]
            top = max(logits)
            weights = [math.exp(v - top) for v in logits]
            token = rng.choices(range(len(weights)), weights=weights)[0]
            if token == bos:
                break
            out.append(token)
        return out


# ------------------------------------------------------------- running


def setup(mode, seed=42, **kw):
    """(model, docs, encode, decode, bos) for mode 'fast', 'compiled', 'dropin' or 'reference'."""
    if mode == "reference":
        Value = RefValue
    else:
        import tapead
        Value = tapead.Value
    docs = make_names(seed=seed)
    random.Random(seed).shuffle(docs)
    chars = sorted(set("".join(docs)))
    bos = len(chars)
    stoi = {c: i for i, c in enumerate(chars)}
    model = GPT(Value, len(chars) + 1, fast=mode in ("fast", "compiled"), compiled=(mode == "compiled"),
                seed=seed, **kw)

    def encode(doc):
        return [bos] + [stoi[c] for c in doc] + [bos]

    def decode(toks):
        return "".join(chars[t] for t in toks)
    return model, docs, encode, decode, bos


def train(mode, steps, seed=42, log=None, batch=1, threads=None, **kw):
    """Train `steps` steps, `batch` names a step (the compiled step only: its
    gradient is the mean over them, run over `threads` threads, None: every
    core); returns (model, losses (a step's mean), seconds per step, decode, bos)."""
    model, docs, encode, decode, bos = setup(mode, seed, **kw)
    if mode == "compiled":
        import tapead
        scale = 1.0 / batch
        step_fn = tapead.jit(model.loss if batch == 1 else (lambda tokens: model.loss(tokens) * scale),
                             wrt=model.params)
    elif batch != 1:
        raise ValueError("--batch is the compiled step's (--compiled)")
    losses, times = [], []
    for step in range(steps):
        t0 = time.perf_counter()
        if mode != "compiled":
            loss = model.loss(encode(docs[step % len(docs)]))
            loss.backward()
            value = loss.data
        elif batch == 1:
            value = step_fn(encode(docs[step % len(docs)]))
        else:
            names = [encode(docs[(step * batch + i) % len(docs)]) for i in range(batch)]
            value = sum(step_fn.batch(names, threads=threads))
        model.update(step, steps)
        times.append(time.perf_counter() - t0)
        losses.append(value)
        if log:
            log(f"step {step + 1:4d} / {steps:4d} | loss {value:.4f} | {times[-1] * 1e3:7.2f} ms")
    return model, losses, times, decode, bos


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--fast", dest="mode", action="store_const", const="fast",
                   help="tapead.linear + tapead.optim.Adam (the default)")
    g.add_argument("--dropin", dest="mode", action="store_const", const="dropin",
                   help="tapead.Value in the reference's code")
    g.add_argument("--reference", dest="mode", action="store_const", const="reference",
                   help="a plain-Python scalar Value")
    g.add_argument("--compiled", dest="mode", action="store_const", const="compiled",
                   help="the fast path's step recorded once per name length and replayed in C (tapead.jit)")
    g.add_argument("--compare", dest="mode", action="store_const", const="compare",
                   help="run all four, check the losses agree, compare times")
    ap.add_argument("--batch", type=int, default=1, help="names a step (--compiled; default 1)")
    ap.add_argument("--threads", type=int, default=None, help="threads for --batch (default: every core)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--temperature", type=float, default=0.5)
    args = ap.parse_args(argv)
    mode = args.mode or "fast"
    if mode == "compare":
        runs = {}
        for m in ("reference", "dropin", "fast", "compiled"):
            print(f"== {m}", flush=True)
            every = max(1, args.steps // 10)
            t0 = time.perf_counter()

            def progress(line, m=m, t0=t0, count=[0]):
                count[0] += 1
                if args.steps <= 20 or count[0] % every == 0:
                    print(f"   {m}: step {count[0]} / {args.steps} ({time.perf_counter() - t0:.1f} s)", flush=True)
            _, losses, times, _, _ = train(m, args.steps, log=progress)
            runs[m] = (losses, sorted(times)[len(times) // 2], sum(times))
            print(f"   final loss {losses[-1]:.4f}, median step {runs[m][1] * 1e3:.3f} ms", flush=True)
        ref_losses, ref_t, ref_total = runs["reference"]
        ok = True
        for m in ("dropin", "fast", "compiled"):
            same = runs[m][0] == ref_losses
            ok &= same
            print(f"{m:>9}: losses {'identical to' if same else 'DIFFER from'} the reference's over "
                  f"{args.steps} steps; {ref_t / runs[m][1]:.1f}x faster per step (median), "
                  f"{ref_total / runs[m][2]:.1f}x over the whole run")
        return 0 if ok else 1
    print(f"training ({mode}{f', {args.batch} names a step' if args.batch != 1 else ''}) for {args.steps} steps")
    t0 = time.perf_counter()
    model, losses, times, decode, bos = train(mode, args.steps, log=print, batch=args.batch,
                                              threads=args.threads)
    print(f"trained in {time.perf_counter() - t0:.1f} s (median step {sorted(times)[len(times) // 2] * 1e3:.2f} ms)")
    rng = random.Random(0)
    print(f"--- {args.samples} sampled names (temperature {args.temperature})")
    for i in range(args.samples):
        print(f"sample {i + 1:2d}: {decode(model.sample(bos, args.temperature, rng))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
