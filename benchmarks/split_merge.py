"""Split/merge moves per second: the engine against a hand-coded NumPy kernel.

The paper's Fig. 1 model, auxiliary program and transform run through the
engine (:mod:`imcmc_lab.examples.mixture`) and, in the same run, the same kernel
written by hand in NumPy (:mod:`numpy_split_merge`: the same proposal, the
analytic Richardson-Green Jacobian, the log joint of the current state cached).

1. Agreement: for every (n, K), the two compute the same ``log alpha`` on fixed
   (state, auxiliary choice) pairs -- splits of several clusters and merges of
   several clusters with the last. The run stops with exit status 1 if not.
2. Speed: moves per second from a fixed state of ``K`` clusters (each move is
   proposed, scored and accepted or rejected, and the state is reset, so every
   move costs what a move at that ``K`` costs), median of several repetitions,
   for n in {100, 1000, 10000} and K in {2, 8, 32}; the ratio engine/hand-coded.
3. Ablations at K = 8: incremental update off (the model trace is re-generated
   from all its choices, as an engine without incremental update must), the
   model's per-cluster comprehensions run element by element instead of as
   indexed families (``@gen(lower=False)``), the
   float path off (the transform runs on torch autograd tensors and the reduced
   Jacobian comes from one batched backward pass) and copy elimination off
   (log |det J| from the full Jacobian over every continuous coordinate, data
   included).

Run: ``python benchmarks/split_merge.py`` (about 1 minute; ``--quick`` for fewer
repetitions). Results are in benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import platform
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import numpy_split_merge as hand  # noqa: E402

import imcmc_lab as il  # noqa: E402
from imcmc_lab.examples import mixture as m  # noqa: E402

torch.set_num_threads(1)   # tiny tensors: one intra-op thread is fastest (and NumPy uses one)

NS = (100, 1000, 10000)
KS = (2, 8, 32)


def make_state(n, K, seed):
    """The engine trace and the matching NumPy state (same values)."""
    torch.manual_seed(seed)
    data = m.synthetic_data(n, seed=seed)
    trace, _ = m.gmm.generate((n,), {"x": data, "k": K})
    state = hand.State(np.array([float(trace["mu", j]) for j in range(1, K + 1)]),
                       np.array([float(trace["var", j]) for j in range(1, K + 1)]),
                       trace["weights"].numpy().copy())
    x = data.numpy()
    state.log_joint = hand.log_joint(state, x)
    return trace, state, x


def fixed_aux_cases(K):
    """Splits of several clusters and merges of several clusters with the last."""
    cases = [("split", j, 0.3, 0.8, 0.55) for j in sorted({1, (K + 1) // 2, K})]
    cases += [("split", 1, 0.71, 0.12, 0.2)]
    if K > 1:
        cases += [("merge", j) for j in sorted({1, K // 2 or 1, K - 1})]
    return cases


def engine_log_alpha(trace, case):
    if case[0] == "split":
        _, j, u1, b2, u3 = case
        constraints = {"cluster_to_split": j, "u1": u1, "u2": b2, "u3": u3}
        if trace["k"] > 1:
            constraints["split"] = True
    else:
        constraints = {"split": False, "cluster_to_merge": case[1]}
    aux, _ = m.split_merge_aux.generate((trace,), constraints)
    app = il.apply_transform(m.split_merge, trace, aux, m.split_merge_aux)
    return app.model_log_ratio + app.log_q_new - aux.score + app.logabsdet


def check_agreement(n, K, seed):
    trace, state, x = make_state(n, K, seed)
    worst = 0.0
    for case in fixed_aux_cases(K):
        ours = engine_log_alpha(trace, case)
        ref, _ = hand.log_alpha(state, x, case)
        err = abs(ours - ref) / max(1.0, abs(ref))
        worst = max(worst, err)
        if not err < 1e-9:
            print(f"MISMATCH n={n} K={K} {case}: engine log alpha {ours!r}, hand-coded {ref!r}")
            return False, worst
    return True, worst


def time_moves(move, moves, reps):
    """Median over ``reps`` of the seconds per move of ``moves`` moves, in process time (time
    the process waits for a core on a loaded machine is not counted)."""
    out = []
    for _ in range(reps):
        start = time.process_time()
        for _ in range(moves):
            move()
        out.append((time.process_time() - start) / moves)
    return statistics.median(out)


def engine_mover(trace):
    kernel = il.InvolutiveKernel(m.split_merge_aux, (), m.split_merge)
    return lambda: kernel(trace)


def hand_mover(state, x, seed):
    rng = np.random.default_rng(seed)
    return lambda: hand.move(state, x, rng)


class TorchAutograd:
    """Ablation: the transform always runs on torch autograd tensors (no float path)."""

    def __enter__(self):
        self.saved, m.split_merge.autodiff = m.split_merge.autodiff, "torch"
        return self

    def __exit__(self, *exc):
        m.split_merge.autodiff = self.saved


class Unlowered:
    """Ablation: the model body runs as written, its comprehensions element by element
    (``@gen(lower=False)``), instead of as indexed families (imcmc_lab.modeling.families)."""

    def __enter__(self):
        self.saved, m.gmm.fn = m.gmm.fn, m.gmm.__wrapped__
        return self

    def __exit__(self, *exc):
        m.gmm.fn = self.saved


class NoIncremental:
    """Ablation: every model update re-generates the trace from all its choices."""

    def __enter__(self):
        from imcmc_lab.modeling import DynamicTrace

        def full_update(trace, constraints, args=None, *, strict=True):
            choices = dict(trace.get_choices().items())
            constraints = dict(il.as_choicemap(constraints).items())
            choices.update(constraints)
            # old choices the new trace no longer visits are dropped, as update drops them;
            # only an unvisited constraint is the caller's error
            result = trace.gen_fn.generate_detailed(trace.args, choices, strict=False)
            if strict and any(a in constraints for a in result.unvisited):
                raise il.ConstraintError("a constraint the new trace does not visit")
            result.weight = result.trace.score - trace.score
            return result

        DynamicTrace.update_detailed = full_update
        return self

    def __exit__(self, *exc):
        from imcmc_lab.modeling import DynamicTrace

        del DynamicTrace.update_detailed        # the inherited Trace.update_detailed again


def dense_logabsdet_mover(trace):
    """Ablation: a move whose log |det J| comes from the full Jacobian (no copy elimination)."""
    kernel = il.InvolutiveKernel(m.split_merge_aux, (), m.split_merge)

    def move():
        kernel(trace)
        dense = kernel.last_record.jacobian.dense()
        return torch.linalg.slogdet(dense)

    return move


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    reps = 3 if args.quick else 5
    print(f"imcmc-lab split/merge benchmark -- {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}, torch {torch.__version__}, NumPy {np.__version__}, "
          f"{time.strftime('%Y-%m-%d')}")

    print("\n1. log alpha, engine vs hand-coded, on fixed (state, aux) pairs")
    ok = True
    for n in NS:
        for K in KS:
            agree, worst = check_agreement(n, K, seed=n + K)
            ok &= agree
            print(f"   n={n:>5} K={K:>2}: {'agree' if agree else 'DIFFER'} (max relative difference {worst:.1e})")
    if not ok:
        print("log alpha differs: the speed comparison is meaningless")
        return 1

    print("\n2. moves per second (median of %d repetitions)" % reps)
    print(f"   {'n':>6} {'K':>3} {'engine':>10} {'hand-coded':>11} {'ratio':>7}")
    rows = []
    for n in NS:
        moves = {100: 400, 1000: 300, 10000: 100}[n]
        for K in KS:
            trace, state, x = make_state(n, K, seed=n + K)
            t_engine = time_moves(engine_mover(trace), moves, reps)
            t_hand = time_moves(hand_mover(state, x, seed=K), 5 * moves, reps)   # fast: more moves, less noise
            ratio = t_hand / t_engine
            rows.append((n, K, t_engine, t_hand, ratio))
            print(f"   {n:>6} {K:>3} {1 / t_engine:>10.0f} {1 / t_hand:>11.0f} {ratio:>7.1%}")
    for n in NS:
        growth_engine = next(r[2] for r in rows if r[0] == n and r[1] == 32) / next(
            r[2] for r in rows if r[0] == n and r[1] == 2)
        growth_hand = next(r[3] for r in rows if r[0] == n and r[1] == 32) / next(
            r[3] for r in rows if r[0] == n and r[1] == 2)
        print(f"   n={n:>5}: time per move K=32 / K=2: engine {growth_engine:.2f}x, hand-coded {growth_hand:.2f}x")

    print("\n3. ablations at K = 8 (ms per move, median)")
    print(f"   {'n':>6} {'engine':>9} {'no incremental':>15} {'loops unlowered':>16} {'torch autograd':>15} "
          f"{'no copy elimination':>20}")
    for n in NS:
        trace, _, _ = make_state(n, 8, seed=n + 8)
        base = time_moves(engine_mover(trace), 50, reps)
        with NoIncremental():
            full = time_moves(engine_mover(trace), 50, reps)
        with Unlowered():
            unlowered = time_moves(engine_mover(trace), 50, reps)
        with TorchAutograd():
            autograd = time_moves(engine_mover(trace), 50, reps)
        dense_moves = {100: 20, 1000: 3, 10000: 1}[n]
        dense = time_moves(dense_logabsdet_mover(trace), dense_moves, 1) if n <= 1000 or not args.quick else math.nan
        print(f"   {n:>6} {base * 1e3:>9.2f} {full * 1e3:>15.2f} {unlowered * 1e3:>16.2f} {autograd * 1e3:>15.2f} "
              f"{dense * 1e3:>20.1f}")
    print("   the per-cluster loops lowered (engine) and unlowered at K = 32 (ms per move, median):")
    for n in NS:
        trace, _, _ = make_state(n, 32, seed=n + 32)
        base = time_moves(engine_mover(trace), 50, reps)
        with Unlowered():
            unlowered = time_moves(engine_mover(trace), 50, reps)
        print(f"   {n:>6} {base * 1e3:>9.2f} {unlowered * 1e3:>16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
