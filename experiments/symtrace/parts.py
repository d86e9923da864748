"""Where the generated split_merge code's time goes: the same pairs as bench.py, with parts of
its namespace replaced by constant-time stand-ins (process time, best of 7, alternated).

usage: python experiments/symtrace/parts.py [--n 100] [--K 8]
"""
import os
import sys
import time

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import imcmc_lab as il
from imcmc_lab.examples import mixture as m

import bench
import symtrace as st


def main():
    n = int(sys.argv[sys.argv.index("--n") + 1]) if "--n" in sys.argv else 100
    K = int(sys.argv[sys.argv.index("--K") + 1]) if "--K" in sys.argv else 8
    torch.set_num_threads(1)
    torch.manual_seed(n)
    data = m.synthetic_data(n, seed=n)
    trace, _ = m.gmm.generate((n,), {"x": data, "k": K})
    kernel = il.InvolutiveKernel(m.split_merge_aux, (), m.split_merge)
    pairs = []
    for i in range(450):
        trace, _ = kernel(trace)
        if i >= 50:
            r = kernel.last_record
            pairs.append((r.model_in, r.aux_in, r._application))
    c = st.Compiled(m.split_merge, m.split_merge_aux)
    for x, y, app in pairs:
        if c(x, y) is None:
            c.learn(x, y, app)
    variants = {
        "full": {},
        "no logabsdet": {"_ld": lambda M: 0.0},
        "no output tensors": {"_fn": lambda a: a, "_arr": lambda v: v, "_f64v": lambda v: v},
        "neither": {"_ld": lambda M: 0.0, "_fn": lambda a: a, "_arr": lambda v: v, "_f64v": lambda v: v},
    }
    fns = {}
    for name, repl in variants.items():
        ns = dict(st._NAMESPACE, **repl)
        exec(compile(c.src, "<v>", "exec"), ns)
        fns[name] = ns["_compiled"]
    res = {k: [] for k in fns}
    for _ in range(2):
        for name, fn in fns.items():
            c.run = fn
            res[name].append(bench.best(lambda: bench.generated_side(c, pairs), 7) / len(pairs) * 1e6)
    for name, v in res.items():
        print(f"{name:>18}: {v[0]:.1f} / {v[1]:.1f} us a move")


if __name__ == "__main__":
    main()
