"""The code generator (tapead/codegen): what it writes for each kernel shape.

Whether generated kernels compute the interpreter's bits is tests/test_native.py's
subject (the interpreter is the reference there); here, that the source each
shape writes for a fixed set of programs is the one recorded in
tests/codegen_golden.json, so a change to the generator that was meant to
leave its output alone is seen to do so (tests/codegen_golden.py --update
records a deliberate change; --dump writes the sources out to diff)."""
import pytest

import codegen_golden


def test_generated_sources_are_the_recorded_ones():
    with open(codegen_golden.GOLDEN) as f:
        want = codegen_golden.json.load(f)
    got = codegen_golden.current()
    assert sorted(got) == sorted(want)
    assert [k for k in sorted(got) if got[k] != want[k]] == []


def test_lowering_follows_the_interpreters_code():
    """Every row instruction is in the forward sweep, in order; summed, the
    adjoint of a uniform node goes to an accumulator folded into its uniform
    adjoint, per sample to its row; every accumulator is folded once."""
    import tapead
    from tapead.codegen import Code, lower
    from test_native import random_graph
    outs, xs, wrt = random_graph(5, n=30)
    code = Code.of(tapead.compile(outs, xs, wrt=wrt, native=False))
    fw = lower.forward(code)
    assert [s.k for s in fw.stmts if isinstance(s, (lower.Op, lower.Dot))] == [k for k, *_ in code.ins]
    assert isinstance(fw.stmts[fw.check], lower.Check)
    for mode in ("sum", "ps"):
        rv = lower.reverse(code, mode)
        dests = [d for s in rv.stmts for d in lower.dests(s) if d is not None]
        rows = {d.k for d in dests if isinstance(d, lower.Row)}
        accs = [d.i for d in dests if isinstance(d, lower.Acc)]
        if mode == "ps":
            assert not accs and not rv.fold and any(code.uni[k] for k in rows)
        else:
            assert not any(code.uni[k] for k in rows)
            assert sorted(accs + [s.i for s in rv.stmts if isinstance(s, lower.WrtSum)]) == \
                [f.i for f in rv.fold] == list(range(len(rv.fold)))
    with pytest.raises(ValueError):
        lower.reverse(code, "backward")


def test_a_shape_is_a_name_or_a_value():
    import tapead
    from tapead import codegen
    x, w = tapead.Value(0.3), tapead.Value(2.0)
    code = codegen.Code.of(tapead.compile(w * x, [x], wrt=[w], native=False))
    for name, s in codegen.SHAPES.items():
        assert codegen.shape(name) is s and codegen.source(code, name)[0] == codegen.source(code, s)[0]
    assert len(codegen.source(code, codegen.SHAPES["split"]._replace(part=1, units=2))[0]) == 2
    with pytest.raises(ValueError, match="shape must be one of"):
        codegen.shape("lanes3")
    with pytest.raises(ValueError, match="native must be"):
        tapead.compile(w * x, [x], wrt=[w], native="lanes3")
