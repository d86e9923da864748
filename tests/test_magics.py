"""Tests of the IPython magics (``%%gen``, ``%%transform``, ``%check_involution``).

The pure rewriter is tested directly; everything else goes through a real
``InteractiveShell`` (``run_cell``), and one notebook runs under nbclient.
"""

from __future__ import annotations

import ast
import linecache
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imcmc_lab.magics import NotationError, rewrite

HERE = Path(__file__).parent


# ---------------------------------------------------------------------------
# the pure rewriter


def rw(src, mode="gen"):
    out = rewrite(src, mode).source
    assert out.count("\n") == src.count("\n"), "line count must be preserved"
    ast.parse(out)
    return out


def test_statement_form():
    assert rw("k ~ poisson_plus_one(1)\n") == 'k = poisson_plus_one(1) @ "k"\n'
    assert rw("u1 ~ beta(2, 2); u2 ~ beta(1, 1)\n") == 'u1 = beta(2, 2) @ "u1"; u2 = beta(1, 1) @ "u2"\n'
    # the whole rest of the statement is the distribution
    assert rw("a ~ d1 if c else d2\n") == 'a = (d1 if c else d2) @ "a"\n'
    assert rw("if split: k ~ normal(0, 1)\n") == 'if split: k = normal(0, 1) @ "k"\n'


def test_address_form_anywhere():
    assert rw('means = [{("mu", j)} ~ normal(0, 10) for j in range(1, k + 1)]\n') == \
        'means = [(normal(0, 10) @ ("mu", j)) for j in range(1, k + 1)]\n'
    assert rw('{"mu", j} ~ normal(0, 1)\n') == '(normal(0, 1) @ ("mu", j))\n'
    assert rw('return ({"left"} ~ walk_tree(node.left, path))\n') == \
        'return (walk_tree(node.left, path) @ "left")\n'
    assert rw('return {"left"} ~ walk_tree(node.left, path)\n') == \
        'return (walk_tree(node.left, path) @ "left")\n'
    assert rw('f({"a"} ~ normal(0, 1), x={"b"} ~ normal(0, 1))\n') == \
        'f((normal(0, 1) @ "a"), x=(normal(0, 1) @ "b"))\n'
    # stops at comparisons, boolean operators, `if`/`else`
    assert rw('if {"done"} ~ bernoulli(0.5) and depth > 2: pass\n') == \
        'if (bernoulli(0.5) @ "done") and depth > 2: pass\n'
    assert rw('s = True if k == 1 else {"split"} ~ bernoulli(0.5)\n') == \
        's = True if k == 1 else (bernoulli(0.5) @ "split")\n'
    # takes in arithmetic
    assert rw('y = {"y"} ~ normal(0, 1) * 2\n') == 'y = ((normal(0, 1) * 2) @ "y")\n'


def test_name_form_in_expression_is_walrus():
    assert rw("if (done ~ bernoulli(0.5)):\n    pass\n") == \
        'if (done := bernoulli(0.5) @ "done"):\n    pass\n'
    assert rw("f(x ~ normal(0, 1))\n") == 'f(x := normal(0, 1) @ "x")\n'


def test_nested_and_multiline():
    src = ('grid = [[{("g", i, j)} ~ normal(0, 1) for j in range(2)]\n'
           '        for i in range(2)]\n'
           'weights ~ dirichlet(\n'
           '    torch.full((k,), 2.0))  # ~ here\n'
           '{("x",\n'
           '  i)} ~ mixture(w,\n'
           '                m)\n'
           'g ~ h({"n"} ~ normal(0, 1), 2)\n')
    out = rw(src)
    assert '(normal(0, 1) @ ("g", i, j))' in out
    assert 'weights = dirichlet(\n    torch.full((k,), 2.0)) @ "weights"  # ~ here\n' in out
    assert out.splitlines()[6].endswith('m) @ ("x", i))')
    assert out.splitlines()[7] == 'g = h((normal(0, 1) @ "n"), 2) @ "g"'


def test_tilde_in_strings_comments_fstrings_and_unary_untouched():
    src = ('s = "a ~ b" + \'~\'  # c ~ d\n'
           't = f"{n} ~ {~n} {n:~>5}"\n'
           'u = ~n\n'
           'v = -~n + (~n) * [~n][0]\n'
           'w = """\n'
           'x ~ y\n'
           '"""\n'
           'z = not ~n\n')
    assert rw(src) == src


def test_matmul_and_decorators_untouched():
    src = "@functools.cache\ndef f(a, b):\n    return a @ b\n"
    assert rw(src) == src
    assert rw(src, "transform") == src


def test_transform_ops():
    src = ('k = @read(model_in["k"], discrete)\n'
           's = True if k == 1 else @read(aux_in["split"], discrete)\n'
           '@write(model_out["k"], k + 1, discrete)\n'
           '@copy(aux_in["a"], aux_out["b"])\n'
           '@tcall(other, 1)\n'
           'y = m @ v\n'
           'read(model_in["x"], continuous)\n')
    out = rw(src, "transform")
    assert out.splitlines() == [
        'k = __imcmc_lab__.read(model_in["k"], discrete)',
        's = True if k == 1 else __imcmc_lab__.read(aux_in["split"], discrete)',
        '__imcmc_lab__.write(model_out["k"], k + 1, discrete)',
        '__imcmc_lab__.copy(aux_in["a"], aux_out["b"])',
        '__imcmc_lab__.tcall(other, 1)',
        'y = m @ v',
        'read(model_in["x"], continuous)',
    ]


@pytest.mark.parametrize("module", ["ipaddress", "enum", "dataclasses", "string", "textwrap",
                                    "fractions", "tokenize"])
def test_valid_python_is_never_changed(module):
    """A binary `~` is never valid Python, and `@read(` at a statement start is a
    decorator only before a def: so any valid module must come back unchanged."""
    import importlib

    src = Path(importlib.import_module(module).__file__).read_text(encoding="utf-8")
    assert rewrite(src, "gen").source == src
    assert rewrite(src, "transform").source == src


@pytest.mark.parametrize("src, col, fragment", [
    ("xs[0] ~ normal(0, 1)\n", 6, "indexed address"),
    ('"k" ~ normal(0, 1)\n', 4, '{"k"}'),
    ("a.b ~ normal(0, 1)\n", 4, "attribute"),
    ("k ~\n", 2, "missing"),
    ("y = 1 + k ~ normal(0, 1)\n", 10, "parentheses"),
    ("{} ~ normal(0, 1)\n", 0, "empty address"),
    ('{"a": 1} ~ normal(0, 1)\n', 4, "dict"),
])
def test_notation_errors(src, col, fragment):
    with pytest.raises(NotationError) as info:
        rewrite(src)
    assert info.value.lineno == 1
    assert info.value.offset == col + 1
    assert fragment in info.value.msg


def test_column_map_points_at_original_text():
    src = 'def f():\n    k ~ normal(0, 1) $ 2\n'
    res = rewrite(src)
    with pytest.raises(SyntaxError) as info:
        ast.parse(res.source)
    mapped = res.map_syntax_error(info.value, src, "<cell>")
    assert mapped.lineno == 2
    assert src.splitlines()[1][mapped.offset - 1] == "$"


# ---------------------------------------------------------------------------
# through a real InteractiveShell


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    saved = os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = str(tmp_path_factory.mktemp("ipython"))
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    cfg = Config()
    cfg.HistoryManager.hist_file = ":memory:"
    sh = InteractiveShell.instance(config=cfg)
    colors = sh.colors
    sh.colors = "nocolor"
    result = sh.run_cell("%load_ext imcmc_lab", store_history=True)
    assert result.success
    yield sh
    sh.colors = colors
    if saved is None:
        os.environ.pop("IPYTHONDIR", None)
    else:
        os.environ["IPYTHONDIR"] = saved


@pytest.fixture
def run(shell, capsys):
    def run(src, ok=True):
        capsys.readouterr()
        result = shell.run_cell(src, store_history=True)
        out = capsys.readouterr()
        text = out.out + out.err
        if ok:
            assert result.success, text
        return result, text
    return run


def test_import_alone_registers_nothing():
    code = ("import sys, imcmc_lab\n"
            "assert 'IPython' not in sys.modules, 'importing imcmc_lab imported IPython'\n"
            "from IPython.core.interactiveshell import InteractiveShell\n"
            "sh = InteractiveShell.instance()\n"
            "assert 'gen' not in sh.magics_manager.magics['cell']\n"
            "import imcmc_lab.magics\n"
            "assert 'gen' not in sh.magics_manager.magics['cell']\n"
            "imcmc_lab.load_ipython_extension(sh)\n"
            "assert {'gen', 'transform'} <= set(sh.magics_manager.magics['cell'])\n"
            "assert 'check_involution' in sh.magics_manager.magics['line']\n")
    env = dict(os.environ, IPYTHONDIR=os.environ.get("IPYTHONDIR", "/tmp"))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_load_injects_names_without_overwriting(shell, capsys):
    from imcmc_lab.magics._ipython import _inject_names
    import imcmc_lab as il

    assert shell.user_ns["poisson_plus_one"] is il.poisson_plus_one
    assert shell.user_ns["read"] is il.read
    assert shell.user_ns["__imcmc_lab__"] is il
    assert "__imcmc_lab__" in shell.user_ns_hidden
    shell.user_ns["gamma"] = 42
    try:
        assert _inject_names(shell) == ["gamma"]
        assert shell.user_ns["gamma"] == 42
    finally:
        shell.user_ns["gamma"] = il.gamma


def test_gen_statement_and_address_forms(run, shell):
    run('''%%gen
def gmm(n):
    k ~ poisson_plus_one(1)                        # choice at "k", bound to k
    means = [{("mu", j)} ~ normal(0, 10) for j in range(1, k + 1)]
    weights ~ dirichlet(
        torch.full((k,), 2.0))
    xs = [{("x", i)} ~ mixture_of_normals(weights, means, [1.0] * k)
          for i in range(1, n + 1)]
    return k
''')
    gmm = shell.user_ns["gmm"]
    trace = gmm.simulate(3)
    k = trace["k"]
    assert trace[()] == k
    assert trace["weights"].shape == (k,)
    for j in range(1, k + 1):
        assert ("mu", j) in trace
    assert ("x", 3) in trace and ("x", 4) not in trace
    # a constrained run: the generate interface works on compiled functions
    tr, w = gmm.generate((2,), {"k": 2, ("x", 1): 0.5, ("x", 2): -0.5})
    assert tr["k"] == 2 and float(w) < 0


def test_edge_cases_through_the_shell(run, shell):
    run('''%%gen
def edge(n):
    s = "a ~ b"  # a comment ~ with a tilde
    t = f"{n} ~ {~n} {'~'}"
    u = ~n
    k ~ uniform_discrete(0, 3)
    grid = [[{("g", i, j)} ~ normal(0, 1) for j in range(2)] for i in range(2)]
    total = ({"m"} ~ normal(
        0,
        1)) + sum({("z", i)} ~ normal(0, 1) for i in range(2))
    if (flip ~ bernoulli(0.5)):
        pass
    dot = torch.ones(2) @ torch.ones(2)
    return s, t, u, k, len(grid), float(dot)
''')
    trace = shell.user_ns["edge"].simulate(5)
    s, t, u, k, rows, dot = trace[()]
    assert (s, t, u, rows, dot) == ("a ~ b", "5 ~ -6 ~", -6, 2, 2.0)
    assert k == trace["k"]
    addresses = set(trace.get_choices().to_dict())
    assert {("g", 1, 0), ("g", 0, 1), ("m",), ("z", 0), ("z", 1), ("flip",), ("k",)} <= addresses


def test_calls_and_redefinition_across_cells(run, shell):
    run('''%%gen
def leaf_fn():
    v ~ normal(0, 1)
    return 1
''')
    run('''%%gen
def parent_fn():
    a ~ leaf_fn()
    b = {"sub", 2} ~ leaf_fn()
    return a + b
''')
    trace = shell.user_ns["parent_fn"].simulate()
    assert trace[()] == 2
    assert ("a", "v") in trace and ("sub", 2, "v") in trace
    run('''%%gen
def leaf_fn():
    w ~ normal(0, 1)
    return 10
''')
    trace = shell.user_ns["parent_fn"].simulate()
    assert trace[()] == 20
    assert ("a", "w") in trace and ("a", "v") not in trace


def test_show_and_dry_run(run, shell):
    _, out = run('''%%gen --dry-run
def shown(n):
    k ~ poisson_plus_one(1)
    means = [{("mu", j)} ~ normal(0, 10) for j in range(1, k + 1)]
''')
    assert "shown" not in shell.user_ns
    assert "import imcmc_lab as il" in out
    assert "from imcmc_lab import normal, poisson_plus_one" in out
    assert "@il.gen\ndef shown(n):" in out
    assert 'k = poisson_plus_one(1) @ "k"' in out
    assert 'means = [(normal(0, 10) @ ("mu", j)) for j in range(1, k + 1)]' in out
    _, out = run('''%%gen --show
def shown(n):
    k ~ poisson_plus_one(1)
''')
    assert 'k = poisson_plus_one(1) @ "k"' in out
    assert "shown" in shell.user_ns
    _, out = run('''%%transform --show negate_show (t_in) to (t_out)
x = @read(t_in["x"], continuous)
write(t_out["x"], -x, continuous)
''')
    assert "@il.transform(one_trace=True)\ndef negate_show(t_in, t_out):" in out
    assert '    x = il.read(t_in["x"], continuous)' in out


def _caret_under(out, source_line, char):
    lines = out.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.strip() == source_line.strip())
    shown, caret = lines[i], lines[i + 1]
    assert caret.strip().startswith("^"), caret
    assert caret.index("^") == shown.index(char), (shown, caret)


def _assert_no_internal_frames(out):
    for marker in ("Traceback", "interactiveshell.py", "run_cell_magic", "magics/", "_ipython.py",
                   "compiler.py", "rewrite.py", "skipping hidden"):
        assert marker not in out, f"{marker!r} in syntax error display:\n{out}"


def test_notation_error_shows_cell_line_and_caret(run):
    result, out = run('''%%gen
def bad(n):
    k ~ poisson_plus_one(1)
    xs[0] ~ normal(0, 1)
''', ok=False)
    err = result.error_in_exec
    assert isinstance(err, SyntaxError)
    assert (err.lineno, err.offset) == (4, 11)
    assert f"Cell In[{result.execution_count}], line 4" in out
    _caret_under(out, "xs[0] ~ normal(0, 1)", "~")
    assert "SyntaxError: the left of `~` must be a name" in out
    _assert_no_internal_frames(out)


def test_python_syntax_error_on_a_rewritten_line(run):
    result, out = run('''%%gen
def bad2(n):
    means = [{("mu", j)} ~ normal(0, 10) for j in range(n)]
    k ~ poisson_plus_one(1) $ 2
''', ok=False)
    err = result.error_in_exec
    assert isinstance(err, SyntaxError)
    assert (err.lineno, err.offset) == (4, 29)
    assert f"Cell In[{result.execution_count}], line 4" in out
    _caret_under(out, "k ~ poisson_plus_one(1) $ 2", "$")
    _assert_no_internal_frames(out)


def test_indentation_error_line(run):
    result, out = run('''%%gen
def bad3(n):
    k ~ poisson_plus_one(1)
      x = 1
''', ok=False)
    assert isinstance(result.error_in_exec, IndentationError)
    assert result.error_in_exec.lineno == 4
    assert f"Cell In[{result.execution_count}], line 4" in out
    _assert_no_internal_frames(out)


def test_other_syntax_errors_are_shown_as_before(run):
    """The handler for cell syntax errors leaves every other SyntaxError to IPython."""
    result, out = run('exec("1 +")', ok=False)
    assert isinstance(result.error_in_exec, SyntaxError)
    assert "Traceback" in out and 'exec("1 +")' in out


def test_choice_outside_a_def_is_a_syntax_error(run):
    result, out = run('''%%gen
x = 1
k ~ normal(0, 1)
''', ok=False)
    assert (result.error_in_exec.lineno, result.error_in_exec.offset) == (3, 3)
    assert "inside a generative function" in out
    _assert_no_internal_frames(out)


def test_runtime_error_shows_cell_lines(run, shell):
    defined, _ = run('''%%gen
def crashes(n):
    k ~ poisson_plus_one(1)
    y = k / 0
    return y
''')
    result, out = run("crashes.simulate(1)", ok=False)
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert f"Cell In[{defined.execution_count}], line 4, in crashes" in out
    assert "----> 4     y = k / 0" in out
    assert "k ~ poisson_plus_one(1)" in out  # the cell as the user wrote it
    # the traceback object itself carries the cell's filename and line
    tb = result.error_in_exec.__traceback__
    while tb.tb_frame.f_code.co_name != "crashes":
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    assert tb.tb_lineno == 4
    assert linecache.getline(filename, 1).startswith("%%gen")
    assert linecache.getline(filename, 3) == "    k ~ poisson_plus_one(1)\n"


def test_error_while_the_cell_runs_starts_at_the_cell(run):
    result, out = run('''%%gen
def fine():
    v ~ normal(0, 1)
raise ValueError("boom at line 4")
''', ok=False)
    assert isinstance(result.error_in_exec, ValueError)
    assert f"Cell In[{result.execution_count}], line 4" in out
    assert "run_cell_magic" not in out and "_ipython.py" not in out


# -- %%transform ----------------------------------------------------------------


def test_transform_four_trace_form_and_check(run, shell):
    run('''%%gen
def coin():
    flip ~ bernoulli(0.3)
''')
    run('''%%transform flip_f (model_in, aux_in) to (model_out, aux_out)
"""Flip the coin."""
b = @read(model_in["flip"], discrete)
@write(model_out["flip"], not b, discrete)
''')
    import imcmc_lab as il

    f = shell.user_ns["flip_f"]
    assert isinstance(f, il.Transform) and not f.one_trace
    assert f.__doc__ == "Flip the coin."
    _, out = run("%check_involution coin None flip_f --trials 5 --seed 0")
    assert "5 randomized trials passed" in out


def test_transform_one_trace_form_params_tcall_and_decorators(run, shell):
    run('''%%gen
def scalar():
    x ~ normal(0, 1)
''')
    run('''%%transform scale(c) (t_in) to (t_out)
import functools

@functools.lru_cache(maxsize=None)
def sign():
    return -1.0

x = read(t_in["x"], continuous)
y = (torch.ones(1, dtype=torch.float64) @ x.reshape(1)) * sign() * c
write(t_out["x"], y, continuous)
''')
    f = shell.user_ns["scale"]
    assert f.one_trace
    run('''%%transform negate (model_in, aux_in) to (model_out, aux_out)
@tcall(scale, 1.0)
''')
    _, out = run('%check_involution scalar None negate --trials 4 --seed 1')
    assert "4 randomized trials passed" in out


def test_transform_runtime_error_names_the_cell_line(run, shell):
    run('''%%transform typo (model_in, aux_in) to (model_out, aux_out)
b = @read(model_in["flip"], discrete)
c = @read(model_in["flipp"], discrete)
''')
    result, out = run("%check_involution coin None typo --trials 1", ok=False)
    assert "flipp" in str(result.error_in_exec)
    assert 'line 3: c = @read(model_in["flipp"], discrete)' in str(result.error_in_exec)


def test_tilde_in_transform_is_a_syntax_error(run):
    result, out = run('''%%transform bad_t (model_in, aux_in) to (model_out, aux_out)
k = @read(model_in["k"], discrete)
u ~ normal(0, 1)
''', ok=False)
    assert (result.error_in_exec.lineno, result.error_in_exec.offset) == (3, 3)
    assert "auxiliary program" in out
    _assert_no_internal_frames(out)


def test_bad_transform_header_is_a_syntax_error_on_line_1(run):
    result, out = run('''%%transform f (a, b) to (c)
pass
''', ok=False)
    assert isinstance(result.error_in_exec, SyntaxError)
    assert result.error_in_exec.lineno == 1
    assert f"Cell In[{result.execution_count}], line 1" in out
    assert "2 input and 1 output" in out
    _caret_under(out, "%%transform f (a, b) to (c)", "f (a")
    _assert_no_internal_frames(out)


def test_check_involution_failure_is_readable(run):
    run('''%%transform not_an_involution (t_in) to (t_out)
x = @read(t_in["x"], continuous)
@write(t_out["x"], x + 1.0, continuous)
''')
    result, out = run("%check_involution scalar None not_an_involution --trials 3 --seed 0",
                      ok=False)
    assert type(result.error_in_exec).__name__ == "InvolutionCheckError"
    assert "InvolutionCheckError: check_involution(not_an_involution) failed" in out
    assert "differs" in out
    assert "checks.py" not in out and "Traceback" not in out


def test_check_involution_usage_errors(run):
    result, out = run("%check_involution nope None negate", ok=False)
    assert "cannot evaluate p `nope`" in out


# -- the paper's programs ----------------------------------------------------------

FIG1_HELPERS = r'''
import torch

def split_weights(weights, j, u1, k):
    w = weights[j - 1]
    new = torch.cat([weights, (w * (1 - u1)).reshape(1)])
    return torch.cat([new[: j - 1], (w * u1).reshape(1), new[j:]])

def merge_weights(weights, j, k):
    w1, w2 = weights[j - 1], weights[k - 1]
    w = w1 + w2
    new = weights[: k - 1]
    return torch.cat([new[: j - 1], w.reshape(1), new[j:]]), w1 / w

def split_params(mu, var, u2, u3, w1, w2):
    s = 2 * u2 - 1                      # u2 ~ beta(2, 2) on (0, 1); s in (-1, 1)
    w = w1 + w2
    mu1 = mu - s * torch.sqrt(var) * torch.sqrt(w2 / w1)
    mu2 = mu + s * torch.sqrt(var) * torch.sqrt(w1 / w2)
    var1 = u3 * (1 - s ** 2) * var * w / w1
    var2 = (1 - u3) * (1 - s ** 2) * var * w / w2
    return mu1, mu2, var1, var2

def merge_params(mu1, mu2, var1, var2, w1, w2, w):
    mu = (w1 * mu1 + w2 * mu2) / w
    var = (w1 * (mu1 ** 2 + var1) + w2 * (mu2 ** 2 + var2)) / w - mu ** 2
    s = (mu - mu1) / (torch.sqrt(var) * torch.sqrt(w2 / w1))
    u3 = var1 * w1 / (w * (1 - s ** 2) * var)
    return mu, var, (s + 1) / 2, u3
'''

FIG1_P = '''%%gen
def p(n):
    k ~ poisson_plus_one(1)
    means = [{("mu", j)} ~ normal(0, 10) for j in range(1, k + 1)]
    vars = [{("var", j)} ~ inv_gamma(1, 10) for j in range(1, k + 1)]
    weights ~ dirichlet(torch.full((k,), 2.0))
    for i in range(1, n + 1):
        {("x", i)} ~ mixture_of_normals(weights, means, vars)
'''

FIG1_Q = '''%%gen
def q(trace):
    k = trace["k"]
    split = True if k == 1 else ({"split"} ~ bernoulli(0.5))
    if split:
        cluster_to_split ~ uniform_discrete(1, k)
        u1 ~ beta(2, 2); u2 ~ beta(2, 2); u3 ~ beta(1, 1)
    else:
        cluster_to_merge ~ uniform_discrete(1, k - 1)
'''

FIG1_F = '''%%transform f (model_in, aux_in) to (model_out, aux_out)
k = @read(model_in["k"], discrete)
split = True if k == 1 else @read(aux_in["split"], discrete)
if split:
    cluster_to_split = @read(aux_in["cluster_to_split"], discrete)
    @write(model_out["k"], k + 1, discrete)
    @copy(aux_in["cluster_to_split"], aux_out["cluster_to_merge"])
    @write(aux_out["split"], False, discrete)
else:
    cluster_to_merge = @read(aux_in["cluster_to_merge"], discrete)
    @write(model_out["k"], k - 1, discrete)
    @copy(aux_in["cluster_to_merge"], aux_out["cluster_to_split"])
    if k > 2:
        @write(aux_out["split"], True, discrete)
if split:
    u1 = @read(aux_in["u1"], continuous)
    u2 = @read(aux_in["u2"], continuous)
    u3 = @read(aux_in["u3"], continuous)
    weights = @read(model_in["weights"], continuous)
    mu = @read(model_in["mu", cluster_to_split], continuous)
    var = @read(model_in["var", cluster_to_split], continuous)
    new_weights = split_weights(weights, cluster_to_split, u1, k)
    w1 = new_weights[cluster_to_split - 1]; w2 = new_weights[k]
    (mu1, mu2, var1, var2) = split_params(mu, var, u2, u3, w1, w2)
    @write(model_out["weights"], new_weights, continuous)
    @write(model_out["mu", cluster_to_split], mu1, continuous)
    @write(model_out["mu", k + 1], mu2, continuous)
    @write(model_out["var", cluster_to_split], var1, continuous)
    @write(model_out["var", k + 1], var2, continuous)
else:
    mu1 = @read(model_in["mu", cluster_to_merge], continuous)
    mu2 = @read(model_in["mu", k], continuous)
    var1 = @read(model_in["var", cluster_to_merge], continuous)
    var2 = @read(model_in["var", k], continuous)
    weights = @read(model_in["weights"], continuous)
    w1 = weights[cluster_to_merge - 1]; w2 = weights[k - 1]
    (new_weights, u1) = merge_weights(weights, cluster_to_merge, k)
    w = new_weights[cluster_to_merge - 1]
    (mu, var, u2, u3) = merge_params(mu1, mu2, var1, var2, w1, w2, w)
    @write(model_out["weights"], new_weights, continuous)
    @write(model_out["mu", cluster_to_merge], mu, continuous)
    @write(model_out["var", cluster_to_merge], var, continuous)
    @write(aux_out["u1"], u1, continuous)
    @write(aux_out["u2"], u2, continuous)
    @write(aux_out["u3"], u3, continuous)
'''


def test_figure_1_split_merge(run, shell):
    """Fig. 1 of the paper in the notebook notation: p, q, f; check and run the kernel."""
    for cell in (FIG1_HELPERS, FIG1_P, FIG1_Q, FIG1_F):
        run(cell)
    _, out = run("%check_involution p q f --args \"(4,)\" --trials 25 --seed 3")
    assert "25 randomized trials passed" in out
    assert "'k', 'split'" in out and "'k':" in out  # both split and merge moves were checked
    run('''import imcmc_lab as il
torch.manual_seed(0)
obs = {("x", i): v for i, v in enumerate([-2.0, -1.5, 2.0, 2.5], start=1)}
trace, _ = p.generate((4,), obs)
ks, accepted = [], 0
for _ in range(30):
    trace, acc = il.involutive_mcmc(trace, q, (), f)
    ks.append(int(trace["k"])); accepted += bool(acc)
''')
    ns = shell.user_ns
    assert ns["accepted"] > 0
    assert all(k >= 1 for k in ns["ks"])
    assert all(("x", i) in ns["trace"] for i in range(1, 5))


FIG2_NODES = r'''
import torch

CONSTANT, LINEAR, SQUARED_EXP, PERIODIC, PLUS, TIMES = range(6)
production_rule_probs = torch.tensor([0.2, 0.2, 0.2, 0.2, 0.1, 0.1])

class LeafNode:
    pass

class ConstantNode(LeafNode):
    def __init__(self, param): self.param = param
    def cov(self, x1, x2): return self.param * torch.ones(len(x1), len(x2), dtype=torch.float64)

class LinearNode(LeafNode):
    def __init__(self, param): self.param = param
    def cov(self, x1, x2): return torch.outer(x1 - self.param, x2 - self.param)

class SquaredExponentialNode(LeafNode):
    def __init__(self, length_scale): self.length_scale = length_scale
    def cov(self, x1, x2): return torch.exp(-0.5 * (x1[:, None] - x2[None, :]) ** 2 / self.length_scale)

class PeriodicNode(LeafNode):
    def __init__(self, scale, period): self.scale, self.period = scale, period
    def cov(self, x1, x2):
        d = torch.abs(x1[:, None] - x2[None, :])
        return torch.exp(-2 * torch.sin(torch.pi * d / self.period) ** 2 / self.scale)

class BinaryNode:
    def __init__(self, left, right): self.left, self.right = left, right

class PlusNode(BinaryNode):
    def cov(self, x1, x2): return self.left.cov(x1, x2) + self.right.cov(x1, x2)

class TimesNode(BinaryNode):
    def cov(self, x1, x2): return self.left.cov(x1, x2) * self.right.cov(x1, x2)

def compute_cov_matrix(cov_function, xs):
    return cov_function.cov(xs, xs)
'''

FIG2_PRIOR = '''%%gen
def cov_function_prior():
    node_type ~ categorical(production_rule_probs)
    if node_type == CONSTANT:
        param ~ uniform(0, 1)
        return ConstantNode(param)
    elif node_type == LINEAR:
        param ~ uniform(0, 1)
        return LinearNode(param)
    elif node_type == SQUARED_EXP:
        length_scale ~ uniform(0, 1)
        return SquaredExponentialNode(length_scale)
    elif node_type == PERIODIC:
        scale ~ uniform(0, 1)
        period ~ uniform(0, 1)
        return PeriodicNode(scale, period)
    elif node_type == PLUS:
        left_node ~ cov_function_prior()
        right_node ~ cov_function_prior()
        return PlusNode(left_node, right_node)
    elif node_type == TIMES:
        left_node ~ cov_function_prior()
        right_node ~ cov_function_prior()
        return TimesNode(left_node, right_node)
'''

FIG2_P = '''%%gen
def gp(x_values):
    cov_function ~ cov_function_prior()
    cov_matrix = compute_cov_matrix(cov_function, x_values)
    n = len(x_values)
    y_values ~ mvnormal(torch.zeros(n), cov_matrix + 0.01 * torch.eye(n))
'''

FIG2_Q = '''%%gen
def walk_tree(node, path):
    if isinstance(node, LeafNode):
        done ~ bernoulli(1)
        return path
    elif {"done"} ~ bernoulli(0.5):
        return path
    elif {"recurse_left"} ~ bernoulli(0.5):
        path = (*path, "left_node")
        return ({"left"} ~ walk_tree(node.left, path))
    else:
        path = (*path, "right_node")
        return ({"right"} ~ walk_tree(node.right, path))

def subtree_q(trace):
    prev_cov_function = trace["cov_function"]
    path ~ walk_tree(prev_cov_function, ("cov_function",))
    new_subtree ~ cov_function_prior()
    return path
'''

FIG2_F = '''%%transform swap_subtree (model_in, aux_in) to (model_out, aux_out)
path = @read(aux_in[()], discrete)
subtree_address = path
@copy(model_in[subtree_address], aux_out["new_subtree"])
@copy(aux_in["new_subtree"], model_out[subtree_address])
@copy(aux_in["path"], aux_out["path"])
'''


def test_figure_2_subtree_replacement(run, shell):
    """Fig. 2: a recursive PCFG prior, a random walk q with `{addr} ~ gen_fn(...)`, a swap f."""
    for cell in (FIG2_NODES, FIG2_PRIOR, FIG2_P, FIG2_Q, FIG2_F):
        run(cell)
    run("xs = torch.linspace(0, 1, 5, dtype=torch.float64)")
    _, out = run("%check_involution gp subtree_q swap_subtree --args xs --trials 20 --seed 2")
    assert "20 randomized trials passed" in out
    run('''import imcmc_lab as il
torch.manual_seed(1)
gp_trace = gp.simulate(xs)
q_trace = subtree_q.simulate(gp_trace)
walk = q_trace[()]
for _ in range(10):
    gp_trace, _acc = il.involutive_mcmc(gp_trace, subtree_q, (), swap_subtree)
''')
    ns = shell.user_ns
    assert ns["walk"][0] == "cov_function"
    assert ("cov_function", "node_type") in ns["gp_trace"]
    assert ns["gp_trace"]["y_values"].shape == (5,)


# -- issue 17: Python's own syntax errors, clean boxes for the user's mistakes -------


def test_unclosed_bracket_is_pythons_error_at_its_line(run):
    """An unclosed `(` on line 3 is reported there as Python would, not as `~` advice
    about a later line (the unclosed bracket swallows the lines after it)."""
    result, out = run('''%%gen
def jumpy(trace):
    moved ~ bernoulli(0.5
    if moved:
        shift = 1.0
    else:
        shift = 0.0
    delta ~ normal(shift, 1)
''', ok=False)
    err = result.error_in_exec
    assert isinstance(err, SyntaxError)
    assert err.msg == "'(' was never closed"
    assert err.lineno == 3
    assert f"Cell In[{result.execution_count}], line 3" in out
    _caret_under(out, "moved ~ bernoulli(0.5", "(")
    assert "binds more loosely" not in out and "parentheses" not in out
    _assert_no_internal_frames(out)


def test_tilde_advice_only_when_the_tilde_is_the_cause(run):
    result, out = run('''%%gen
def loose():
    y = 1 + k ~ normal(0, 1)
    z = (1
''', ok=False)
    # the `~` on line 3 comes before the unclosed bracket: its advice is the first problem
    assert result.error_in_exec.lineno == 3
    assert "parentheses" in out


def test_annotated_tilde_is_a_syntax_error(run):
    result, out = run('''%%gen
def annotated():
    x: float ~ normal(0, 1)
    return x
''', ok=False)
    err = result.error_in_exec
    assert isinstance(err, SyntaxError) and (err.lineno, err.offset) == (3, 14)
    assert "annotation" in out and "x ~ normal" in out
    _assert_no_internal_frames(out)


def test_plain_annotations_and_assignments_still_work(run, shell):
    run('''%%gen
def typed():
    n: int = 3
    x: float = ({"x"} ~ normal(0, 1))
    return n
''')
    trace = shell.user_ns["typed"].simulate()
    assert trace[()] == 3 and ("x",) in trace.get_choices().to_dict()


def test_helper_without_tilde_stays_a_plain_function(run, shell):
    """Issue 16 item 20: a helper `def` in a %%gen cell (no `~`) is an ordinary function:
    calling it returns its value, and it works as a decorator."""
    _, out = run('''%%gen --show
def shifted(a):
    return a + 1

def twice(fn):
    def wrapper(*args):
        return 2 * fn(*args)
    return wrapper

@twice
def doubled_normal():
    x ~ normal(shifted(0), 1)
    return x
''')
    assert shell.user_ns["shifted"](1) == 2
    assert "@il.gen\ndef shifted" not in out and "@il.gen\ndef twice" not in out
    assert "def doubled_normal" in out
    run('''%%gen
def uses_helper():
    x ~ normal(shifted(10), 1)
    return shifted(x)
''')
    trace = shell.user_ns["uses_helper"].simulate()
    assert float(trace[()]) == float(trace["x"]) + 1


def test_explicit_gen_without_tilde_is_still_generative(run, shell):
    run('''%%gen
@gen
def no_choices(n):
    return n * 2
''')
    assert shell.user_ns["no_choices"].simulate(4)[()] == 8


def _assert_no_library_frames(out):
    for marker in ("checks.py", "apply.py", "interpreter.py", "language.py", "chains.py",
                   "kernels.py", "involutive.py", "_ipython.py", "run_line_magic",
                   "skipping hidden"):
        assert marker not in out, f"{marker!r} in the error display:\n{out}"


def test_transform_error_from_check_involution_is_one_clean_box(run, shell):
    run('''%%gen
def coin_c():
    flip ~ bernoulli(0.3)
''')
    defined, _ = run('''%%transform typo_c (model_in, aux_in) to (model_out, aux_out)
b = @read(model_in["flip"], discrete)
c = @read(model_in["flipp"], discrete)
''')
    result, out = run("%check_involution coin_c None typo_c --trials 1", ok=False)
    assert type(result.error_in_exec).__name__ == "AddressError"
    # the user's cell line, the address and the fix; no frames of the library
    assert f"Cell In[{defined.execution_count}], line 3" in out
    assert "Did you mean 'flip'?" in out and "flipp" in out
    _assert_no_library_frames(out)
    # the debug option shows the library's frames
    result, out = run("%check_involution coin_c None typo_c --trials 1 --traceback", ok=False)
    assert "interpreter.py" in out


def test_label_error_from_a_chain_is_one_clean_box(run, shell):
    defined, _ = run('''%%transform wrong_label (model_in, aux_in) to (model_out, aux_out)
b = @read(model_in["flip"], continuous)
''')
    chain_cell = '''import imcmc_lab as il
kernel = il.InvolutiveKernel(None, (), wrong_label)
chain = il.run_chain(kernel, coin_c.simulate(), 5, progress=False)
'''
    result, out = run(chain_cell, ok=False)
    assert type(result.error_in_exec).__name__ == "LabelError"
    assert f"Cell In[{result.execution_count}], line 3" in out        # the user's call
    assert f"Cell In[{defined.execution_count}], line 2" in out       # the transform's line
    assert "il.discrete" in out                                        # the fix
    _assert_no_library_frames(out)
    run("%imcmc_debug on")
    try:
        result, out = run(chain_cell, ok=False)
        assert "chains.py" in out and "interpreter.py" in out
    finally:
        run("%imcmc_debug off")


def test_tilde_on_something_not_sampleable_says_so(run):
    """`k ~ 3` compiles to `3 @ "k"`: before, Python's "unsupported operand type(s) for @:
    'int' and 'str'" (an operator and a type the user never wrote) with the engine's frames."""
    defined, _ = run('''%%gen
def not_sampleable(which):
    y ~ normal(0.0, 1.0)
    if which == 0:
        k ~ 3
    elif which == 1:
        x ~ normal
    else:
        {("z", 1)} ~ torch.distributions.Normal(0.0, 1.0)
''')
    outs = []
    for which, line, kind in ((0, 5, "int"), (1, 7, "function"), (2, 9, "Normal")):
        result, out = run(f"not_sampleable.simulate({which})", ok=False)
        outs.append(out)
        assert type(result.error_in_exec) is TypeError
        assert f"Cell In[{defined.execution_count}], line {line}" in out
        assert f"the right side of `~` at line {line}" in out and f"has type {kind}" in out
        assert "normal(0.0, 1.0)" in out and "unsupported operand" not in out
        _assert_no_library_frames(out)
        assert "runtime.py" not in out
    assert "without its arguments" in outs[1]
    # a plain `3 @ "k"` outside a %%gen cell keeps Python's own message
    result, out = run("3 @ 'k'", ok=False)
    assert "unsupported operand type(s) for @: 'int' and 'str'" in out


def test_library_bugs_keep_their_frames(run):
    """An exception that is not an ImcmcError (here an AttributeError raised inside the
    engine) keeps its full traceback."""
    result, out = run("import imcmc_lab as il\nil.normal(0, 1).logpdf(object())", ok=False)
    assert not isinstance(result.error_in_exec, SyntaxError)
    assert "Traceback" in out and "distributions" in out


def test_magics_import_no_engine_facade():
    """The magics get the engine passed in by `%load_ext imcmc_lab` (no import cycle)."""
    root = HERE.parent / "magics"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert all(a.name != "imcmc_lab" for a in node.names), path
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module != "imcmc_lab", f"{path}:{node.lineno}"


# -- unloading ---------------------------------------------------------------------


def test_unload_and_reload(shell):
    import imcmc_lab
    from imcmc_lab.magics import unload_ipython_extension

    unload_ipython_extension(shell)
    try:
        assert "gen" not in shell.magics_manager.magics["cell"]
        assert "normal" not in shell.user_ns
        assert SyntaxError not in shell.custom_exceptions
    finally:
        imcmc_lab.load_ipython_extension(shell)     # the hook hands the engine to the magics
    assert "gen" in shell.magics_manager.magics["cell"]
    assert shell.user_ns["normal"] is imcmc_lab.normal


# ---------------------------------------------------------------------------
# a notebook, top to bottom, in a real kernel


def test_notebook_runs_under_nbclient(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(HERE / "notebooks" / "magics_demo.ipynb", as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120,
                                     resources={"metadata": {"path": str(tmp_path)}},
                                     shutdown_kernel="immediate")
    client.execute()

    def text_of(cell):
        parts = []
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                parts.append(o.text)
            elif o.output_type == "error":
                parts.extend(o.traceback)
            elif "text/plain" in o.get("data", {}):
                parts.append(o.data["text/plain"])
        return "\n".join(parts)

    by_tag = {}
    for cell in nb.cells:
        for tag in cell.metadata.get("tags", []):
            by_tag[tag] = cell
    import re

    strip = re.compile(r"\x1b\[[0-9;]*m")
    syntax = strip.sub("", text_of(by_tag["syntax-error"]))
    n = by_tag["syntax-error"].execution_count
    assert f"Cell In[{n}], line 3" in syntax, syntax
    assert "SyntaxError" in syntax and "Traceback" not in syntax
    assert "randomized trials passed" in text_of(by_tag["check"])
    runtime = strip.sub("", text_of(by_tag["runtime-error"]))
    m = by_tag["buggy-model"].execution_count
    assert f"Cell In[{m}], line 4, in buggy" in runtime, runtime
    assert "k ~ poisson_plus_one(1)" in runtime
