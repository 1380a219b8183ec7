"""Layer normalization forward from Triton's tutorial 05 "Layer Normalization"
(python/tutorials/05-layer-norm.py in triton-lang/triton).

Follows the tutorial's ``_layer_norm_fwd_fused``: one program per row
(``row = tl.program_id(0)``, ``X`` and ``Y`` advanced by ``row * stride``),
three loops ``for off in range(0, N, BLOCK_SIZE)`` over ``BLOCK_SIZE``
chunks: the mean (fp32 ``_mean`` accumulator, ``tl.sum(_mean, axis=0) / N``),
the variance (``tl.where(cols < N, x - mean, 0.)`` squared into ``_var``,
``rstd = 1 / tl.sqrt(var + eps)``), the stores of ``Mean`` and ``Rstd``, and
the normalize loop ``x_hat = (x - mean) * rstd``, ``y = x_hat * w + b``,
stored to ``Y`` with the implicit fp32 -> fp16 conversion. The kernel body is
the tutorial's, comments included. The host function ``layer_norm`` is the
tutorial's ``LayerNorm.forward``: ``y = torch.empty_like(x)``,
``x_arg = x.reshape(-1, x.shape[-1])``, fp32 ``mean`` and ``rstd`` of
``(M, )``, ``MAX_FUSED_SIZE = 65536 // x.element_size()``,
``BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(N))``, the
``RuntimeError("This layer norm doesn't support feature dim >= 64KB.")`` when
``N > BLOCK_SIZE``, ``num_warps = min(max(BLOCK_SIZE // 256, 1), 8)`` and the
launch on the grid ``(M, )`` with ``num_ctas=1``. Since ``N <= BLOCK_SIZE``
is enforced, each loop runs once, as in the tutorial.

Deviations and why:
- Only the forward pass: ``layer_norm(x, weight, bias, eps)`` is a plain
  function returning ``(y, mean, rstd)`` instead of the
  ``torch.autograd.Function`` ``LayerNorm`` (whose ``forward`` takes ``ctx``
  and ``normalized_shape``, saves ``mean`` and ``rstd`` for the backward pass
  and returns only ``y``). The backward kernels, the test, the benchmark,
  ``DEVICE`` and the ``apex`` import are left out.
- ``layer_norm`` asserts that ``x`` is contiguous and that ``weight`` and
  ``bias`` are contiguous with ``N`` elements. The kernel advances ``X`` and
  ``Y`` by the same ``stride`` (``x_arg.stride(0)``) and reads columns and
  ``W`` / ``B`` at unit stride, so it is only right for such inputs, which
  the tutorial relies on silently: for a row-strided view such as ``x[::2]``,
  ``torch.empty_like(x)`` is a contiguous ``y`` with a smaller row stride
  than ``x``, and the kernel would write past its end.
No change is needed for ``TRITON_INTERPRET=1``: the launch options
(``num_warps``, ``num_ctas``) are ignored by the interpreter and the tutorial
already allocates ``mean`` / ``rstd`` on ``x.device``.
Inputs are meant to be fp16: ``x`` ``[M, N]`` (any shape is flattened to
``(-1, N)`` as in the tutorial), ``weight`` and ``bias`` ``[N]``; ``y`` has
the shape and dtype of ``x``, ``mean`` and ``rstd`` are fp32 ``[M]``.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_fwd_fused(
    X,  # pointer to the input
    Y,  # pointer to the output
    W,  # pointer to the weights
    B,  # pointer to the biases
    Mean,  # pointer to the mean
    Rstd,  # pointer to the 1/std
    stride,  # how much to increase the pointer when moving by 1 row
    N,  # number of columns in X
    eps,  # epsilon to avoid division by zero
    BLOCK_SIZE: tl.constexpr,
):
    """Layer norm of row ``program_id(0)`` of ``X`` into ``Y``, with its mean and 1/std into ``Mean`` / ``Rstd``.

    ``Y[row] = (X[row] - mean) * rstd * W + B`` with ``mean`` and the biased
    variance computed in fp32 over the ``N`` columns, in ``BLOCK_SIZE`` chunks
    (masked past ``N``). ``X`` and ``Y`` share the row ``stride``; columns,
    ``W`` and ``B`` have unit stride.
    """
    # Map the program id to the row of X and Y it should compute.
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    # Compute mean
    mean = 0
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    # Compute variance
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    # Write mean / rstd
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    # Normalize and apply linear transformation
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        # Write output
        tl.store(Y + cols, y, mask=mask)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float):
    """``(y, mean, rstd)``: layer norm of ``x`` over its last dimension by ``_layer_norm_fwd_fused``.

    ``x``: contiguous fp16 ``[M, N]``; ``weight``, ``bias``: contiguous fp16
    ``[N]``; ``eps``: a Python float. ``y`` matches
    ``torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)`` (shape and
    dtype of ``x``); ``mean`` and ``rstd`` (1 / sqrt(var + eps), biased
    variance) are fp32 ``[M]``. Raises ``RuntimeError`` when a row needs
    64KB or more (``N > 65536 // x.element_size()``).
    """
    assert x.is_contiguous(), "_layer_norm_fwd_fused uses one row stride for x and y: x must be contiguous"
    assert weight.is_contiguous() and weight.numel() == x.shape[-1], "weight must be contiguous with N elements"
    assert bias.is_contiguous() and bias.numel() == x.shape[-1], "bias must be contiguous with N elements"
    # allocate output
    y = torch.empty_like(x)
    # reshape input data into 2D tensor
    x_arg = x.reshape(-1, x.shape[-1])
    M, N = x_arg.shape
    mean = torch.empty((M, ), dtype=torch.float32, device=x.device)
    rstd = torch.empty((M, ), dtype=torch.float32, device=x.device)
    # Less than 64KB per feature: enqueue fused kernel
    MAX_FUSED_SIZE = 65536 // x.element_size()
    BLOCK_SIZE = min(MAX_FUSED_SIZE, triton.next_power_of_2(N))
    if N > BLOCK_SIZE:
        raise RuntimeError("This layer norm doesn't support feature dim >= 64KB.")
    # heuristics for number of warps
    num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
    # enqueue kernel
    _layer_norm_fwd_fused[(M, )](  #
        x_arg, y, weight, bias, mean, rstd,  #
        x_arg.stride(0), N, eps,  #
        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_ctas=1)
    return y, mean, rstd
