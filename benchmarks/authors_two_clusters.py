"""The paper authors' 1-vs-2-cluster split/merge, timed on their own PyTorch code.

Written by us; the authors' code is not in this repository. Get it from the public
repository ``probcomp/autoimcmc`` (the code accompanying *Automating Involutive MCMC
using Probabilistic and Differentiable Programming*, Cusumano-Towner, Lew, Mansinghka)::

    git clone https://github.com/probcomp/autoimcmc

Their ``pytorch/mixture_example.py`` defines the model ``p(n)`` (one or two clusters,
unit variances, equal weights, and ONE choice ``("x", i)`` per data point, each a
``MixtureSameFamily``), the auxiliary program ``q`` and the involution ``f``, then runs
a 99-step demo on 4 points at module level. This driver runs that file's imports,
assignments and function definitions -- their ``p``, ``q`` and ``f`` exactly as written --
but not its demo loop, and times their ``involution_mcmc_step`` (``languages.py``) on
``n`` points drawn as :func:`imcmc_lab.examples.mixture.synthetic_data` draws them for
``benchmarks/peers.py`` (means -2 and 2, unit noise, seed ``n``), from the state
``{"two_clusters": 0, ("mu", 1): 0.0}`` (one cluster at 0, as peers.py starts ours).

``check=False`` (their demo passes ``check=True``, which applies ``f`` once more per
step): the kernel of imcmc-lab that peers.py times runs without the involution check
too. One torch thread, as for imcmc-lab. Their code needs only torch; under a current
torch it runs with the distributions' argument validation off, as torch 1.5 (theirs) had
it by default -- with validation on, their own demo stops at the first step.

Run in a checkout of theirs (``peers.py --authors PATH`` does this)::

    N=100 python /path/to/benchmarks/authors_two_clusters.py [PATH]

``VALIDATE=1`` runs it with torch's argument validation on instead (the start state then
holds tensors, which validation requires).

It prints ``steps_per_second X``: process time, median of 3 rounds of at least
``ROUND_SECONDS`` (and at least 3 steps) each, after one warm-up step.
"""

from __future__ import annotations

import ast
import os
import pathlib
import statistics
import sys
import time
import warnings

import torch

ROUND_SECONDS = 2.0


def load_their_example(root: pathlib.Path) -> dict:
    """The namespace of their ``mixture_example.py`` without its module-level demo loop."""
    code_dir = root / "pytorch" if (root / "pytorch" / "languages.py").exists() else root
    source_path = code_dir / "mixture_example.py"
    sys.path.insert(0, str(code_dir))            # their `from languages import *`
    tree = ast.parse(source_path.read_text(), str(source_path))
    kept = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign)
    tree.body = [node for node in tree.body if isinstance(node, kept)]
    namespace = {"__name__": "authors_mixture_example"}
    exec(compile(tree, str(source_path), "exec"), namespace)
    for name in ("p", "q", "f", "involution_mcmc_step"):
        if name not in namespace:
            raise SystemExit(f"{source_path} defines no {name!r}: not the expected version of their code")
    return namespace


def synthetic_data(n: int, seed: int) -> torch.Tensor:
    """The recipe of imcmc_lab.examples.mixture.synthetic_data(n, means=(-2, 2), seed=seed)."""
    g = torch.Generator().manual_seed(seed)
    means = torch.tensor([-2.0, 2.0], dtype=torch.float64)
    x = means[torch.arange(n) % 2] + torch.randn(n, generator=g, dtype=torch.float64)
    return x[torch.randperm(n, generator=g)]


def steps_per_second(ns: dict, n: int) -> float:
    data = synthetic_data(n, seed=n)
    # their example's observations: one float32 scalar tensor per point
    observations = {("x", i): torch.tensor(float(v)) for i, v in enumerate(data, start=1)}
    state = {"two_clusters": 0, ("mu", 1): 0.0}
    if os.environ.get("VALIDATE") == "1":
        state = {"two_clusters": torch.tensor(0.0), ("mu", 1): torch.tensor(0.0)}
    step = ns["involution_mcmc_step"]

    def move(state):
        return step(ns["p"], (n,), ns["q"], ns["f"], state, observations, check=False)[0]

    torch.manual_seed(n)
    state = move(state)                       # warm-up
    rates = []
    for _ in range(3):
        steps, start = 0, time.process_time()
        while steps < 3 or time.process_time() - start < ROUND_SECONDS:
            state = move(state)
            steps += 1
        rates.append(steps / (time.process_time() - start))
    return statistics.median(rates)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = pathlib.Path(argv[0] if argv else ".").resolve()
    n = int(os.environ.get("N", "100"))
    torch.set_num_threads(1)
    # Their code was written for PyTorch 1.5, whose distributions did not validate their
    # arguments by default (validation became the default in 1.8): their own demo stops
    # at once under a current torch (`log_prob(0)` of an int is refused). Their defaults:
    # VALIDATE=1: validation on (torch's current default), starting from tensor values so
    # that their code runs at all (it then spends part of each step validating).
    torch.distributions.Distribution.set_default_validate_args(os.environ.get("VALIDATE") == "1")
    # their _read re-wraps tensors with torch.tensor(...), which warns on every step
    warnings.simplefilter("ignore", UserWarning)
    print(f"steps_per_second {steps_per_second(load_their_example(root), n):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
