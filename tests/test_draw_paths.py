"""Scalar draws into kept tensors (core/distributions/_draws.py) give exactly the numbers of
torch's factories, in the same order: a seeded run is the same run."""

from __future__ import annotations

import sys
import threading

import torch

import imcmc_lab as il

F64 = torch.float64


def _reference_draws():
    """What the samplers drew before the kept tensors: torch's factories, one tensor a draw."""
    flip = torch.rand((), dtype=F64).item() < 0.3
    k = torch.randint(2, 10, ()).item()
    z = 1.5 + 2.0 * torch.randn((), dtype=F64).item()
    x = torch._standard_gamma(torch.tensor(2.0, dtype=F64)).item()
    y = torch._standard_gamma(torch.tensor(3.5, dtype=F64)).item()
    x1 = torch._standard_gamma(torch.tensor(1.0, dtype=F64)).item()
    y1 = torch._standard_gamma(torch.tensor(1.0, dtype=F64)).item()
    z_int = 1.0 + 2.0 * torch.randn((), dtype=F64).item()
    flip_tensor = torch.rand((), dtype=F64).item() < 0.3
    return [flip, k, z, x / (x + y), x1 / (x1 + y1), z_int, flip_tensor, torch.rand(()).item()]


def _draws():
    return [il.bernoulli(0.3).sample(), il.uniform_discrete(2, 9).sample(), il.normal(1.5, 2.0).sample().item(),
            il.beta(2.0, 3.5).sample().item(),
            il.beta(torch.tensor(1.0, dtype=F64), torch.tensor(1.0)).sample().item(),   # tensor parameters
            il.normal(1, 2).sample().item(), il.bernoulli(torch.tensor(0.3, dtype=F64)).sample(),
            torch.rand(()).item()]                  # the generator's state after them


def test_draws_are_the_factories_numbers_in_order():
    for seed in range(200):
        torch.manual_seed(seed)
        expected = _reference_draws()
        torch.manual_seed(seed)
        got = _draws()
        assert got == expected, seed          # bit for bit (floats compared exactly)
        assert type(got[0]) is bool and type(got[1]) is int


def test_threads_drawing_at_once_get_distinct_draws_of_the_one_stream():
    # a kept tensor shared between threads would hand one thread the other's value
    torch.manual_seed(7)
    stream = [torch.randn((), dtype=F64).item() for _ in range(4 * 3000)]
    torch.manual_seed(7)
    drawn, interval = [], sys.getswitchinterval()
    sys.setswitchinterval(1e-6)         # switch threads as often as possible

    def work():
        drawn.extend([il.normal(0.0, 1.0).sample().item() for _ in range(3000)])
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert sorted(drawn) == sorted(stream)


def test_first_draw_in_inference_mode_and_inside_torch_func():
    def fresh_thread():
        out = []

        def run():
            with torch.inference_mode():            # the kept tensor is made here first
                out.append(il.uniform_discrete(1, 6).sample())
            out.append(il.uniform_discrete(1, 6).sample())      # and changed outside it
            out.append(il.bernoulli(0.5).sample())
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        return out
    torch.manual_seed(3)
    got = fresh_thread()
    torch.manual_seed(3)
    assert got == [torch.randint(1, 7, ()).item(), torch.randint(1, 7, ()).item(),
                   torch.rand((), dtype=F64).item() < 0.5]

    # torch.func refuses to change a tensor it did not make: the factory draws instead
    def f(x):
        return x * il.normal(0.0, 1.0).sample() + il.bernoulli(0.5).sample()
    torch.manual_seed(5)
    grad = torch.func.grad(f)(torch.tensor(1.0, dtype=F64))
    torch.manual_seed(5)
    assert grad.item() == torch.randn((), dtype=F64).item()
