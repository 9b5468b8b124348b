"""FusedMLP against nn.Sequential(nn.Linear, act, ..., nn.Linear): outputs and every gradient
(CPU: the NumPy twin; gpu-marked: CUDA fp16/bf16/fp32), gradcheck, inputs without grad, frozen
layers, from/to_sequential, state_dict interchange, odd sizes, bad arguments, torch.compile; on
the stubbed host harness (``benchmarks.dense_torch_host``), what a repeat step launches."""

import copy

import pytest

torch = pytest.importorskip("torch")

from benchmarks.suites import dense_torch_host as harness  # noqa: E402
from gpulinalg.dense import FusedMLP, _plans_cuda, plan_cache_info  # noqa: E402

F64 = dict(rtol=1e-10, atol=1e-12)


def _pair(sizes, activation="relu", last_activation=False, bias=True, dtype=torch.float64,
          device="cpu", seed=0):
    """A FusedMLP and an independent nn.Sequential holding equal parameters."""
    torch.manual_seed(seed)
    mlp = FusedMLP(sizes, activation=activation, bias=bias, last_activation=last_activation,
                   device=device, dtype=dtype)
    ref = FusedMLP(sizes, activation=activation, bias=bias, last_activation=last_activation,
                   device=device, dtype=dtype).to_sequential()
    ref.load_state_dict(mlp.state_dict())
    return mlp, ref


def _compare(mlp, ref, x, tol, need_x=True):
    """Forward and backward of both on copies of ``x``; asserts outputs and every gradient."""
    xa = x.detach().clone().requires_grad_(need_x)
    xb = x.detach().clone().requires_grad_(need_x)
    y, y_ref = mlp(xa), ref(xb)
    torch.testing.assert_close(y, y_ref, **tol)
    assert y.requires_grad == y_ref.requires_grad
    if not y.requires_grad:  # everything frozen, input without grad
        return y
    g = torch.randn_like(y)
    y.backward(g)
    y_ref.backward(g)
    if need_x:
        torch.testing.assert_close(xa.grad, xb.grad, **tol)
    else:
        assert xa.grad is None
    for (name, p), (_, q) in zip(mlp.named_parameters(), ref.named_parameters()):
        if q.requires_grad:
            torch.testing.assert_close(p.grad, q.grad, **tol, msg=name)
        else:
            assert p.grad is None, name
    return y


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("last_activation", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_sequential(activation, last_activation, bias):
    mlp, ref = _pair([12, 16, 8, 16, 5], activation, last_activation, bias)
    for _ in range(2):  # the second step repeats the first's keys
        for p in (*mlp.parameters(), *ref.parameters()):
            p.grad = None
        _compare(mlp, ref, torch.randn(7, 12, dtype=torch.float64), F64)


def test_matches_sequential_float32_and_batch_dims():
    mlp, ref = _pair([9, 20, 3], "gelu", dtype=torch.float32)
    y = _compare(mlp, ref, torch.randn(2, 5, 9), dict(rtol=1e-4, atol=1e-5))
    assert y.shape == (2, 5, 3)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_gradcheck(activation):
    torch.manual_seed(3)
    mlp = FusedMLP([4, 6, 5, 3], activation=activation, last_activation=activation == "gelu",
                   dtype=torch.float64)
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    params = list(mlp.parameters())

    def fn(x, *ps):
        with torch.nn.utils.stateless._reparametrize_module(
                mlp, dict(zip([n for n, _ in mlp.named_parameters()], ps))):
            return mlp(x)
    assert torch.autograd.gradcheck(fn, (x, *params))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_first_layer_input_without_grad(activation):
    mlp, ref = _pair([6, 10, 10, 4], activation)
    _compare(mlp, ref, torch.randn(5, 6, dtype=torch.float64), F64, need_x=False)


@pytest.mark.parametrize("frozen", [("0",), ("2",), ("4",), ("0", "2"), ("0", "2", "4")],
                         ids=lambda f: "+".join(f))
@pytest.mark.parametrize("need_x", [True, False])
def test_frozen_layers(frozen, need_x):
    mlp, ref = _pair([6, 10, 8, 4], "gelu")
    for model in (mlp, ref):
        for name in frozen:
            model.get_submodule(name).requires_grad_(False)
    _compare(mlp, ref, torch.randn(5, 6, dtype=torch.float64), F64, need_x=need_x)


def test_frozen_bias_only():
    mlp, ref = _pair([6, 10, 8, 4], "relu")
    for model in (mlp, ref):
        model.get_submodule("0").bias.requires_grad_(False)
        model.get_submodule("2").weight.requires_grad_(False)
    _compare(mlp, ref, torch.randn(5, 6, dtype=torch.float64), F64)


@pytest.mark.parametrize("sizes", [[5, 3], [7, 13, 3, 9], [1, 1], [3, 1, 2]])
@pytest.mark.parametrize("last_activation", [False, True])
def test_odd_sizes(sizes, last_activation):
    mlp, ref = _pair(sizes, "relu", last_activation)
    assert len(mlp.layers()) == len(sizes) - 1
    _compare(mlp, ref, torch.randn(4, sizes[0], dtype=torch.float64), F64)


def test_inference_without_grad():
    mlp, ref = _pair([6, 10, 4], "gelu", last_activation=True)
    x = torch.randn(3, 6, dtype=torch.float64)
    with torch.no_grad():
        y = mlp(x)
    assert not y.requires_grad
    torch.testing.assert_close(y, ref(x), **F64)


def test_from_and_to_sequential_share_parameters():
    seq = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3),
                              torch.nn.ReLU())
    mlp = FusedMLP.from_sequential(seq)
    assert mlp.sizes == (6, 8, 3) and mlp.activation == "relu" and mlp.last_activation
    assert mlp.get_submodule("0").weight is seq[0].weight
    assert mlp.get_submodule("2").bias is seq[2].bias
    assert all(p.device.type == "cpu" for p in mlp.parameters())
    back = mlp.to_sequential()
    assert [type(m) for m in back] == [type(m) for m in seq]
    assert back[2].weight is seq[2].weight
    x = torch.randn(4, 6)
    torch.testing.assert_close(mlp(x), seq(x))
    single = FusedMLP.from_sequential(torch.nn.Sequential(torch.nn.Linear(4, 2, bias=False)),
                                      activation="gelu")
    assert single.sizes == (4, 2) and not single.last_activation
    assert single.get_submodule("0").bias is None


def test_state_dict_round_trip():
    mlp = FusedMLP([5, 7, 7, 2], activation="gelu")
    seq = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU(approximate="tanh"),
                              torch.nn.Linear(7, 7), torch.nn.GELU(approximate="tanh"),
                              torch.nn.Linear(7, 2))
    assert mlp.state_dict().keys() == seq.state_dict().keys()
    seq.load_state_dict(mlp.state_dict())
    other = FusedMLP([5, 7, 7, 2], activation="gelu")
    other.load_state_dict(seq.state_dict())
    x = torch.randn(3, 5)
    torch.testing.assert_close(other(x), mlp(x))
    torch.testing.assert_close(seq(x), mlp(x), rtol=1e-5, atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least two"):
        FusedMLP([4])
    with pytest.raises(ValueError, match="positive"):
        FusedMLP([4, 0])
    with pytest.raises(TypeError, match="sequence of ints"):
        FusedMLP([4, 2.5])
    with pytest.raises(ValueError, match="'relu' or 'gelu'"):
        FusedMLP([4, 2], activation="tanh")
    with pytest.raises(TypeError, match="last_activation"):
        FusedMLP([4, 2], last_activation="yes")
    lin = torch.nn.Linear
    with pytest.raises(ValueError, match="tanh approximation"):
        FusedMLP.from_sequential(torch.nn.Sequential(lin(4, 4), torch.nn.GELU(), lin(4, 2)))
    with pytest.raises(ValueError, match="one activation"):
        FusedMLP.from_sequential(torch.nn.Sequential(lin(4, 4), torch.nn.ReLU(), lin(4, 4),
                                                     torch.nn.GELU(approximate="tanh"),
                                                     lin(4, 2)))
    with pytest.raises(TypeError, match="nn.ReLU or nn.GELU"):
        FusedMLP.from_sequential(torch.nn.Sequential(lin(4, 4), torch.nn.Tanh(), lin(4, 2)))
    with pytest.raises(TypeError, match="nn.Linear"):
        FusedMLP.from_sequential(torch.nn.Sequential(torch.nn.ReLU(), lin(4, 2)))
    with pytest.raises(ValueError, match="takes 5 features"):
        FusedMLP.from_sequential(torch.nn.Sequential(lin(4, 4), torch.nn.ReLU(), lin(5, 2)))
    with pytest.raises(ValueError, match="every nn.Linear or in none"):
        FusedMLP.from_sequential(torch.nn.Sequential(lin(4, 4), torch.nn.ReLU(),
                                                     lin(4, 2, bias=False)))
    with pytest.raises(ValueError, match="activation='gelu'"):
        FusedMLP.from_sequential(torch.nn.Sequential(lin(4, 4), torch.nn.ReLU(), lin(4, 2)),
                                 activation="gelu")
    with pytest.raises(ValueError, match="K="):
        FusedMLP([4, 3, 2])(torch.randn(2, 5, requires_grad=True))


def test_repr():
    assert "sizes=(4, 3, 2), activation='gelu'" in repr(FusedMLP([4, 3, 2], activation="gelu"))


def test_compile_fullgraph_eager_backend():
    mlp, ref = _pair([8, 16, 16, 4], "gelu")
    torch._dynamo.reset()
    compiled = torch.compile(mlp, fullgraph=True, backend="eager")
    x = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    y = compiled(x)
    y.sum().backward()
    y_ref = ref(x_ref)
    y_ref.sum().backward()
    torch.testing.assert_close(y, y_ref, **F64)
    torch.testing.assert_close(x.grad, x_ref.grad, **F64)
    for p, q in zip(mlp.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **F64)


def test_autocast_cpu_bfloat16():
    pytest.importorskip("ml_dtypes")
    mlp = FusedMLP([8, 16, 4], activation="relu")
    x = torch.randn(3, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mlp(x)
        y_ref = mlp.to_sequential()(x)
    assert y.dtype == y_ref.dtype == torch.bfloat16
    torch.testing.assert_close(y, y_ref, rtol=2e-2, atol=2e-2)
    y.float().sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in mlp.parameters())
    assert x.grad.dtype == torch.float32


def test_mlp_trains():
    torch.manual_seed(2)
    mlp = FusedMLP([8, 32, 32, 1], activation="gelu")
    x = torch.randn(64, 8)
    y = x[:, :1] * 2 - x[:, 1:2] ** 2
    opt = torch.optim.Adam(mlp.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = ((mlp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


# --------------------------------------------------- host harness: what a repeat step launches


def _launches():
    return sum(getattr(p, "launches", 0) for p in _plans_cuda._cache.plans.values())


def _epilogs():
    return sorted(str(p.key[3]) for p in _plans_cuda._cache.plans.values())


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("case, expected", [
    ("inner", 3 + 1 + 2 * 2 + 1),      # forward 3; top wgrad; 2 x (fused dgrad + wgrad); grad_x
    ("first", 3 + 1 + 2 * 2),          # no grad_x product
    ("frozen-bottom", 3 + 1 + 2),      # layer 0 frozen, input without grad: the walk stops
    ("frozen-top", 3 + 0 + 2 * 2 + 1),  # top layer frozen: its dz still feeds the fused product
], ids=lambda v: str(v))
def test_repeat_step_launches(activation, case, expected):
    ours, _, x, grad = harness._mlps(8, 16, activation, layers=3)
    x.requires_grad_(case in ("inner", "frozen-top"))
    if case == "frozen-bottom":
        ours.get_submodule("0").requires_grad_(False)
    if case == "frozen-top":
        ours.get_submodule("4").requires_grad_(False)
    step = harness._step(ours, x, grad)
    with harness.stand_in():
        step()
        step()
        before, launched = plan_cache_info(), _launches()
        steps = 4
        with harness.SlowRoads() as counts:
            for _ in range(steps):
                step()
        assert counts == {"plans_made": 0, "public_calls": 0, "full_dispatches": 0}
        assert plan_cache_info().misses == before.misses
        assert _launches() - launched == steps * expected
        epilogs = _epilogs()
    fused = "DRELU_BGRAD" if activation == "relu" else "DGELU_BGRAD"
    assert fused in epilogs and f"{activation.upper()}_AUX_BIAS" in epilogs
    assert (x.grad is None) == (case in ("first", "frozen-bottom"))


# ---------------------------------------------------------------- GPU

EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -23}


def _rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32],
                         ids=["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("last_activation", [False, True])
def test_gpu_matches_sequential(dtype, activation, last_activation):
    """Normwise relative error of the output and every gradient against the same model in
    float64 (DESIGN §4: tolerances from eps): at most 30 eps, and at most 8x (+ 8 eps) that of
    nn.Sequential in the same dtype (whose cuBLAS products round alike)."""
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    dev = "cuda"
    sizes = [96, 256, 136, 256, 40]
    mlp, ref = _pair(sizes, activation, last_activation, dtype=dtype, device=dev, seed=5)
    exact = copy.deepcopy(mlp.to_sequential()).double()  # to_sequential shares mlp's parameters
    x = torch.randn(300, sizes[0], device=dev, dtype=dtype)
    g = torch.randn(300, sizes[-1], device=dev, dtype=dtype)
    results = []
    for model, xdt in ((mlp, dtype), (ref, dtype), (exact, torch.float64)):
        for _ in range(2):  # the second step runs the repeat path
            xi = x.detach().to(xdt).requires_grad_(True)  # a fresh leaf for every model
            for p in model.parameters():
                p.grad = None
            y = model(xi)
            y.backward(g.to(xdt))
        results.append([y, xi.grad, *[p.grad for p in model.parameters()]])
    ours, torchs, exact_r = results
    tol = 30 * EPS[dtype]
    for i, (o, t, e) in enumerate(zip(ours, torchs, exact_r)):
        assert o.dtype == dtype and o.device.type == "cuda"
        err, ref_err = _rel(o, e), _rel(t, e)
        # cuBLASLt's GELU epilog rounds a few eps apart from torch's GELU kernel in fp32
        assert err <= tol and err <= 8 * ref_err + 8 * EPS[dtype], (i, err, ref_err)


@pytest.mark.gpu
def test_gpu_first_layer_and_frozen():
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    mlp, ref = _pair([64, 128, 128, 32], "relu", dtype=torch.float32, device="cuda")
    for model in (mlp, ref):
        model.get_submodule("2").requires_grad_(False)
    for _ in range(2):
        for p in (*mlp.parameters(), *ref.parameters()):
            p.grad = None
        _compare(mlp, ref, torch.randn(50, 64, device="cuda"), dict(rtol=1e-4, atol=1e-4),
                 need_x=False)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_autocast(dtype):
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    mlp = FusedMLP([64, 128, 32], activation="gelu", device="cuda")
    x = torch.randn(16, 64, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=dtype):
        y = mlp(x)
        y_ref = mlp.to_sequential()(x)
    assert y.dtype == y_ref.dtype == dtype
    torch.testing.assert_close(y, y_ref, rtol=30 * EPS[dtype], atol=30 * EPS[dtype])
    y.float().sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in mlp.parameters())


def test_compile_has_no_graph_breaks_and_runs_the_mlp_op():
    mlp = FusedMLP([8, 16, 16, 4], activation="relu", last_activation=True, dtype=torch.float64)
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(mlp)(torch.randn(3, 8, dtype=torch.float64))
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    ops = [str(n.target) for g in explanation.graphs for n in g.graph.nodes
           if n.op == "call_function"]
    assert any("fused_mlp" in op for op in ops), ops


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("last", ["none", "relu", "gelu"])
def test_custom_ops_pass_opcheck(activation, last):
    torch.manual_seed(6)
    x = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    ws = [torch.randn(n, k, dtype=torch.float64, requires_grad=True)
          for k, n in ((6, 9), (9, 7), (7, 3))]
    bs = [torch.randn(w.shape[0], dtype=torch.float64, requires_grad=True) for w in ws]
    act_last = activation if last != "none" else "none"
    torch.library.opcheck(torch.ops.gpulinalg.fused_mlp.default, (x, ws, bs, activation, act_last),
                          test_utils=("test_schema", "test_faketensor",
                                      "test_autograd_registration"))


@pytest.mark.parametrize("need_x", [True, False])
def test_compiled_frozen_layer_matches(need_x):
    mlp, ref = _pair([6, 10, 8, 4], "gelu", last_activation=True)
    for model in (mlp, ref):
        model.get_submodule("2").requires_grad_(False)
    torch._dynamo.reset()
    compiled = torch.compile(mlp, fullgraph=True, backend="eager")
    _compare(compiled, ref, torch.randn(5, 6, dtype=torch.float64), F64, need_x=need_x)


@pytest.mark.gpu
def test_gpu_compile_default_backend():
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    mlp, ref = _pair([64, 128, 128, 32], "gelu", dtype=torch.float16, device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(mlp, fullgraph=True)
    x = torch.randn(48, 64, device="cuda", dtype=torch.float16, requires_grad=True)
    y = compiled(x)
    y.float().sum().backward()
    tol = dict(rtol=30 * EPS[torch.float16], atol=30 * EPS[torch.float16])
    torch.testing.assert_close(y, ref(x.detach()), **tol)
    assert all(p.grad is not None for p in mlp.parameters()) and x.grad is not None


def test_cpu_tensors_take_torchs_own_ops():
    """On CPU tensors the layers are torch's ops (nothing to fuse there): the same values and
    gradients as the nn.Sequential, and its autograd nodes."""
    torch.manual_seed(5)
    mlp, ref = _pair([8, 16, 16, 4], "gelu")
    x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    out, want = mlp(x), ref(x)
    torch.testing.assert_close(out, want)
    assert "GpulinalgCall" not in type(out.grad_fn).__name__
    g, = torch.autograd.grad(out.sum(), x)
    g_ref, = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(g, g_ref)
