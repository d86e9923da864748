"""Sanity checks of the exact reference answers themselves.

Every reference quantity is compared with an alternative computation: a closed
form, an exact enumeration, an adaptive scipy quadrature, or the same
quadrature at a different resolution / with a different rule.
"""
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import gammaln

from . import coal, soccer, two_cluster


# ==========================================================================
# two_cluster
# ==========================================================================
class TestTwoCluster:
    def test_data_literal(self):
        assert 18 <= len(two_cluster.DATA) <= 22
        src = Path(two_cluster.__file__).read_text()
        block = src[src.index("DATA = ["):src.index("]", src.index("DATA = ["))]
        nums = re.findall(r"-?\d+\.\d+", block)
        assert len(nums) == len(two_cluster.DATA)
        assert all(len(v.split(".")[1]) == 4 for v in nums)

    def test_posterior_k2_is_moderate(self):
        p = two_cluster.posterior_k2()
        assert 0.3 < p < 0.7

    def test_k1_quadrature_matches_closed_form(self):
        assert two_cluster.log_marginal_k1() == pytest.approx(
            two_cluster.log_marginal_k1_closed_form(), abs=1e-9)
        # and against scipy's multivariate normal: x ~ N(0, I + 100 11^T)
        x = np.asarray(two_cluster.DATA)
        n = len(x)
        cov = np.eye(n) + 100.0 * np.ones((n, n))
        lp = stats.multivariate_normal(np.zeros(n), cov).logpdf(x)
        assert two_cluster.log_marginal_k1() == pytest.approx(lp, abs=1e-9)

    def test_k1_posterior_mean_closed_form(self):
        x = np.asarray(two_cluster.DATA)
        exact = 100.0 * x.sum() / (1.0 + 100.0 * len(x))
        assert two_cluster.posterior_mean_mu_k1() == pytest.approx(exact, abs=1e-10)

    def test_k2_quadrature_matches_exact_enumeration(self):
        # exact: sum over all 2^20 assignments of points to the two components
        assert two_cluster.log_marginal_k2() == pytest.approx(
            two_cluster.log_marginal_k2_enumeration(), abs=1e-8)

    def test_k2_quadrature_converged(self):
        fine = two_cluster.log_marginal_k2()
        coarse = two_cluster.log_marginal_k2(inner_width=0.5, outer_width=10.0, order=8)
        assert fine == pytest.approx(coarse, abs=1e-8)
        a_f, b_f = two_cluster.posterior_mean_sorted_mu_k2()
        a_c, b_c = two_cluster.posterior_mean_sorted_mu_k2(inner_width=0.5, outer_width=10.0, order=8)
        assert a_f == pytest.approx(a_c, abs=1e-8)
        assert b_f == pytest.approx(b_c, abs=1e-8)
        assert a_f < b_f

    def test_sorted_means_vs_exact_enumeration(self):
        a, b = two_cluster.posterior_mean_sorted_mu_k2()
        ae, be = two_cluster.posterior_mean_sorted_mu_k2_enumeration()
        assert a == pytest.approx(ae, abs=1e-9)
        assert b == pytest.approx(be, abs=1e-9)

    def test_small_datasets_quadrature_vs_enumeration(self):
        for data in ([0.0], [-3.0, 3.0], [0.1, 0.2, 5.0, 5.5, -1.0]):
            assert two_cluster.log_marginal_k2(data) == pytest.approx(
                two_cluster.log_marginal_k2_enumeration(data), abs=1e-9)
            assert two_cluster.log_marginal_k1(data) == pytest.approx(
                two_cluster.log_marginal_k1_closed_form(data), abs=1e-9)

    def test_single_point_k1_equals_k2(self):
        # with one observation both models give x ~ N(0, 101)
        d = [1.2345]
        lp = stats.norm(0, math.sqrt(101.0)).logpdf(1.2345)
        assert two_cluster.log_marginal_k1(d) == pytest.approx(lp, abs=1e-10)
        assert two_cluster.log_marginal_k2(d) == pytest.approx(lp, abs=1e-9)

    def test_reflection_symmetry(self):
        neg = [-v for v in two_cluster.DATA]
        assert two_cluster.posterior_k2(neg) == pytest.approx(two_cluster.posterior_k2(), abs=1e-10)


# ==========================================================================
# soccer
# ==========================================================================
class TestSoccer:
    def test_data(self):
        y = soccer.load_goals()
        assert len(y) == 1140 and sum(y) == 2877

    def test_model1_closed_form_vs_quadrature(self):
        assert soccer.log_marginal_model1() == pytest.approx(
            soccer.log_marginal_model1_quadrature(), abs=1e-9)

    def test_model1_closed_form_vs_scipy_pmfs(self):
        # p(y|M1) = p(y_1) prod p(y_i | y_<i): sequential Gamma-Poisson predictive = NB
        y = np.asarray(soccer.load_goals())
        a, b = 25.0, 10.0
        total = 0.0
        for yi in y:
            total += stats.nbinom.logpmf(yi, a, b / (b + 1.0))
            a, b = a + yi, b + 1.0
        assert soccer.log_marginal_model1() == pytest.approx(total, abs=1e-8)

    def test_posterior_mean_lambda_model1(self):
        exact = soccer.posterior_mean_lambda_model1()
        assert exact == pytest.approx((25 + 2877) / (10 + 1140), abs=1e-14)
        assert soccer._model1_quad()[1] == pytest.approx(exact, abs=1e-10)

    def test_nb_parametrisation(self):
        y = np.arange(0, 15)
        for lam, kap in [(2.5, 0.02), (3.1, 1.3), (0.7, 0.2), (2.5, 1e-4)]:
            r, p = soccer.nb_r_p(lam, kap)
            ours = soccer.nb_logpmf(y, lam, kap)
            assert np.allclose(ours, stats.nbinom.logpmf(y, r, p), atol=1e-10, rtol=0)
            # Stochaskell's lpdfNegBinomial k a b with a = 1/kap, b = a/lam
            A, B = 1.0 / kap, 1.0 / (kap * lam)
            stoch = (gammaln(A + y) - gammaln(A) - gammaln(y + 1.0)
                     + y * np.log(1.0 / (B + 1.0)) + A * np.log(B / (B + 1.0)))
            assert np.allclose(ours, stoch, atol=1e-8, rtol=0)
            # mean lam, variance lam (1 + kap lam)
            yy = np.arange(0, 400)
            pm = np.exp(soccer.nb_logpmf(yy, lam, kap))
            assert pm.sum() == pytest.approx(1.0, abs=1e-10)
            mean = np.sum(yy * pm)
            assert mean == pytest.approx(lam, rel=1e-9)
            assert np.sum((yy - mean) ** 2 * pm) == pytest.approx(lam * (1 + kap * lam), rel=1e-8)
        # kap -> 0 is Poisson
        assert np.allclose(soccer.nb_logpmf(y, 2.5, 0.0), stats.poisson.logpmf(y, 2.5), atol=1e-12)

    def test_model2_grid_vs_dblquad(self):
        assert soccer.log_marginal_model2() == pytest.approx(
            soccer.log_marginal_model2_dblquad(), abs=1e-7)

    def test_model2_grid_converged(self):
        fine = soccer.log_marginal_model2()
        coarse = soccer.log_marginal_model2(lam_panels=40, kap_fine_panels=40, order=8)
        assert fine == pytest.approx(coarse, abs=1e-9)
        el, ek = soccer.posterior_means_model2()
        el_c, ek_c = soccer.posterior_means_model2(lam_panels=40, kap_fine_panels=40, order=8)
        assert el == pytest.approx(el_c, abs=1e-9) and ek == pytest.approx(ek_c, abs=1e-9)

    def test_posterior_model1_matches_paper(self):
        p = soccer.posterior_model1()
        # paper: 0.7076 from a 5000-step RJMCMC run
        assert abs(p - 0.7076) < 0.01
        d = soccer.log_marginal_model1() - soccer.log_marginal_model2()
        assert p == pytest.approx(1.0 / (1.0 + math.exp(-d)), abs=1e-14)


# ==========================================================================
# coal
# ==========================================================================
def _tv(p, q):
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


class TestCoal:
    def test_data_conversion(self):
        y = np.asarray(coal.load_event_days())
        assert len(y) == 191 and y[0] == 0.0
        assert np.all(np.diff(y) >= 0)
        assert y[-1] == pytest.approx((1962.220 - 1851.203) * 365.2425, abs=1e-6)
        assert y[-1] < coal.L_DEFAULT == 40907.0

    def test_default_runtime(self):
        coal._dp.cache_clear()
        t0 = time.perf_counter()
        coal.posterior_num_changepoints()
        assert time.perf_counter() - t0 < 20.0

    def test_posterior_n_shape(self):
        p = coal.posterior_num_changepoints()
        assert p.shape == (31,)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
        assert p[0] == 0.0                        # truncated 1..nMax
        assert np.all(p >= 0)
        assert int(np.argmax(p)) == 3

    def test_prior(self):
        lp = coal.log_prior_n()
        n = np.arange(1, 31)
        ref = stats.poisson(3).logpmf(n) - math.log(stats.poisson(3).cdf(30) - stats.poisson(3).pmf(0))
        assert np.allclose(lp[1:], ref, atol=1e-12)
        assert lp[0] == -np.inf

    def test_resolution_tv(self):
        fine = coal.posterior_num_changepoints()                        # G=1000, 2-pt GL
        coarse = coal.posterior_num_changepoints(G=500)                 # half resolution
        midpoint = coal.posterior_num_changepoints(G=1000, order=1)     # different rule
        assert _tv(fine, coarse) < 1e-4
        assert _tv(fine, midpoint) < 2e-3
        assert max(_tv(fine, coarse), _tv(fine, midpoint)) < 0.01

    def test_forward_backward_agree(self):
        dp = coal._dp()
        assert np.allclose(dp.logZ, dp.logZ_backward, atol=1e-9, rtol=0)

    def test_prior_only_dp_reproduces_order_statistics_density(self):
        # with the likelihood switched off, (2n+1)! * int prod (gaps) ds / L^(2n+1) = 1
        dp = coal._CoalDP(coal.load_event_days(), coal.L_DEFAULT, 1000, 2, 1, 30, 3.0, 1.0, 200.0,
                          likelihood=False)
        lz = dp.logZ + gammaln(2 * np.arange(31) + 2.0)
        assert np.allclose(lz[:11], 0.0, atol=2e-4)
        assert np.allclose(lz, 0.0, atol=5e-3)
        assert _tv(dp.posterior_n(), np.exp(coal.log_prior_n())) < 1e-4

    def test_n1_marginal_vs_adaptive_quadrature(self):
        y = np.asarray(coal.load_event_days())
        L = coal.L_DEFAULT

        def logf(s):
            c = np.sum(y < s)
            return (math.log(s) + math.log(L - s) + math.log(6.0) - 3 * math.log(L)
                    + coal._log_segment_marginal(c, s) + coal._log_segment_marginal(len(y) - c, L - s))

        shift = max(logf(s) for s in np.linspace(10.0, L - 10.0, 4001))
        val, _ = integrate.quad(lambda s: math.exp(logf(s) - shift), 0.0, L, points=y[y > 0],
                                limit=2000, epsabs=0, epsrel=1e-10)
        assert coal.log_marginal_given_n(1) == pytest.approx(shift + math.log(val), abs=1e-5)

    def test_n2_dp_vs_brute_force_double_sum(self):
        # same nodes, explicit sum over ordered pairs (checks the DP recursion)
        dp = coal._CoalDP(coal.load_event_days(), coal.L_DEFAULT, 150, 1, 1, 30, 3.0, 1.0, 200.0)
        y = np.asarray(coal.load_event_days())
        L = coal.L_DEFAULT
        nodes, w = coal._nodes(y, L, 150, 1)
        C = np.searchsorted(np.sort(y), nodes, side="left").astype(float)

        def lseg(c, width):
            return np.log(width) + coal._log_segment_marginal(c, width)

        u, v = np.meshgrid(np.arange(len(nodes)), np.arange(len(nodes)), indexing="ij")
        ok = nodes[v] > nodes[u]
        uu, vv = u[ok], v[ok]
        terms = (np.log(w[uu]) + np.log(w[vv]) + lseg(C[uu], nodes[uu])
                 + lseg(C[vv] - C[uu], nodes[vv] - nodes[uu]) + lseg(len(y) - C[vv], L - nodes[vv]))
        brute = float(np.logaddexp.reduce(terms)) + math.log(120.0) - 5 * math.log(L)
        assert dp.log_marginal_given_n(2) == pytest.approx(brute, abs=1e-9)

    def test_n_min_zero_variant(self):
        p0 = coal.posterior_num_changepoints(n_min=0)
        p1 = coal.posterior_num_changepoints()
        assert p0[0] < 1e-10                  # no-change model is overwhelmingly rejected
        assert _tv(p0, p1) < 1e-6

    def test_rate_coverage_and_convergence(self):
        years = np.array([1851.203, 1851.5, 1870.0, 1885.0, 1888.0, 1890.0, 1892.0, 1895.0,
                          1920.0, 1947.0, 1960.0])
        t = np.append((years - 1851.203) * 365.2425, coal.L_DEFAULT)
        cov = coal.segment_coverage(t)
        assert np.allclose(cov, 1.0, atol=1e-10)
        r = coal.posterior_mean_rate(t)
        r_coarse = coal.posterior_mean_rate(t, G=500)
        r_mid = coal.posterior_mean_rate(t, order=1)
        assert np.allclose(r, r_coarse, rtol=1e-4, atol=0)
        assert np.allclose(r, r_mid, rtol=2e-3, atol=0)
        # broad shape (Green 1995, Fig. 1): ~3.2 disasters/yr early, ~1/yr after 1895
        per_year = r * 365.2425
        assert 2.8 < per_year[2] < 3.5
        assert 0.7 < per_year[8] < 1.3
        assert np.all(r > 0)
