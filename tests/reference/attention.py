"""Fused attention forward from Triton's tutorial 06 "Fused Attention"
(python/tutorials/06-fused-attention.py in triton-lang/triton).

Follows the tutorial's current forward pass, the tensor-descriptor version
(read from the copy in triton-lang/Triton-to-tile-IR, commit
09deb2ab438b891811c8c8cd7dc463ef9e1c0351; the triton-lang/triton copy in the
search index is an older block-pointer version): ``_attn_fwd_inner``,
``_host_descriptor_pre_hook``, the autotune ``configs``, ``keep``,
``prune_invalid_configs``, ``_maybe_make_tensor_desc``, ``_attn_fwd`` and the
host logic of ``_attention.forward``. One program per ``BLOCK_M`` query rows of
one (batch, head) (grid ``(cdiv(N_CTX, BLOCK_M), Z * H, 1)``). Q, K, V and O
are read and written through 2D tensor descriptors of shape
``[Z * H * N_CTX, HEAD_DIM]``. They are built on the host
(``TensorDescriptor``, with ``block_shape`` set per config by the pre-hook)
when ``supports_host_descriptor()`` (CUDA, capability >= 9) and not
(Hopper and ``warp_specialize``), and otherwise in the kernel
(``tl.make_tensor_descriptor`` through ``_maybe_make_tensor_desc``, with the
tutorial's ``triton.set_allocator``). The online softmax works in base 2
(``qk_scale = sm_scale * 1.44269504``, ``tl.math.exp2``) with running max
``m_i`` and sum ``l_i``. A causal launch (``STAGE = 3``) runs the off-band
blocks (inner ``STAGE`` 1, no mask) and then the diagonal block (inner
``STAGE`` 2, masked with ``-1.0e6``). A non-causal launch (``STAGE = 1``) runs
inner ``STAGE`` 3 over all of ``N_CTX``. The epilogue stores
``M = m_i + log2(l_i)`` (the log-sum-exp in base 2) and ``acc / l_i``. Kernel
code and comments are the tutorial's, the float8 (``FP8_OUTPUT``) branches,
the ``warp_specialize`` / ``IS_HOPPER`` accumulator split and the HIP tuning
(``waves_per_eu``) included.

Deviations and why:
- Forward only: no ``_attn_bwd*`` kernels, no ``torch.autograd.Function``, no
  ``test_op`` and no benchmark. ``attention(q, k, v, causal, sm_scale,
  warp_specialize=False)`` is a plain function holding
  ``_attention.forward``'s code without ``ctx``. It returns ``o`` only, as
  the tutorial's ``attention`` does. ``M`` is computed and discarded.
- ``warp_specialize`` defaults to ``False`` (the tutorial's ``forward``
  defaults to ``True``). The tutorial's ``test_op`` runs only
  ``warp_specialize=False`` except on Blackwell, and on an H100 ``False``
  keeps the host-descriptor path its tests cover.
- ``is_hip``, ``is_cuda`` (and through them ``supports_host_descriptor``,
  ``is_blackwell``, ``is_hopper``) return ``False`` under
  ``TRITON_INTERPRET=1``. There is no active driver there (on a CPU machine
  ``triton.runtime.driver.active`` raises "0 active drivers"), and the
  interpreter then takes the tutorial's in-kernel descriptor path. The
  interpreter can run both host and in-kernel descriptors. The interpreter is
  detected from the kernel object itself (an ``InterpretedFunction``), as in
  ``softmax.py``.
- The autotuner is built when ``attention`` first runs (``_attn_fwd_autotuned``),
  not at import with ``@triton.autotune`` on ``_attn_fwd``. The tutorial
  builds ``configs`` and filters them with ``keep`` at import, which queries
  the device and fails on a machine with no GPU, and this module must import
  there. ``_attn_fwd`` itself is the plain ``@triton.jit`` kernel. The
  tutorial's config list is built by ``get_configs()`` with the same
  ``NUM_STAGES_OPTIONS`` logic.
- The tutorial's ``if "PYTEST_VERSION" in os.environ`` override (one config,
  ``BLOCK_M=128, BLOCK_N=64``) is dropped. It would make this module's configs
  depend on whether pytest runs, and its single config cannot run
  ``N_CTX < 128``.
- Under ``TRITON_INTERPRET=1`` the autotuner gets the single config
  ``INTERPRETER_CONFIG`` (``BLOCK_M = BLOCK_N = 16``, ``num_stages=1``,
  ``num_warps=4``), because the interpreter cannot time configs. A
  single-config autotuner runs its config without benchmarking.
- ``prune_invalid_configs`` also drops configs whose ``BLOCK_M`` or
  ``BLOCK_N`` does not divide ``N_CTX``, and configs with
  ``BLOCK_N > HEAD_DIM`` (the kernel's ``tl.static_assert``). When no tutorial
  config is left (``N_CTX`` = 16, 48, ..., or ``HEAD_DIM`` = 16), it returns
  ``FALLBACK_CONFIG`` (``BLOCK_M = BLOCK_N = 16``, ``num_stages=2``,
  ``num_warps=4``). The tutorial assumes both block sizes divide ``N_CTX``
  without checking. Its descriptors span all heads (``Z * H * N_CTX`` rows)
  and the ``M`` store is unmasked, so a partial last block would read the
  next head's K/V rows and write into the next head's O and M.
- ``"STAGE"`` is added to the autotune key (the tutorial's key is
  ``N_CTX, HEAD_DIM, FP8_OUTPUT, warp_specialize``). Pruning depends on
  ``STAGE`` (causal needs ``BLOCK_M >= BLOCK_N``), but the autotuner prunes
  only when it tunes a new key. Without ``STAGE``, a non-causal result with
  ``BLOCK_M < BLOCK_N`` would be reused for a causal call with the same
  ``N_CTX`` and ``HEAD_DIM``, and that call would give wrong results.
- Inputs: ``attention`` asserts that q, k and v have one shape
  ``[Z, H, N_CTX, HEAD_DIM]`` (the tutorial uses ``q.shape[2]`` as the K/V
  length too) and are all float16. float16 is what the kernel computes in
  (``dtype = tl.float16``, ``p.to(dtype)``, ``acc.to(dtype)``).
  float8_e5m2 is refused, so the tutorial's FP8 branches, kept in the
  kernel, host and pre-hook, are unreachable. That path expects V stored
  transposed. Read from the code and not run here, its V descriptor (shape
  ``[HEAD_DIM, Z * H * N_CTX]``, column offsets up to
  ``Z * H * N_CTX * HEAD_DIM``) reads zeros for most heads, and the
  tutorial checks FP8 only with ``atol=3``. bfloat16 would need only
  ``dtype = desc_o.dtype`` in ``_attn_fwd``. It is refused because Triton
  3.9's interpreter computes ``tl.dot`` of bfloat16 operands on their raw
  uint16 storage (``np.matmul`` of the bits; errors around 1e9 were seen),
  so the reference could not be checked there. float32 is refused:
  ``tl.dot`` would use TF32, the tiles take twice the shared memory of the
  tuned configs, and host descriptors have no ``dtype`` for the autotune key
  to tell float32 from float16. ``attention`` also asserts
  ``N_CTX % 16 == 0`` (see the pruning above). ``HEAD_DIM`` must be in the
  tutorial's ``{16, 32, 64, 128, 256}``.
- ``q``, ``k`` and ``v`` pass through ``.contiguous()`` (a no-op for
  contiguous tensors). The descriptors use strides ``[HEAD_DIM, 1]`` over
  ``Z * H * N_CTX`` rows, so the tutorial relies on contiguous inputs without
  checking, and its ``o = torch.empty_like(q)`` would copy a non-contiguous
  q's strides.
- ``triton.set_allocator`` is called only off the interpreter (the
  interpreter's ``make_tensor_descriptor`` allocates nothing), and
  ``alloc_fn`` allocates on ``q.device`` instead of the literal ``"cuda"``.
- ``DEVICE``, ``is_cutile`` and the cutile-only configs of the
  Triton-to-tile-IR copy (they are not in triton-lang/triton) are left out.
"""

import functools

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.tools.tensor_descriptor import TensorDescriptor


def is_hip():
    # deviation: no active driver under TRITON_INTERPRET=1
    return not _INTERPRET and triton.runtime.driver.active.get_current_target().backend == "hip"


def is_cuda():
    # deviation: no active driver under TRITON_INTERPRET=1
    return not _INTERPRET and triton.runtime.driver.active.get_current_target().backend == "cuda"


def supports_host_descriptor():
    return is_cuda() and torch.cuda.get_device_capability()[0] >= 9


def is_blackwell():
    return is_cuda() and torch.cuda.get_device_capability()[0] == 10


def is_hopper():
    return is_cuda() and torch.cuda.get_device_capability()[0] == 9


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q,  #
                    desc_k, desc_v,  #
                    offset_y, dtype: tl.constexpr, start_m, qk_scale,  #
                    BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,  #
                    STAGE: tl.constexpr, offs_m: tl.constexpr, offs_n: tl.constexpr,  #
                    N_CTX: tl.constexpr, warp_specialize: tl.constexpr, IS_HOPPER: tl.constexpr):
    """Online-softmax update of ``acc``, ``l_i``, ``m_i`` over the key blocks of one stage.

    ``STAGE == 1``: keys ``[0, start_m * BLOCK_M)`` (causal, off-band);
    ``STAGE == 2``: keys ``[start_m * BLOCK_M, (start_m + 1) * BLOCK_M)`` with
    the causal mask (diagonal block); otherwise all keys ``[0, N_CTX)``. K/V
    rows are read from ``desc_k`` / ``desc_v`` starting at row ``offset_y``
    (this (batch, head)'s first row). Scores are in base 2 (``qk_scale``
    includes ``1/ln(2)``).
    """
    # range of values handled by this stage
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    # causal = False
    else:
        lo, hi = 0, N_CTX
    offsetk_y = offset_y + lo
    if dtype == tl.float8e5:
        offsetv_y = offset_y * HEAD_DIM + lo
    else:
        offsetv_y = offset_y + lo
    # loop over k, v and update accumulator
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=warp_specialize):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        # -- compute qk ----
        k = desc_k.load([offsetk_y, 0]).T
        qk = tl.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(mask, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        # -- compute correction factor
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        # -- update output accumulator --
        if not IS_HOPPER and warp_specialize and BLOCK_M == 128 and HEAD_DIM == 128:
            BM: tl.constexpr = acc.shape[0]
            BN: tl.constexpr = acc.shape[1]
            acc0, acc1 = acc.reshape([BM, 2, BN // 2]).permute(0, 2, 1).split()
            acc0 = acc0 * alpha[:, None]
            acc1 = acc1 * alpha[:, None]
            acc = tl.join(acc0, acc1).permute(0, 2, 1).reshape([BM, BN])
        else:
            acc = acc * alpha[:, None]
        # prepare p and v for the dot
        if dtype == tl.float8e5:
            v = desc_v.load([0, offsetv_y]).T
        else:
            v = desc_v.load([offsetv_y, 0])
        p = p.to(dtype)
        # note that this non transposed v for FP8 is only supported on Blackwell
        acc = tl.dot(p, v, acc)
        # update m_i and l_i
        # place this at the end of the loop to reduce register pressure
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        offsetk_y += BLOCK_N
        offsetv_y += BLOCK_N
    return acc, l_i, m_i


def _host_descriptor_pre_hook(nargs):
    """Set the host descriptors' ``block_shape`` for the config about to run (no-op for in-kernel descriptors)."""
    BLOCK_M = nargs["BLOCK_M"]
    BLOCK_N = nargs["BLOCK_N"]
    HEAD_DIM = nargs["HEAD_DIM"]
    if not isinstance(nargs["desc_q"], TensorDescriptor):
        return
    nargs["desc_q"].block_shape = [BLOCK_M, HEAD_DIM]
    if nargs["FP8_OUTPUT"]:
        nargs["desc_v"].block_shape = [HEAD_DIM, BLOCK_N]
    else:
        nargs["desc_v"].block_shape = [BLOCK_N, HEAD_DIM]
    nargs["desc_k"].block_shape = [BLOCK_N, HEAD_DIM]
    nargs["desc_o"].block_shape = [BLOCK_M, HEAD_DIM]


def get_configs():
    """The tutorial's autotune configs (built at first launch, not at import: deviation)."""
    if is_hip():
        NUM_STAGES_OPTIONS = [1]
    elif supports_host_descriptor():
        NUM_STAGES_OPTIONS = [2, 3, 4]
    else:
        NUM_STAGES_OPTIONS = [2, 3, 4]

    configs = [
        triton.Config({'BLOCK_M': BM, 'BLOCK_N': BN}, num_stages=s, num_warps=w, pre_hook=_host_descriptor_pre_hook) \
        for BM in [64, 128]\
        for BN in [32, 64, 128]\
        for s in NUM_STAGES_OPTIONS \
        for w in [4, 8]\
    ]
    return configs


def keep(conf):
    BLOCK_M = conf.kwargs["BLOCK_M"]
    BLOCK_N = conf.kwargs["BLOCK_N"]
    return not (is_cuda() and torch.cuda.get_device_capability()[0] == 9 and BLOCK_M * BLOCK_N < 128 * 128
                and conf.num_warps == 8)


#: Used on the GPU when none of the tutorial's configs fits N_CTX / HEAD_DIM (deviation).
FALLBACK_CONFIG = triton.Config({'BLOCK_M': 16, 'BLOCK_N': 16}, num_stages=2, num_warps=4,
                                pre_hook=_host_descriptor_pre_hook)

#: The only config under TRITON_INTERPRET=1, which cannot time configs (deviation).
INTERPRETER_CONFIG = triton.Config({'BLOCK_M': 16, 'BLOCK_N': 16}, num_stages=1, num_warps=4,
                                   pre_hook=_host_descriptor_pre_hook)


def prune_invalid_configs(configs, named_args, **kwargs):
    N_CTX = kwargs["N_CTX"]
    STAGE = kwargs["STAGE"]
    HEAD_DIM = kwargs["HEAD_DIM"]

    # Filter out configs where BLOCK_M > N_CTX
    # Filter out configs where BLOCK_M < BLOCK_N when causal is True
    # Filter out configs whose BLOCK_M or BLOCK_N does not divide N_CTX, or with BLOCK_N > HEAD_DIM (deviation)
    pruned = [
        conf for conf in configs if conf.kwargs.get("BLOCK_M", 0) <= N_CTX and (
            conf.kwargs.get("BLOCK_M", 0) >= conf.kwargs.get("BLOCK_N", 0) or STAGE == 1)
        and N_CTX % conf.kwargs["BLOCK_M"] == 0 and N_CTX % conf.kwargs["BLOCK_N"] == 0
        and conf.kwargs["BLOCK_N"] <= HEAD_DIM
    ]
    # deviation: small N_CTX or HEAD_DIM fit none of the tutorial's configs
    return pruned or [FALLBACK_CONFIG]


@triton.jit
def _maybe_make_tensor_desc(desc_or_ptr, shape, strides, block_shape):
    """``desc_or_ptr`` if it is already a tensor descriptor, else a new in-kernel descriptor over it."""
    if isinstance(desc_or_ptr, tl.tensor_descriptor):
        return desc_or_ptr
    else:
        return tl.make_tensor_descriptor(desc_or_ptr, shape, strides, block_shape)


@triton.jit
def _attn_fwd(sm_scale, M,  #
              Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX,  #
              HEAD_DIM: tl.constexpr,  #
              BLOCK_M: tl.constexpr,  #
              BLOCK_N: tl.constexpr,  #
              FP8_OUTPUT: tl.constexpr,  #
              STAGE: tl.constexpr,  #
              warp_specialize: tl.constexpr,  #
              IS_HOPPER: tl.constexpr,  #
              ):
    """Attention output for query rows ``[program_id(0) * BLOCK_M, +BLOCK_M)`` of (batch, head) ``program_id(1)``.

    ``desc_q/k/v/o``: host ``TensorDescriptor`` objects or raw contiguous
    ``[Z, H, N_CTX, HEAD_DIM]`` tensors (turned into in-kernel descriptors),
    viewed as ``[Z * H * N_CTX, HEAD_DIM]``. ``M``: float32 ``[Z, H, N_CTX]``,
    receives ``m_i + log2(l_i)``. ``STAGE``: 3 causal, 1 not. ``BLOCK_M`` and
    ``BLOCK_N`` must divide ``N_CTX``; ``BLOCK_N <= HEAD_DIM``.
    """
    dtype = tl.float8e5 if FP8_OUTPUT else tl.float16
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H

    y_dim = Z * H * N_CTX
    desc_q = _maybe_make_tensor_desc(desc_q, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK_M, HEAD_DIM])
    if FP8_OUTPUT:
        desc_v = _maybe_make_tensor_desc(desc_v, shape=[HEAD_DIM, y_dim], strides=[N_CTX, 1],
                                         block_shape=[HEAD_DIM, BLOCK_N])
    else:
        desc_v = _maybe_make_tensor_desc(desc_v, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                         block_shape=[BLOCK_N, HEAD_DIM])
    desc_k = _maybe_make_tensor_desc(desc_k, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = _maybe_make_tensor_desc(desc_o, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                     block_shape=[BLOCK_M, HEAD_DIM])

    offset_y = off_z * (N_CTX * H) + off_h * N_CTX
    qo_offset_y = offset_y + start_m * BLOCK_M
    # initialize offsets
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    # initialize pointer to m and l
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # load scales
    qk_scale = sm_scale
    qk_scale *= 1.44269504  # 1/log(2)
    # load q: it will stay in SRAM throughout
    q = desc_q.load([qo_offset_y, 0])
    # stage 1: off-band
    # For causal = True, STAGE = 3 and _attn_fwd_inner gets 1 as its STAGE
    # For causal = False, STAGE = 1, and _attn_fwd_inner gets 3 as its STAGE
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q,  #
                                        desc_k, desc_v,  #
                                        offset_y, dtype, start_m, qk_scale,  #
                                        BLOCK_M, HEAD_DIM, BLOCK_N,  #
                                        4 - STAGE, offs_m, offs_n, N_CTX,  #
                                        warp_specialize, IS_HOPPER)
    # stage 2: on-band
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q,  #
                                        desc_k, desc_v,  #
                                        offset_y, dtype, start_m, qk_scale,  #
                                        BLOCK_M, HEAD_DIM, BLOCK_N,  #
                                        2, offs_m, offs_n, N_CTX,  #
                                        warp_specialize, IS_HOPPER)
    # epilogue
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    m_ptrs = M + off_hz * N_CTX + offs_m
    tl.store(m_ptrs, m_i)
    desc_o.store([qo_offset_y, 0], acc.to(dtype))


#: True when ``@triton.jit`` built an interpreted kernel (TRITON_INTERPRET=1).
_INTERPRET = isinstance(_attn_fwd, InterpretedFunction)


@functools.cache
def _attn_fwd_autotuned():
    """``_attn_fwd`` under the tutorial's ``triton.autotune`` (built at first launch: deviation).

    On the GPU: the tutorial's configs filtered by ``keep``; under the
    interpreter: ``[INTERPRETER_CONFIG]``. The key adds ``STAGE`` to the
    tutorial's (deviation).
    """
    configs = [INTERPRETER_CONFIG] if _INTERPRET else list(filter(keep, get_configs()))
    return triton.autotune(configs=configs, key=["N_CTX", "HEAD_DIM", "FP8_OUTPUT", "warp_specialize", "STAGE"],
                           prune_configs_by={'early_config_prune': prune_invalid_configs})(_attn_fwd)


def attention(q, k, v, causal, sm_scale, warp_specialize=False):
    """Softmax attention ``softmax(q @ k^T * sm_scale) @ v`` (causal: lower-triangular mask) by ``_attn_fwd``.

    ``q``, ``k``, ``v``: float16 tensors of one shape
    ``[Z, H, N_CTX, HEAD_DIM]`` with ``N_CTX % 16 == 0`` and ``HEAD_DIM`` in
    ``{16, 32, 64, 128, 256}`` (non-contiguous inputs are copied
    contiguous). ``causal``: bool. ``sm_scale``: float. ``warp_specialize``:
    the tutorial's option (``tl.range(..., warp_specialize=...)``; on Hopper
    it selects in-kernel descriptors); ignored by the interpreter. Returns
    ``o``, a new contiguous tensor with q's shape and dtype (the log-sum-exp
    ``M`` the kernel also writes is not returned). On the GPU the kernel is
    autotuned over the tutorial's configs; under ``TRITON_INTERPRET=1`` it
    runs ``BLOCK_M = BLOCK_N = 16``.
    """
    # shape constraints
    HEAD_DIM_Q, HEAD_DIM_K = q.shape[-1], k.shape[-1]
    # when v is in float8_e5m2 it is transposed.
    HEAD_DIM_V = v.shape[-1]
    assert HEAD_DIM_Q == HEAD_DIM_K and HEAD_DIM_K == HEAD_DIM_V
    assert HEAD_DIM_K in {16, 32, 64, 128, 256}
    # deviation: checks the tutorial leaves implicit (see the module docstring)
    assert q.dim() == 4 and q.shape == k.shape == v.shape, "q, k, v must all be [Z, H, N_CTX, HEAD_DIM]"
    assert q.dtype == k.dtype == v.dtype == torch.float16, "q, k, v must all be float16"
    assert q.shape[2] % 16 == 0, "N_CTX must be a multiple of 16 (the block sizes must divide it)"
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    stage = 3 if causal else 1
    extra_kern_args = {}
    # Tuning for AMD target
    if is_hip():
        waves_per_eu = 3 if HEAD_DIM_K <= 64 else 2
        extra_kern_args = {"waves_per_eu": waves_per_eu, "allow_flush_denorm": True}

    M = torch.empty((q.shape[0], q.shape[1], q.shape[2]), device=q.device, dtype=torch.float32)
    # Use device_descriptor for Hopper + warpspec.
    if supports_host_descriptor() and not (is_hopper() and warp_specialize):
        # Note that on Hopper we cannot perform a FP8 dot with a non-transposed second tensor
        y_dim = q.shape[0] * q.shape[1] * q.shape[2]

        dummy_block = [1, 1]
        desc_q = TensorDescriptor(q, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy_block)
        if q.dtype == torch.float8_e5m2:
            desc_v = TensorDescriptor(v, shape=[HEAD_DIM_K, y_dim], strides=[q.shape[2], 1],
                                      block_shape=dummy_block)
        else:
            desc_v = TensorDescriptor(v, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1],
                                      block_shape=dummy_block)
        desc_k = TensorDescriptor(k, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy_block)
        desc_o = TensorDescriptor(o, shape=[y_dim, HEAD_DIM_K], strides=[HEAD_DIM_K, 1], block_shape=dummy_block)
    else:
        desc_q = q
        desc_v = v
        desc_k = k
        desc_o = o

    def alloc_fn(size: int, align: int, _):
        return torch.empty(size, dtype=torch.int8, device=q.device)

    if not _INTERPRET:  # deviation: the interpreter allocates no descriptor workspace
        triton.set_allocator(alloc_fn)

    def grid(META):
        return (triton.cdiv(q.shape[2], META["BLOCK_M"]), q.shape[0] * q.shape[1], 1)

    if is_blackwell() and warp_specialize:
        if HEAD_DIM_K == 128 and q.dtype == torch.float16:
            extra_kern_args["maxnreg"] = 168
        else:
            extra_kern_args["maxnreg"] = 80
    _attn_fwd_autotuned()[grid](
        sm_scale, M,  #
        q.shape[0], q.shape[1],  #
        desc_q, desc_k, desc_v, desc_o,  #
        N_CTX=q.shape[2],  #
        HEAD_DIM=HEAD_DIM_K,  #
        FP8_OUTPUT=q.dtype == torch.float8_e5m2,  #
        STAGE=stage,  #
        warp_specialize=warp_specialize,  #
        IS_HOPPER=is_hopper(),  #
        **extra_kern_args)
    return o
