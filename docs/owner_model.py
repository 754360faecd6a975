"""A model of two ways to keep custom nodes' Python data (rules) alive with
exactly the Values that need them, in pure Python: the tape's segments,
holds and node liveness as tapead's C has them (tape.c: a held segment
keeps all its nodes; an unheld one only the nodes live nodes use), and
the Values, rules and owners as ordinary Python objects, so that Python's
collector decides what lives, as it would once the cycle is visible.

  seg   one owner per tape segment; a Value of segment W references
        owner(W); owner(W).deps = owners of the earlier segments with
        custom data that W's nodes use
  node  a Value references an owner set of its own node's dependencies:
        a custom node's owner holds its rule and the join of its inputs'
        owners; an op's result joins its inputs' (a new join object only
        where two different ones meet)

A training loop of ten-op steps (one op in ten a custom node whose rule
captures its Values, micrograd's closure), three parameters made first,
so that no segment boundary ever falls between two steps; after the loop
only the last step's loss is kept.  Printed: how many owners and
segments are still alive after gc.collect(), and whether backward from
the kept loss finds every rule it needs.

What it shows (docs/custom-nodes.md, "Why an owner per node"): with one owner per
segment, the step that straddles each segment boundary links the new
segment's owner to the old one's, and the old owner holds rules of the
previous steps (they share its segment), whose captured Values hold their
segments: every segment ever recorded stays reachable from the last
step's Values.  (Where a boundary happens to fall between two steps the
chain breaks there; with steps of varying length that happens at about
one boundary in a step's length of nodes.)  With owners per node the
last step reaches only its own rules.

Run: python docs/owner_model.py   (pure Python, about a minute)
"""
import gc, sys, weakref

SEG = 64                                    # nodes per segment (C: 2048; smaller here for speed)

class Seg:
    def __init__(s, pos): s.pos, s.n, s.bit, s.owner, s.edges = pos, 0, False, None, set()

class Tape:
    def __init__(t): t.segs, t.cur = [], None
    def push(t, inputs):
        if t.cur is None or t.cur.n == SEG:
            t.cur = Seg(len(t.segs)); t.segs.append(t.cur)
        s = t.cur; o = s.n; s.n += 1
        return Node(s, o, inputs)

class Node:
    __slots__ = ("seg", "off", "inputs", "key", "__weakref__")
    def __init__(n, s, o, inputs): n.seg, n.off, n.inputs, n.key = s, o, inputs, None

class Owner:                                # "seg": per segment; "node": per custom node or join
    __slots__ = ("rules", "deps", "seg", "__weakref__")
    def __init__(o, seg=None): o.rules, o.deps, o.seg = {}, [], seg

ALIVE = weakref.WeakSet()                   # every owner made
RULES = weakref.WeakValueDictionary()       # key -> owner holding the rule (the sweep's lookup)

class V:
    __slots__ = ("node", "own", "__weakref__")

def seg_owner(s):
    if s.owner is None or s.owner() is None:
        o = Owner(s); ALIVE.add(o); s.owner = weakref.ref(o)
    return s.owner()

def make(design, tape, inputs, custom=None):
    """A Value of a new node using the Values `inputs`; custom: its rule's
    maker (called with the new Value, returns the rule) or None."""
    n = tape.push([v.node for v in inputs])
    v = V(); v.node = n; v.own = None
    W = n.seg
    if design == "seg":
        keep = W.owner() if W.owner is not None else None   # (held until v holds it)
        for x in inputs:                    # C: OR of the bits, and the edge request
            S = x.node.seg
            if S.bit:
                W.bit = True
                if S is not W and S not in W.edges:
                    keep = seg_owner(W); keep.deps.append(seg_owner(S)); W.edges.add(S)
        if custom:
            W.bit = True
            own = seg_owner(W)
            n.key = (W.pos, n.off); own.rules[n.off] = custom(v); RULES[n.key] = own
        if W.bit:
            v.own = seg_owner(W)
    else:
        owns = []
        for x in inputs:
            if x.own is not None and all(x.own is not o for o in owns):
                owns.append(x.own)
        if custom:
            o = Owner(); ALIVE.add(o); o.deps = owns
            n.key = id(n); o.rules[n.key] = custom(v); RULES[n.key] = o
            v.own = o
        elif len(owns) == 1:
            v.own = owns[0]
        elif owns:
            o = Owner(); ALIVE.add(o); o.deps = owns; v.own = o
    return v

def rule_for(x, y, out):                    # micrograd's closure: captures its Values
    def _backward():
        return x, y, out
    return _backward

def run(design, steps, step_ops=10):
    tape = Tape()
    w1, w2 = make(design, tape, []), make(design, tape, [])
    bias = make(design, tape, [])           # three parameters: an odd start, so that no
    # segment boundary (every 64 nodes) ever falls between two 10-node steps
    loss = None
    for step in range(steps):
        x = make(design, tape, [w1])
        y = make(design, tape, [w2])
        out = make(design, tape, [x, y], custom=lambda v: rule_for(x, y, v))
        z = out
        for k in range(step_ops - 3):       # the rest of the step
            z = make(design, tape, [z, w1 if k % 2 else w2])
        loss = z
        del x, y, out, z
    gc.collect()
    # segments a live Value holds (C keeps them and everything they use)
    held = {id(v.node.seg) for v in gc.get_objects() if isinstance(v, V)}
    # backward from loss: every custom node it reaches must have its rule
    seen, stack, missing = set(), [loss.node], 0
    while stack:
        n = stack.pop()
        if id(n) in seen: continue
        seen.add(id(n))
        if n.key is not None and RULES.get(n.key) is None: missing += 1
        stack.extend(n.inputs)
    return len(ALIVE), len(held), missing

if __name__ == "__main__":
    for design in ("seg", "node"):
        for steps in (100, 1000, 3000):
            owners, held, missing = run(design, steps)
            print(f"{design:4s} {steps:5d} steps ({steps * 10 // SEG:4d} segments recorded): "
                  f"{owners:5d} owners alive, {held:4d} segments held by live Values, "
                  f"{missing} rules missing for the kept loss's backward")
            gc.collect()
