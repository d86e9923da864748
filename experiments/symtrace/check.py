"""Agreement of the generated code with the engine, move by move, on chained moves.

usage: python experiments/symtrace/check.py [--moves 600] [--n 100] [--K 8] [--all]

For each move of the engine's chain (seeded as the s12 hexchain: torch.manual_seed(n),
synthetic_data(n, seed=n), k = K), the generated code runs on the move's (model_in,
aux_in); on a miss the transform is traced (with the engine's application of that move
giving the new traces' order) and the code regenerated. Its written values (model and aux
choices), log|det J| and membership checks are compared with the engine's, bit for bit.
--all: the full mixture_kernel cycle (swap, split/merge, birth/death, 3 cluster moves,
weights), each transform with its own generated code; K moves = K sweeps.
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import imcmc_lab as il
from imcmc_lab.examples import mixture as m
from imcmc_lab.transform.interpreter import AUX, MODEL

import symtrace as st


def same_value(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
                and a.shape == b.shape and a.tolist() == b.tolist()
                and all(math.copysign(1, u) == math.copysign(1, v) for u, v in
                        zip(a.reshape(-1).tolist(), b.reshape(-1).tolist())))
    return type(a) is type(b) and a == b


def compare(out, rec):
    mo, ao, ld, post = out
    app = rec._application
    emo, eao = app.run.output_choices(MODEL), app.run.output_choices(AUX)
    problems = []
    for mine, eng, side in ((mo, emo, "model"), (ao, eao, "aux")):
        if list(mine) != list(eng) and set(mine) != set(eng):
            problems.append(f"{side} addresses {sorted(mine)} vs {sorted(eng)}")
            continue
        for a in eng:
            if not same_value(mine[a], eng[a]):
                problems.append(f"{side} {a}: {mine[a]!r} vs {eng[a]!r}")
    eld = app.logabsdet
    if not (ld == eld or (math.isnan(ld) and math.isnan(eld))) or math.copysign(1, ld) != math.copysign(1, eld):
        problems.append(f"log|det| {ld!r} vs {eld!r} (diff {abs(ld - eld)!r})")
    xn = app.new_model.flat_records()
    for a, want in post:
        if (a in xn) != want:
            problems.append(f"post check {a}")
    return problems, (abs(ld - eld) if math.isfinite(ld) and math.isfinite(eld) else 0.0)


class Watch:
    """Generated code beside one engine kernel: counts hits, misses, keys, learn costs."""

    def __init__(self, f, q, q_args=()):
        self.c = st.Compiled(f, q, q_args)
        self.hits = self.misses = self.unsupported_moves = self.moves = 0
        self.learn_s = []
        self.bad = []
        self.maxdiff = 0.0

    def see(self, rec):
        self.moves += 1
        x, y = rec.model_in, rec.aux_in
        out = self.c(x, y)
        if out is None:
            self.misses += 1
            t = time.process_time()
            ok = self.c.learn(x, y, rec._application)
            self.learn_s.append(time.process_time() - t)
            out = self.c(x, y) if ok else None
            if out is None:
                self.unsupported_moves += 1
                return
        else:
            self.hits += 1
        problems, diff = compare(out, rec)
        self.maxdiff = max(self.maxdiff, diff)
        if problems:
            self.bad.append((self.moves, problems))

    def report(self, name):
        ls = sorted(self.learn_s)
        med = ls[len(ls) // 2] * 1e6 if ls else 0
        print(f"{name}: {self.moves} moves, {self.c.keys} keys, {self.misses} misses "
              f"({self.unsupported_moves} moves left to the engine: {self.c.unsupported}), "
              f"disagreeing moves {len(self.bad)}, max |log|det| diff| {self.maxdiff!r}; "
              f"learn (trace + codegen + compile of the whole trie) median {med:.0f} us, "
              f"total {sum(ls) * 1e3:.1f} ms; source {len(self.c.src.splitlines())} lines")
        for b in self.bad[:3]:
            print("   ", b)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--moves", type=int, default=600)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--K", type=int, default=8)
    p.add_argument("--all", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    n, K = args.n, args.K
    torch.manual_seed(n)
    data = m.synthetic_data(n, seed=n)
    trace, _ = m.gmm.generate((n,), {"x": data, "k": K})
    if not args.all:
        kernel = il.InvolutiveKernel(m.split_merge_aux, (), m.split_merge)
        w = Watch(m.split_merge, m.split_merge_aux)
        ks = set()
        for _ in range(args.moves):
            trace, _ = kernel(trace)
            w.see(kernel.last_record)
            ks.add(kernel.last_record.model_in["k"])
        w.report(f"split_merge n={n} K={K} (k values met: {sorted(ks)})")
        return w
    kernels = [
        ("swap_last", il.InvolutiveKernel(m.swap_aux, (), m.swap_last), m.swap_last, m.swap_aux, ()),
        ("split_merge", il.InvolutiveKernel(m.split_merge_aux, (), m.split_merge), m.split_merge,
         m.split_merge_aux, ()),
        ("birth_death", il.InvolutiveKernel(m.birth_death_aux, (), m.birth_death), m.birth_death,
         m.birth_death_aux, ()),
        ("move_cluster", il.InvolutiveKernel(m.move_cluster_aux, (0.5, 0.3), m.move_cluster),
         m.move_cluster, m.move_cluster_aux, (0.5, 0.3)),
        ("move_weights", il.InvolutiveKernel(m.move_weights_aux, (0.3,), m.move_weights),
         m.move_weights, m.move_weights_aux, (0.3,)),
    ]
    watches = {name: Watch(f, q, qa) for name, _, f, q, qa in kernels}
    ks = set()
    for _ in range(args.moves):
        for name, kernel, *_ in kernels:
            for _ in range(3 if name == "move_cluster" else 1):
                trace, _ = kernel(trace)
                watches[name].see(kernel.last_record)
        ks.add(trace["k"])
    print(f"mixture cycle, {args.moves} sweeps, n={n} K={K}, k values met: {sorted(ks)}")
    for name, w in watches.items():
        w.report(name)


if __name__ == "__main__":
    main()
