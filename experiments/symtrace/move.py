"""A whole involutive move with the generated transform code in place of the interpreter and
``_account`` (an experiment: the engine's apply_transform is not changed).

``CompiledMove(q, q_args, f)`` is a kernel: the auxiliary program's simulate, the generated
code (a miss: the engine's ``apply_transform`` for this move, then the key is learned), the
model's ``update_detailed`` with the written choices, the membership checks, ``q``'s
``generate_detailed`` at the new trace, and Algorithm 2's decision -- the engine's terms in
the engine's order, so a chain draws the same numbers and makes the same decisions. Anything
unusual (a fresh address, a kind change, auxiliary choices that do not fit, a log|det| that
is not finite, a failed membership check) finishes the move on the engine's path.

usage: python experiments/symtrace/move.py [--n 100] [--K 8] [--moves 400] [--reps 5]
  1. agreement: 600 chained moves, engine kernel vs CompiledMove from the same seed: log alpha,
     decisions and the final score hashed (as the session-12 hexchain check does);
  2. process time per chained move, best of --reps x --moves, A/B alternated twice.
"""
import hashlib
import math
import os
import sys
import time

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import imcmc_lab as il
from imcmc_lab.examples import mixture as m
from imcmc_lab.inference.acceptance import metropolis_accept
from imcmc_lab.transform.apply import Application, _account, _check_output_labels, apply_transform
from imcmc_lab.transform.interpreter import AUX, MODEL, run_transform

import symtrace as st


class CompiledMove:
    def __init__(self, q, q_args, f):
        self.q, self.q_args, self.f = q, tuple(q_args), f
        self.c = st.Compiled(f, q, q_args)
        self.engine_moves = 0
        self.last_log_alpha = None

    def _engine(self, trace, aux, log_q_old):
        self.engine_moves += 1
        app = apply_transform(self.f, trace, aux, self.q, self.q_args)
        app.raise_jacobian_problem()
        if self.c(trace, aux) is None:
            self.c.learn(trace, aux, app)
        if app.problem is not None:
            self.last_log_alpha = -math.inf
            return trace, False
        log_alpha = app.model_log_ratio + app.log_q_new - log_q_old + app.logabsdet
        return self._decide(trace, app.new_model, log_alpha)

    def _decide(self, trace, new, log_alpha):
        if math.isnan(log_alpha):
            log_alpha = -math.inf
        self.last_log_alpha = log_alpha
        accepted = metropolis_accept(log_alpha)
        return (new if accepted else trace), accepted

    def __call__(self, trace):
        aux = self.q.simulate(trace, *self.q_args)
        log_q_old = aux.score
        out = self.c(trace, aux)
        if out is None:
            return self._engine(trace, aux, log_q_old)
        mo, ao, ld, post = out
        if not math.isfinite(ld):
            return self._engine(trace, aux, log_q_old)
        result = trace.update_detailed(mo)
        if result.fresh or result.kind_changed:
            return self._engine(trace, aux, log_q_old)
        new = result.trace
        xn = new.flat_records()
        for a, want in post:
            if (a in xn) != want:
                return self._engine(trace, aux, log_q_old)
        gen = self.q.generate_detailed((new,) + self.q_args, ao, strict=False)
        if gen.fresh or len(gen.trace.flat_records()) != len(ao) + _discrete_free(gen):
            return self._engine(trace, aux, log_q_old)
        weight = result.weight
        if weight == -math.inf or math.isnan(weight) or gen.trace.score == -math.inf:
            self.last_log_alpha = -math.inf      # the engine's support problem: no draw
            return trace, False
        return self._decide(trace, new, weight + gen.trace.score - log_q_old + ld)


class InterpretedMove(CompiledMove):
    """The same skeleton as CompiledMove with the engine's interpreter and ``_account`` in place
    of the generated code (run_transform, output_choices, the label checks, _account): the
    difference between the two is what the generated code saves inside a move."""

    def __call__(self, trace):
        aux = self.q.simulate(trace, *self.q_args)
        log_q_old = aux.score
        run = run_transform(self.f, trace, aux)
        result = trace.update_detailed(run.output_choices(MODEL))
        if result.fresh or result.kind_changed:
            return self._engine(trace, aux, log_q_old)
        new = result.trace
        _check_output_labels(run, MODEL, new)
        ao = run.output_choices(AUX)
        gen = self.q.generate_detailed((new,) + self.q_args, ao, strict=False)
        if gen.fresh or len(gen.trace.flat_records()) != len(ao):
            return self._engine(trace, aux, log_q_old)
        _check_output_labels(run, AUX, gen.trace)
        app = Application()
        _account(run, trace, aux, new, gen.trace, app)
        ld = app.jacobian.logabsdet
        if not math.isfinite(ld):
            return self._engine(trace, aux, log_q_old)
        weight = result.weight
        if weight == -math.inf or math.isnan(weight) or gen.trace.score == -math.inf:
            self.last_log_alpha = -math.inf
            return trace, False
        return self._decide(trace, new, weight + gen.trace.score - log_q_old + ld)


def _discrete_free(gen):
    return 0        # (every auxiliary choice of these programs is written or copied)


def chain_hash(kernel_fn, last_alpha, n, K, moves):
    torch.manual_seed(n)
    data = m.synthetic_data(n, seed=n)
    trace, _ = m.gmm.generate((n,), {"x": data, "k": K})
    h = hashlib.sha256()
    for _ in range(moves):
        trace, a = kernel_fn(trace)
        h.update(float(last_alpha()).hex().encode() + bytes([a]))
    h.update(float(trace.score).hex().encode())
    return h.hexdigest()


def main():
    arg = lambda name, d: int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else d
    n, K, moves, reps = arg("--n", 100), arg("--K", 8), arg("--moves", 400), arg("--reps", 5)
    torch.set_num_threads(1)
    engine = il.InvolutiveKernel(m.split_merge_aux, (), m.split_merge)
    comp = CompiledMove(m.split_merge_aux, (), m.split_merge)
    interp = InterpretedMove(m.split_merge_aux, (), m.split_merge)
    he = chain_hash(engine, lambda: engine.last_record.log_alpha, n, K, 600)
    hc = chain_hash(comp, lambda: comp.last_log_alpha, n, K, 600)
    hi = chain_hash(interp, lambda: interp.last_log_alpha, n, K, 600)
    print(f"600 chained moves n={n} K={K}: engine {he[:16]}, compiled {hc[:16]}, skeleton {hi[:16]}: "
          f"{'IDENTICAL' if he == hc == hi else 'DIFFERENT'}; compiled: {comp.c.keys} keys, "
          f"{comp.engine_moves} moves on the engine's path")
    torch.manual_seed(n + K)
    data = m.synthetic_data(n, seed=n + K)
    start, _ = m.gmm.generate((n,), {"x": data, "k": K})
    sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
    import numpy as np
    import numpy_split_merge as hand
    x = data.numpy()
    rng = np.random.default_rng(n + K)

    def hand_kernel(state):
        return hand.move(state, x, rng)

    hs = hand.State(np.array([float(start["mu", j]) for j in range(1, K + 1)]),
                    np.array([float(start["var", j]) for j in range(1, K + 1)]),
                    start["weights"].numpy().copy())
    hs.log_joint = hand.log_joint(hs, x)
    states = {"hand": hs}
    kernels = (("engine", engine), ("skeleton", interp), ("compiled", comp))
    for name, kern in kernels:
        t = start
        for _ in range(50):
            t = kern(t)[0]
        states[name] = t
    res = {"engine": [], "skeleton": [], "compiled": [], "hand": []}
    for _ in range(2):
        for name, kern in kernels + (("hand", hand_kernel),):
            b = 1e9
            for _ in range(reps):
                t = states[name]
                t0 = time.process_time()
                for _ in range(moves):
                    t = kern(t)[0]
                b = min(b, time.process_time() - t0)
                states[name] = t
            res[name].append(b / moves * 1e6)
    e, i, c = res["engine"], res["skeleton"], res["compiled"]
    print(f"chained move, process time, best of {reps} x {moves}, two alternations: engine kernel "
          f"{e[0]:.1f} / {e[1]:.1f} us; skeleton with the interpreter + _account {i[0]:.1f} / {i[1]:.1f} us; "
          f"skeleton with the generated code {c[0]:.1f} / {c[1]:.1f} us (generated vs interpreted in the "
          f"same skeleton: -{i[0] - c[0]:.1f} / -{i[1] - c[1]:.1f} us; {comp.engine_moves} moves in all on "
          f"the engine's path)")
    h = res["hand"]
    print(f"hand-coded NumPy kernel (benchmarks/numpy_split_merge.py, chained, same alternation): "
          f"{h[0]:.1f} / {h[1]:.1f} us; hand/engine {h[0] / e[0]:.3f} / {h[1] / e[1]:.3f}, "
          f"hand/generated {h[0] / c[0]:.3f} / {h[1] / c[1]:.3f}")


if __name__ == "__main__":
    main()
