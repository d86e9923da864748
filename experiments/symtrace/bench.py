"""Process time: the engine's interpreted transform + accounting vs the generated code.

usage: python experiments/symtrace/bench.py [--n 100] [--K 8] [--moves 400] [--reps 7] [--f split_merge]

The (model_in, aux_in) pairs of a chain (seeded as check.py; 50 warm-up moves, then
--moves moves) are kept with the engine's application of each. Both sides then run over
the same pairs, A/B alternated in one process, best of --reps (one torch thread):

A (engine): run_transform, output_choices (model, aux), the output label checks and
  _account (which includes reduced_jacobian and logabsdet) -- apply_transform less the
  model update and the auxiliary generate (the new traces are the engine's, made before);
B (generated): the generated function (reads, guards, float code with tangents, written
  values as tensors, the reduced matrix, logabsdet) and its membership checks on the new
  model trace.

Then, for --f's keys: the one-time cost of tracing one key (trace_once, which includes
the symbolic accounting), generating the trie's source, and compile().
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import imcmc_lab as il
from imcmc_lab.examples import mixture as m
from imcmc_lab.transform.apply import Application, _account, _check_output_labels
from imcmc_lab.transform.interpreter import AUX, MODEL, run_transform

import symtrace as st

KERNELS = {
    "split_merge": (m.split_merge, m.split_merge_aux, ()),
    "birth_death": (m.birth_death, m.birth_death_aux, ()),
    "move_cluster": (m.move_cluster, m.move_cluster_aux, (0.5, 0.3)),
    "move_weights": (m.move_weights, m.move_weights_aux, (0.3,)),
    "swap_last": (m.swap_last, m.swap_aux, ()),
}


def engine_side(f, pairs):
    for x, y, app in pairs:
        run = run_transform(f, x, y)
        nm, na = app.new_model, app.new_aux
        run.output_choices(MODEL)
        _check_output_labels(run, MODEL, nm)
        run.output_choices(AUX)
        _check_output_labels(run, AUX, na)
        a = Application()
        _account(run, x, y, nm, na, a)
        a.jacobian.logabsdet


def generated_side(c, pairs):
    for x, y, app in pairs:
        out = c(x, y)
        xn = app.new_model.flat_records()
        for a, want in out[3]:
            if (a in xn) != want:
                raise AssertionError


def best(fn, reps):
    b = 1e9
    for _ in range(reps):
        t = time.process_time()
        fn()
        b = min(b, time.process_time() - t)
    return b


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--K", type=int, default=8)
    p.add_argument("--moves", type=int, default=400)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--f", default="split_merge")
    args = p.parse_args()
    torch.set_num_threads(1)
    f, q, qa = KERNELS[args.f]
    n, K = args.n, args.K
    torch.manual_seed(n)
    data = m.synthetic_data(n, seed=n)
    trace, _ = m.gmm.generate((n,), {"x": data, "k": K})
    if args.f == "split_merge":
        kernel = il.InvolutiveKernel(q, qa, f)
    else:   # the other moves keep k: interleave split/merge so that k moves too
        kernel = il.cycle(il.InvolutiveKernel(m.split_merge_aux, (), m.split_merge),
                          il.InvolutiveKernel(q, qa, f))
    own = kernel if args.f == "split_merge" else kernel.kernels[1]
    pairs = []
    for i in range(50 + args.moves):
        trace, _ = kernel(trace)
        rec = own.last_record
        if i >= 50:
            pairs.append((rec.model_in, rec.aux_in, rec._application))
    # one-time costs: learn every key met, timing its parts
    c = st.Compiled(f, q, qa)
    trace_s, gen_s, comp_s, lines = [], [], [], []
    for x, y, app in pairs:
        if c(x, y) is not None:
            continue
        t0 = time.process_time()
        items = st.trace_once(f, x, y, app)
        t1 = time.process_time()
        st.insert(c.root, items)
        src = st.source(c.root)
        t2 = time.process_time()
        code = compile(src, "<symtrace>", "exec")
        t3 = time.process_time()
        ns = dict(st._NAMESPACE)
        exec(code, ns)
        c.run, c.src, c.keys = ns["_compiled"], src, c.keys + 1
        trace_s.append(t1 - t0)
        gen_s.append(t2 - t1)
        comp_s.append(t3 - t2)
        lines.append(len(src.splitlines()))
        assert c(x, y) is not None
    eng, gen = [], []
    for _ in range(2):
        eng.append(best(lambda: engine_side(f, pairs), args.reps))
        gen.append(best(lambda: generated_side(c, pairs), args.reps))
    per = lambda s: s / len(pairs) * 1e6
    print(f"{args.f} n={n} K={K}: {len(pairs)} moves, {c.keys} keys; per move, best of {args.reps}, "
          f"two alternations:")
    print(f"  engine run_transform + outputs + label checks + _account: "
          f"{per(eng[0]):.1f} / {per(eng[1]):.1f} us")
    print(f"  generated code + membership checks:                      "
          f"{per(gen[0]):.1f} / {per(gen[1]):.1f} us   (engine/generated "
          f"{eng[0] / gen[0]:.2f}x / {eng[1] / gen[1]:.2f}x)")
    fmt = lambda xs: f"median {sorted(xs)[len(xs) // 2] * 1e3:.2f} ms, max {max(xs) * 1e3:.2f} ms"
    print(f"  one-time, per key (n = {len(trace_s)}): trace {fmt(trace_s)}; source of the whole trie "
          f"{fmt(gen_s)}; compile() {fmt(comp_s)}; trie source {lines[0]} -> {lines[-1]} lines")


if __name__ == "__main__":
    main()
