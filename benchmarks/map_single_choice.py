"""``Map`` of a one-choice kernel: changed elements re-scored together vs the kernel run per element.

``point`` is ``return normal(mu * 1.0, s) @ "y"`` (recognised by
``families.single_choice_kernel``: ``Map`` builds each changed element's distribution as
the body does and re-scores the kept values with one ``log_prob`` call); ``point_run``
is the same kernel in two statements, which ``Map`` runs element by element. An update
that changes ``mu`` changes every element's arguments. CPU time per update, median of 7
rounds alternating which spelling goes first.

Run: ``python benchmarks/map_single_choice.py``; results in benchmarks/README.md.
"""

import statistics
import time

import torch

import imcmc_lab as il

torch.set_num_threads(1)


@il.gen
def point(mu, s):
    return il.normal(mu * 1.0, s) @ "y"


@il.gen
def point_run(mu, s):
    y = il.normal(mu * 1.0, s) @ "y"
    return y


def model_of(kernel):
    @il.gen
    def model(n):
        mu = il.normal(0.0, 10.0) @ "mu"
        s = il.gamma(2.0, 1.0) @ "s"
        return il.Map(kernel)(mu.expand(n), s.expand(n)) @ "data"
    return model


def main():
    print("n, together (ms/update), element by element (ms/update), ratio")
    for n in (100, 1000, 5000):
        ys = torch.randn(n, dtype=torch.float64, generator=torch.Generator().manual_seed(n)) + 1.0
        obs = {("data", i, "y"): ys[i] for i in range(n)}
        a = model_of(point).generate((n,), {**obs, "mu": 0.5, "s": 1.0})[0]
        b = model_of(point_run).generate((n,), {**obs, "mu": 0.5, "s": 1.0})[0]
        ta, tb = [], []
        for r in range(7):
            for trace, out in ((a, ta), (b, tb)) if r % 2 == 0 else ((b, tb), (a, ta)):
                start = time.process_time()
                for k in range(5):
                    trace.update({"mu": 0.1 * k + r})
                out.append((time.process_time() - start) / 5)
        fast, slow = statistics.median(ta), statistics.median(tb)
        print(f"{n}, {fast * 1e3:.2f}, {slow * 1e3:.2f}, {slow / fast:.2f}x")


if __name__ == "__main__":
    main()
