"""Exact-answer tests of whole kernels: chain averages against quadrature and closed forms.

Each tolerance is 4 batch-means standard errors of the chain average (fixed seeds).
"""

import math

import numpy as np
import torch

import imcmc_lab as il
from imcmc_lab.examples import soccer, two_clusters
from imcmc_lab.examples.random_walk import random_walk_kernel
from mcmc_stats import assert_close_to, batch_means_se
from reference import soccer as soccer_ref
from reference import two_cluster as two_cluster_ref


def test_split_merge_one_vs_two_clusters_matches_quadrature():
    torch.manual_seed(11)
    data = torch.tensor(two_cluster_ref.DATA, dtype=torch.float64)
    trace = two_clusters.initial_trace(data)
    kernel = two_clusters.two_cluster_kernel(step=0.5)
    chain = il.run_chain(kernel, trace, 6000, record={"k": "k"}, progress=False)
    k = np.array(chain.values("k"))[500:]
    exact = two_cluster_ref.posterior_k2()
    assert 0.2 < exact < 0.8
    assert_close_to(k == 2, exact, label="P(k = 2 | data)")
    assert chain.acceptance["split/merge"][0] > 100  # the move really jumps


def test_soccer_model_choice_matches_quadrature():
    torch.manual_seed(3)
    chain = il.run_chain(soccer.soccer_kernel(), soccer.initial_trace(), 4000,
                         record={"model": "model", "lam": "lam"}, progress=False)
    model = np.array(chain.values("model"))[200:]
    exact = soccer_ref.posterior_model1()
    assert abs(exact - 0.70711) < 1e-4
    assert_close_to(model == 1, exact, label="P(model 1 | goals)")
    lam = np.array(chain.values("lam"))[200:]
    in_model1 = lam[model == 1]
    # E[lam | model 1] is the conjugate Gamma(25 + S, 10 + n) mean.
    assert abs(in_model1.mean() - soccer_ref.posterior_mean_lambda_model1()) < 4 * batch_means_se(lam) + 0.01


@il.gen
def normal_mean(n):
    mu = il.normal(1.0, 2.0) @ "mu"
    il.iid(il.normal(mu, 1.0), n) @ "x"


def test_random_walk_involution_matches_conjugate_posterior():
    torch.manual_seed(5)
    x = torch.tensor([0.3, 1.9, 2.4, 0.7, 1.1, 2.8, 1.5, 0.2, 2.2, 1.6], dtype=torch.float64)
    prior_mean, prior_var, noise_var = 1.0, 4.0, 1.0
    post_var = 1.0 / (1.0 / prior_var + len(x) / noise_var)
    post_mean = post_var * (prior_mean / prior_var + float(x.sum()) / noise_var)
    trace, _ = normal_mean.generate((len(x),), {"x": x, "mu": 0.0})
    kernel = random_walk_kernel(["mu"], 0.6)
    record = il.involutive_move(trace, kernel.q, (), kernel.f)
    assert record.logabsdet == 0.0 and record.jacobian.reduced_size == (2, 2)
    chain = il.run_chain(kernel, trace, 8000, record={"mu": "mu"}, progress=False)
    mu = np.array(chain.values("mu"))[200:]
    assert_close_to(mu, post_mean, label="E[mu | x]")
    assert_close_to((mu - post_mean) ** 2, post_var, label="Var[mu | x]")
