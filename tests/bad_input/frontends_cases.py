"""Bad input for the frontends layer: what the user does, the error they must see."""

from __future__ import annotations

from imcmc_lab.magics import compile_gen_cell, compile_transform_cell, parse_transform_signature

from . import Case


def gen_cell(body: str):
    """Compile a ``%%gen`` cell body as the magic does (line 1 is the ``%%gen`` line)."""
    return lambda: compile_gen_cell(body, "<cell>", "%%gen")


def transform_cell(body: str, signature: str = "f (model_in, aux_in) to (model_out, aux_out)"):
    """Compile a ``%%transform`` cell body as the magic does."""
    return lambda: compile_transform_cell(parse_transform_signature(signature), body, "<cell>",
                                          "%%transform " + signature)


CASES: list[Case] = [
    # issue 16 item 7: annotated `~` compiled to an annotation that is never evaluated
    Case("magics-annotated-tilde",
         gen_cell("def m():\n    x: float ~ normal(0, 1)\n    return x\n"),
         SyntaxError, ("annotation", "x ~ normal")),
    Case("magics-bare-unary-tilde",
         gen_cell("def m():\n    ~ normal(0, 1)\n"),
         SyntaxError, ("no name", '{"x"} ~')),
    Case("magics-read-without-call",
         transform_cell('x = @read\nwrite(model_out["x"], x, continuous)\n'),
         SyntaxError, ("@read", "(")),
    Case("magics-write-without-call",
         transform_cell("@write\n"),
         SyntaxError, ("@write", "(")),
    # issue 17: an unclosed bracket is Python's error at its own line, not `~` advice later
    Case("magics-unclosed-bracket-before-a-later-tilde",
         gen_cell("def q(trace):\n    moved ~ bernoulli(0.5\n    if moved:\n        shift = 1.0\n"
                  "    else:\n        shift = 0.0\n    delta ~ normal(shift, 1)\n"),
         SyntaxError, ("'(' was never closed",)),
]
