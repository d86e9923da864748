"""Bad input for the inference layer: what the user does, the error they must see."""

from __future__ import annotations

import torch

import imcmc_lab as il
from imcmc_lab.errors import AddressError
from imcmc_lab.examples import two_clusters

from . import Case


@il.gen
def _normal_mean(n):
    mu = il.normal(0.0, 2.0) @ "mu"
    il.iid(il.normal(mu, 1.0), n) @ "x"


def _trace():
    trace, _ = _normal_mean.generate((3,), {"x": torch.tensor([0.5, 1.0, 1.5]), "mu": 0.0})
    return trace


def _run(kernel=None, trace="start", steps=5, **options):
    kernel = kernel if kernel is not None else il.MH(il.select("mu"))
    return il.run_chain(kernel, _trace() if trace == "start" else trace, steps, progress=False, **options)


@il.gen
def _scaled_step(trace, scale):
    il.normal(0.0, scale) @ "u"


@il.transform
def _shift_mean(model_in, aux_in, model_out, aux_out):
    mu, u = il.read(model_in["mu"], il.continuous), il.read(aux_in["u"], il.continuous)
    il.write(model_out["mu"], mu + u, il.continuous)
    il.write(aux_out["u"], -u, il.continuous)


def _move(q_args, q=_scaled_step, f=_shift_mean, trace="start"):
    return il.involutive_mcmc(_trace() if trace == "start" else trace, q, q_args, f)


CASES: list[Case] = [
    # involutive_mcmc(trace, q, q_args, f) called wrongly: Python's "'float' object is not
    # iterable", "... takes 2 positional arguments but 3 were given" or "'Transform' object
    # has no attribute 'simulate'" from inside the engine before
    # a name the chain did not record: a bare KeyError('kk') from inside Chain.values before
    Case("chain-values-name-typo", lambda: _run(record={"mean": "mu"}).values("maen"), AddressError,
         ("'maen'", "recorded names are 'mean'", "Did you mean 'mean'", "record=")),
    Case("involutive-mcmc-q-args-a-number", lambda: _move(0.5), TypeError, ("q_args", "0.5", "(0.5,)")),
    Case("involutive-kernel-q-args-a-number", lambda: il.InvolutiveKernel(_scaled_step, 0.5, _shift_mean),
         TypeError, ("q_args", "(0.5,)")),
    Case("involutive-mcmc-q-args-too-many", lambda: _move((0.5, 2.0)), TypeError,
         ("_scaled_step(trace, *q_args)", "(0.5, 2.0)", "too many", "one value for each parameter")),
    Case("involutive-mcmc-q-args-missing", lambda: _move(()), TypeError,
         ("_scaled_step(trace, *q_args)", "missing", "'scale'")),
    Case("involutive-mcmc-q-and-f-swapped", lambda: _move((0.5,), q=_shift_mean, f=_scaled_step), TypeError,
         ("q must be the auxiliary program", "_shift_mean", "order")),
    Case("involutive-mcmc-trace-and-q-swapped", lambda: _move((0.5,), q=_trace(), trace=_scaled_step),
         TypeError, ("trace must be a trace", "order")),
    # issue 16, item 5: a selection that names no address of the trace (a typo) ran as the identity
    Case("mh-function-selection-typo", lambda: il.mh(_trace(), il.select("muu")), AddressError,
         ("'muu'", "did you mean 'mu'", "select")),
    Case("mh-kernel-selection-typo", lambda: _run(il.MH(il.select("muu"))), AddressError,
         ("'muu'", "did you mean 'mu'")),
    Case("mh-kernel-one-of-two-selected-is-a-typo", lambda: _run(il.MH(il.select("mu", "xs"))), AddressError,
         ("'xs'", "did you mean 'x'")),
    Case("mh-selection-index-in-a-missing-namespace", lambda: il.mh(_trace(), il.select(("muu", 1))),
         AddressError, ("('muu', 1)", "namespace")),
    Case("hmc-selection-typo", lambda: _run(il.HMC(il.select("muu"))), AddressError,
         ("'muu'", "did you mean 'mu'")),
    Case("hmc-selection-of-discrete-choices-only",
         lambda: il.hmc(two_clusters.initial_trace(torch.tensor([0.5, 1.0])), il.select("k")),
         il.ImcmcError, ("hmc", "select('k')", "no continuous choice", "MH")),
    # ... and a record entry that is in no sample gave NaN silently
    Case("record-address-typo", lambda: _run(record=["muu"]), AddressError,
         ("'muu'", "did you mean 'mu'", "no sample", "err.chain")),
    Case("record-dict-address-typo", lambda: _run(record={"mean": "muu"}), AddressError,
         ("'muu'", "'mean'", "did you mean 'mu'")),
    # issue 16, item 21: run_chain's arguments
    Case("run-chain-thin-zero", lambda: _run(thin=0), ValueError, ("thin", "0", "at least 1")),
    Case("run-chain-thin-negative", lambda: _run(thin=-2), ValueError, ("thin", "-2")),
    Case("run-chain-steps-negative", lambda: _run(steps=-1), ValueError, ("steps", "-1")),
    Case("run-chain-steps-not-an-integer", lambda: _run(steps=2.5), TypeError, ("steps", "2.5", "integer")),
    Case("run-chain-chains-zero", lambda: _run(chains=0), ValueError, ("chains", "0")),
    Case("run-chain-threads-zero", lambda: _run(threads=0), ValueError, ("threads", "0")),
    Case("run-chain-trace-none", lambda: _run(trace=None), TypeError,
         ("start trace", "None", "simulate", "generate")),
    Case("repeat-count-not-an-integer", lambda: il.repeat(il.MH(il.select("mu")), 2.5), ValueError,
         ("repeat", "positive integer", "2.5")),
    Case("run-chain-trace-not-a-trace", lambda: _run(trace={"mu": 0.0}), TypeError,
         ("start trace", "dict", "generate")),
]
