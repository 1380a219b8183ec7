"""Varlen (packed) causal attention, FlashAttention-2's ``flash_attn_varlen_func``: sequences of
different lengths packed along T with ``cu_seqlens``, each attending causally within itself only.
Compared with an independent reference (each sequence's causal softmax attention in float64 torch)
at several block sizes, with an empty sequence, a sequence of one token and lengths off every
block; programs past their sequence's end return at once (the kernel's early exit), which the
same results show is sound: no query row outside a sequence is stored, none inside is missed.
Each query row's log-sum-exp, the second output, is the reference's too; the backward's gradients
are torch autograd's through the same reference, of a loss that reads both outputs."""

import itertools
import math
import os

import pytest
import torch

from tests.conftest import force_config
from tilegen.compiler import compile_spec

#: lengths with an empty sequence, one of one token, and lengths off every block size
LENGTHS = [5, 0, 1, 17, 33]


def _packed(lengths, heads, dim, dtype, seed, device="cpu"):
    generator = torch.Generator().manual_seed(seed)
    total = sum(lengths)
    q, k, v = (torch.randn(total, heads, dim, generator=generator).to(dtype).to(device) for _ in range(3))
    cu_seqlens = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    return q, k, v, cu_seqlens


def _torch_varlen(q, k, v, cu_seqlens, scale, lse=False):
    """Each sequence's causal attention on its own, in float64: softmax(q k^T * scale, causal) v
    (with ``lse``, also each query row's log-sum-exp of its causal scores, [T, H])."""
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    rows = torch.empty(q.shape[:2], dtype=torch.float64, device=q.device)
    bounds = cu_seqlens.tolist()
    for start, end in itertools.pairwise(bounds):
        if end == start:
            continue
        qs, ks, vs = (t[start:end].transpose(0, 1).double() for t in (q, k, v))  # [H, n, D]
        scores = qs @ ks.transpose(1, 2) * scale
        causal = torch.ones(end - start, end - start, dtype=torch.bool, device=q.device).tril()
        masked = scores.masked_fill(~causal, float("-inf"))
        out[start:end] = (torch.softmax(masked, dim=-1) @ vs).transpose(0, 1)
        rows[start:end] = torch.logsumexp(masked, dim=-1).transpose(0, 1)
    return (out, rows) if lse else out


TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("config", [None, {"BM": 64, "BN": 32}, {"BM": 128, "BN": 128}])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_varlen_attention_is_each_sequences_causal_attention(generated, monkeypatch, config, dtype):
    module = generated("varlen_attention")
    force_config(monkeypatch, module, config)
    q, k, v, cu_seqlens = _packed(LENGTHS, 2, 16, dtype, seed=len(str(config)))
    scale = 1 / math.sqrt(16)
    out, lse = module.varlen_attention(q, k, v, cu_seqlens, max(LENGTHS), scale)
    want, want_lse = _torch_varlen(q, k, v, cu_seqlens, scale, lse=True)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-5, atol=tol)
    reference = module.reference(q, k, v, cu_seqlens, max(LENGTHS), scale)
    torch.testing.assert_close(reference[0].double(), want, rtol=tol, atol=tol)
    torch.testing.assert_close(reference[1].double(), want_lse, rtol=1e-5, atol=tol)


@pytest.mark.parametrize("config", [None, {"BM": 64, "BN": 64}])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_varlen_attention_gradients_are_torchs(generated, monkeypatch, config, dtype):
    """The backward (delta, dk and dv, dq: FlashAttention-2's, per packed sequence) against torch
    autograd through the float64 reference, of a loss reading o and the rows' log-sum-exp: the
    gradients of q, k and v, none for cu_seqlens; keys near a sequence's end take no gradient from
    the next sequence's queries."""
    module = generated("varlen_attention")
    for name in ("varlen_attention_backward_dkdv", "varlen_attention_backward_dq"):
        force_config(monkeypatch, generated(name), config)
    force_config(monkeypatch, module, config)
    q, k, v, cu_seqlens = _packed(LENGTHS, 2, 16, dtype, seed=11)
    generator = torch.Generator().manual_seed(12)
    do = torch.randn(q.shape, generator=generator).to(dtype)
    dlse = torch.randn(q.shape[:2], generator=generator)
    scale = 0.25
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    torch.autograd.backward(module.varlen_attention(*ours, cu_seqlens, max(LENGTHS), scale), (do, dlse))
    theirs = [t.double().requires_grad_() for t in (q, k, v)]
    torch.autograd.backward(_torch_varlen(*theirs, cu_seqlens, scale, lse=True), (do.double(), dlse.double()))
    tol = 10 * TOLERANCE[dtype]
    for name, mine, want in zip("qkv", ours, theirs, strict=True):
        torch.testing.assert_close(mine.grad.double(), want.grad, rtol=tol, atol=tol, msg=f"d{name}")


def test_a_bound_above_the_longest_sequence_changes_nothing(generated):
    """L is a bound (the caller's max_seqlen may be rounded up): tiles past every sequence exit."""
    module = generated("varlen_attention")
    q, k, v, cu_seqlens = _packed([3, 20, 9], 1, 8, torch.float32, seed=3)
    exact = module.varlen_attention(q, k, v, cu_seqlens, 20, -0.5)[0]  # a negative scale too
    torch.testing.assert_close(module.varlen_attention(q, k, v, cu_seqlens, 77, -0.5)[0], exact, rtol=0, atol=0)
    torch.testing.assert_close(exact.double(), _torch_varlen(q, k, v, cu_seqlens, -0.5), rtol=1e-5, atol=1e-5)


def test_programs_past_a_sequences_end_return_at_once():
    """The kernel returns where every lane fails the one guard all its stores carry; a spec with an
    unguarded store, or whose guard is on a whole axis, keeps every program."""
    source = compile_spec((_spec_text("varlen_attention")), "specs/varlen_attention.tile").source
    assert "    if pid_m * BM >= n_b:  # every store is guarded by m < n_b" in source
    for name in ("jagged_softmax", "attention_causal"):
        assert "\n        return\n" not in compile_spec(_spec_text(name), f"specs/{name}.tile").source


RAISED = """kernel k
  in  x: f32[T]
  in  starts: i32[B1]
  in  L: i32
  out y: f32[T]
  block BM = 4
  grid  m over L by BM, b over B1 - 1
  n_b = starts[b + 1] - starts[b]
  n_b = n_b + 3
  y[starts[b] + m] = x[starts[b] + m] * 2.0 where m < n_b
"""


def test_a_bound_assigned_twice_keeps_every_program(compiled):
    """The exit must read the number the stores compare with: a bound assigned again after its
    first value gives no exit, and rows up to the raised bound are stored (the next sequence's)."""
    assert "return\n" not in compile_spec(RAISED, "k.tile").source.split("def k(")[0].split("def k_kernel(")[1]
    module = compiled(RAISED)
    x = torch.arange(12, dtype=torch.float32)
    y = module.k(x, torch.tensor([0, 2, 9], dtype=torch.int32), 9)
    torch.testing.assert_close(y[:5], x[:5] * 2.0)  # sequence 0: rows 0-1, and 3 more by the raised bound


def test_a_loop_ends_where_a_bound_from_data_holds_nowhere():
    """A ``where(m < n_b, ...)`` on a loop's axis with ``n_b`` a number per program ends every range of
    the loop at ``cdiv(n_b, BM)``: dk, dv walk their own sequence's queries only, jagged_sum its rows.
    A condition other than the axis below the number ends nothing."""
    dkdv = compile_spec(_spec_text("varlen_attention_backward_dkdv"), "specs/k.tile").source
    loops = [line for line in dkdv.splitlines() if line.strip().startswith("for m in range(")]
    assert len(loops) == 3 and all(line.endswith(", tl.cdiv(n_b, BM))):") for line in loops), loops
    summed = compile_spec(_spec_text("jagged_sum"), "specs/k.tile").source
    assert "for l in range(0, min(L // BL, tl.cdiv(n, BL))):" in summed
    flipped = _spec_text("jagged_sum").replace("where(l < n,", "where(l >= n,")
    assert "tl.cdiv(n, BL)" not in compile_spec(flipped, "specs/k.tile").source


def _spec_text(name):
    from tests.conftest import ROOT

    return (ROOT / "specs" / f"{name}.tile").read_text()


GPU = pytest.mark.skipif(os.environ.get("TILEGEN_TEST_GPU") != "1" or not torch.cuda.is_available(),
                         reason="a GPU test: TILEGEN_TEST_GPU=1 on a machine with CUDA")


@GPU
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_varlen_attention_on_the_gpu(generated, dtype):
    """Model-sized heads (D 128) and sequences of 1 to 700 tokens, every config the tuner may pick;
    the gradients at the untuned default configs."""
    module = generated("varlen_attention")
    lengths = [700, 1, 0, 129, 64, 333]
    q, k, v, cu_seqlens = _packed(lengths, 4, 128, dtype, seed=7, device="cuda")
    want = _torch_varlen(q, k, v, cu_seqlens, 0.088)
    for index in range(len(module._CONFIGS)):
        try:
            out = module.varlen_attention(q, k, v, cu_seqlens, 700, 0.088, config=index)[0]
        except Exception as error:  # a config needing more shared memory than the GPU has
            assert "OutOfResources" in type(error).__name__, error
            continue
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=2e-2, msg=f"config {index}")
    do = torch.randn(q.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(8)).to(dtype)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    module.varlen_attention(*ours, cu_seqlens, 700, 0.088)[0].backward(do)
    theirs = [t.double().requires_grad_() for t in (q, k, v)]
    _torch_varlen(*theirs, cu_seqlens, 0.088).backward(do.double())
    for name, mine, want in zip("qkv", ours, theirs, strict=True):
        torch.testing.assert_close(mine.grad.double(), want.grad, rtol=5e-2, atol=5e-2, msg=f"d{name}")
