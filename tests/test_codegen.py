"""The code generator (tapead/codegen): what it writes for each kernel shape.

Whether generated kernels compute the interpreter's bits is tests/test_native.py's
subject (the interpreter is the reference there); here, that the source each
shape writes for a fixed set of programs is the one recorded in
tests/codegen_golden.json, so a change to the generator that was meant to
leave its output alone is seen to do so (tests/codegen_golden.py --update
records a deliberate change; --dump writes the sources out to diff)."""
import codegen_golden


def test_generated_sources_are_the_recorded_ones():
    with open(codegen_golden.GOLDEN) as f:
        want = codegen_golden.json.load(f)
    got = codegen_golden.current()
    assert sorted(got) == sorted(want)
    assert [k for k in sorted(got) if got[k] != want[k]] == []
