"""A launcher's kernel arguments, lowered: the inputs' strides bound once, the TMA descriptors
(or the pointers), the sizes, scalars and strides, the whole-axis tiles and flags (64-bit
offsets, a folded grid, SM count, a scaled reduction's sign), the workspaces, and what Triton specializes on.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilegen import model as m
from tilegen.lower.descriptors import descriptor_checks, make_descriptors
from tilegen.lower.grid import fold_condition
from tilegen.lower.launch import LaunchArgs, constexpr_values, program_count
from tilegen.lower.names import given_name, size_symbols, tuple_text
from tilegen.lower.plan import KernelPlan, Line, Op


def new_strides(tensor: m.Tensor) -> list[str]:
    """The strides of a new contiguous output, from its sizes (no ``.stride()`` call)."""
    dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
    return [" * ".join(dims[i + 1:]) or "1" for i in range(len(dims))]


def int64_condition(spec: m.Spec) -> str:
    """True when some tensor spans 2**31 elements or more (then offsets need 64 bits): inputs
    by their shapes and strides, outputs (new and contiguous) by their element count."""
    terms = []
    for tensor in spec.arrays:
        dims = [d.text if isinstance(d, m.Number) else d.id for d in tensor.dims]
        if tensor.role == "out":
            terms.append(f"{' * '.join(dims)} > 2**31")
        else:
            strides = f"_{tensor.name.id}_strides"
            span = " + ".join(f"({d} - 1) * abs({strides}[{i}])" for i, d in enumerate(dims))
            terms.append(f"{span} >= 2**31")
    return " or ".join(dict.fromkeys(terms))


@dataclass(frozen=True)
class Arguments:
    """What a launch passes: ``setup`` binds the inputs' strides and makes the descriptors;
    ``flags`` bind the whole-axis tiles (the first ``whole`` of them: a descriptor's block shape may
    name one, so they come before ``setup``) and the flags; ``launch`` is the kernel's arguments."""

    setup: tuple[Op, ...]
    flags: tuple[Op, ...]
    whole: int
    launch: LaunchArgs


def row_grid(spec: m.Spec, kernel: KernelPlan) -> bool:
    """Whether ``spec``'s grid is a persistent row grid (``grid persistent r over M by BM, c over N
    whole``), whose programs ``_rt.row_programs`` counts from the row's tile; other persistent
    grids launch one program per SM (``_num_sms``)."""
    return spec.persistent and not spec.flat and bool(kernel.whole_blocks)


def lower_arguments(spec: m.Spec, full: m.Spec, kernel: KernelPlan, fallback: str | None,
                    planned: bool = False) -> Arguments:
    """The :class:`Arguments` of the launch of ``kernel`` by the launcher of ``spec`` (``full``: with
    the values its stages compute, which it passes too); a TMA-descriptor launcher returns
    ``fallback`` where descriptors cannot serve. A ``planned`` launch (the runtime's, over the
    module's plan of a call) passes each input's strides as it reads them, and asks the runtime
    whether its tensors need 64-bit offsets (``_rt.wide_offsets``)."""
    tuned = set(spec.tuned_params)
    setup: list[Op] = []  # what the launch passes: strides, whole-axis tiles, descriptors, flags
    descriptors = spec.access_style == "descriptor"
    # Every input's strides are bound once: the launch passes them and the specialization key reads them.
    bound_strides = [t for t in full.arrays if descriptors or t.role == "in" or t.in_place_of is not None]
    for t in bound_strides:  # a 0-dim input: the kernel's one element, at index 0, whatever its stride
        if not planned or t.zero_dim or descriptors:
            setup.append(Line(f"_{t.name.id}_strides = " + ("(0,)" if t.zero_dim else f"{t.name.id}.stride()")))
    sizes_passed = size_symbols(spec)
    scalars = tuple(t.name.id for t in spec.inputs if t.is_scalar)
    int_scalars = tuple(t.name.id for t in spec.inputs if t.is_scalar and t.dtype.id not in m.FLOAT_DTYPES)
    if descriptors:  # the descriptors carry the pointers, shapes and strides
        setup += descriptor_checks(spec, fallback, kernel)
        setup += make_descriptors(spec, kernel)
        tail = kernel.tail.descriptors if kernel.tail is not None else ()
        pieces = kernel.pieces.descriptors if kernel.pieces is not None else ()
        groups = [tuple(f"{t.name.id}_desc" for t in spec.arrays) + tuple(f"{t}_piece_desc" for t in pieces)
                  + tuple(f"{t}_tail_desc" for t in tail), sizes_passed, scalars]
        pointers: tuple[str, ...] = ()
        ints = [*sizes_passed, *int_scalars, *(f"*_{t.name.id}_strides" for t in spec.arrays)]
    else:
        strides = tuple(
            ", ".join(new_strides(t)) if t not in bound_strides
            else f"*{t.name.id}.stride()" if planned and not t.zero_dim else f"*_{t.name.id}_strides"
            for t in full.arrays
        )
        groups = [tuple(t.name.id for t in full.arrays), sizes_passed, scalars, strides]
        pointers = tuple(t.name.id for t in full.arrays)
        ints = [*sizes_passed, *int_scalars, *(f"*_{t.name.id}_strides" for t in bound_strides)]
        for t in spec.outputs:  # a new output's strides: products of the later sizes; literal ones never vary
            ints += [] if t.in_place_of is not None else [stride for i, stride in enumerate(new_strides(t))
                     if not all(isinstance(d, m.Number) for d in t.dims[i + 1:]) and stride not in ints]
    flags: list[Op] = []  # whole-axis tiles, 64-bit offsets, a folded grid, SM count: the same in the traced body
    for dim, block in kernel.whole_blocks:  # the tile of a whole axis: the extent rounded up to a power of two
        flags.append(Line(kernel.whole_tile(dim, block, concrete=False)))
    meta = tuple(f"{p.name.id}={p.name.id}" for p in spec.params if p.name.id not in tuned)
    meta += tuple(f"{block}={block}" for _, block in kernel.whole_blocks)
    meta += tuple(f"{c.constexpr}={c.name.id}" for c in spec.choices)
    meta += tuple(f"{flag}={flag}" for _, flag in kernel.transposed)
    for scalar, flag in kernel.sign_flags:  # the kernel's max of x * scalar is max(x) * scalar, or min
        flags.append(Line(f"{flag} = bool({scalar} >= 0)  # the kernel reduces {scalar}-scaled tiles unscaled"))
        meta += (f"{flag}={flag}",)
    for tensor, flag in kernel.given_flags:  # left out: the kernel reads its number, not the tensor
        meta += (f"{flag}={given_name(tensor)}",)
    for extent, flag in kernel.histograms:  # few bins: a histogram per program, an atomic add per bin
        flags.append(Line(f"{flag} = _rt.histogram_bins({extent})  # 0: too many bins, an atomic add per lane"))
        meta += (f"{flag}={flag}",)
    # a reduction across programs stores each program's partials at its place in a float32
    # workspace of (programs x the output's elements): at most the count of the smallest blocks
    spans = dict.fromkeys(
        f"{program_count(spec, finish, 'meta', smallest=True, sms=False)} * {finish.elements} >= 2**31"
        for finish in kernel.finishes)
    wide = "".join(f" or {span}" for span in spans)
    if kernel.int64 and planned:
        inputs, outputs = (tuple_text(t.name.id for t in full.arrays if t.role == role) for role in ("in", "out"))
        flags.append(Line(f"int64 = _rt.wide_offsets({inputs}, {outputs}){wide}"))
    elif kernel.int64:
        flags.append(Line(f"int64 = {int64_condition(full)}{wide}  # offsets past 2**31 elements"))
    if kernel.int64:
        meta += ("INT64_OFFSETS=int64",)
    if kernel.folded:  # CUDA launches at most 65535 programs along program ids 1 and 2
        flags.append(Line(f"folded = {fold_condition(spec)}  # then all along program id 0"))
        meta += ("FOLDED_GRID=folded",)
    if spec.persistent or spec.split_tail:
        if row_grid(spec, kernel):  # rows: several programs per SM where narrow
            row_tile = " * ".join(block for _, block in kernel.whole_blocks)
            note = "# the row grid's programs: up to 4 per SM"
            flags.append(Line(f"NUM_SMS = _rt.row_programs(device, {row_tile})  {note}"))
        else:
            flags.append(Line("NUM_SMS = _num_sms(device)"))
        meta += ("NUM_SMS=NUM_SMS",)
    if kernel.split is not None:  # the f32 workspace of a split loop's partial sums
        groups[0] = (*groups[0], "partials")
    for finish in kernel.finishes:  # the f32 workspaces of the partials of reductions across programs
        groups[0] = (*groups[0], *finish.workspaces)
    launch = LaunchArgs(groups=tuple(g for g in groups if g), meta=meta, constexprs=constexpr_values(full, kernel),
                        pointers=pointers, ints=tuple(ints))
    return Arguments(tuple(setup), tuple(flags), len(kernel.whole_blocks), launch)
