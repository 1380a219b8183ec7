"""A launcher's TMA descriptors (``access descriptor``), lowered: when the launcher falls back to
pointers (no TMA, or a layout TMA cannot address), the descriptors it makes (with a tuned
kernel's block shapes set per config by the ``_descriptor_blocks`` pre_hook), the second row
piece's and the split tail's.
"""

from __future__ import annotations

import math

from tilegen import model as m
from tilegen.lower.checked import default_of
from tilegen.lower.names import dtype_options
from tilegen.lower.plan import HookPlan, IfBlock, KernelPlan, Line, Op

#: The most bytes of an output tile one TMA store stages: the runtime's ``SUBTILE_BYTES``
#: (tests/test_subtile.py checks that they agree), which decides per launch.
SUBTILE_BYTES = 65536


def descriptor_checks(spec: m.Spec, fallback: str | None, kernel: KernelPlan) -> list[Op]:
    """Tensor descriptors (TMA) need Hopper or newer, a Triton that has them, and tensors with a
    unit last stride, 16-byte aligned other strides and a 16-byte aligned base; otherwise the
    launcher returns ``fallback``, the same spec through pointers. A column-major 2D input (unit
    first stride, ``b = w.t()``) sets its ``transposed`` flag: its descriptor spans its transpose."""
    ops: list[Op] = [
        IfBlock("not _has_tma(device)", "a GPU or a Triton without TMA descriptors", (Line(f"return {fallback}"),))
    ]
    flags = dict(kernel.transposed)
    for column_major, flag_name in flags.items():
        ops.append(Line(f"{flag_name} = _{column_major}_strides[1] != 1 and _{column_major}_strides[0] == 1"
                        f"  # {column_major} is column-major"))
    # a descriptor's shape must be positive: an empty input (K = 0) runs the pointer kernel
    terms = [f"{d} == 0" for d in dict.fromkeys(d.id for t in spec.arrays for d in t.dims if isinstance(d, m.Name))]
    blocks = dict(kernel.descriptors)
    for t in spec.arrays:
        sizes = {m.DTYPE_BYTES[d] for d in dtype_options(t.dtype)}  # a dtype variable's may differ
        smallest = min(sizes)
        size = sizes.pop() if len(sizes) == 1 else f"{m.as_written(t.dtype)}.itemsize"  # T.itemsize
        strides = f"_{t.name.id}_strides"
        flag = flags.get(t.name.id)
        shape = blocks.get(t.name.id, ())
        if flag is not None:  # rows of whichever layout it has
            terms.append(f"(not {flag} and {strides}[1] != 1)")
            terms.append(f"({strides}[1] if {flag} else {strides}[0]) * {size} % 16")
            first, last = (smallest_block(spec, b) for b in (shape[0], shape[-1])) if shape else ("", "")
            row = (first if first == last else f"({first} if {flag} else {last})") if shape else None
        else:
            terms.append(f"{strides}[{len(t.dims) - 1}] != 1")
            terms += [f"{strides}[{i}] * {size} % 16" for i in range(len(t.dims) - 1)]
            row = smallest_block(spec, shape[-1]) if shape else None
        if row is not None and not (row.isdigit() and int(row) * smallest >= 16):
            terms.append(f"{row} * {size} < 16")  # TMA moves rows of 16 bytes or more
        terms.append(f"{t.name.id}.data_ptr() % 16")
    ops.append(IfBlock(" or ".join(terms), "a layout TMA cannot address", (Line(f"return {fallback}"),)))
    return ops


def smallest_block(spec: m.Spec, block: str) -> str:
    """The smallest value a descriptor block dimension takes: a literal, the least of the tune
    configs' values for a tuned parameter (every config must fit), else the launcher's variable
    (a keyword, or a whole axis's tile)."""
    if block.isdigit() or block not in spec.tuned_params or spec.tune is None:
        return block
    return str(min(_config_values(spec, block)))


def _config_values(spec: m.Spec, block: str) -> list[int]:
    """The values tuned parameter ``block`` takes in the spec's tune configs (its default where a
    config leaves it out)."""
    assert spec.tune is not None, f"{block}: not tuned"
    param = next(p for p in spec.params if p.name.id == block)
    return [int(given.text) if (given := c.get(block)) is not None else int(default_of(param))
            for c in spec.tune.configs]


def may_subtile(spec: m.Spec, tensor: m.Tensor, blocks: tuple[str, ...]) -> bool:
    """Whether some config's store of ``tensor``'s tile (its descriptor's ``blocks``, 2 or more of
    them: literals and tuned parameters) may stage more than :data:`SUBTILE_BYTES` in shared
    memory, in its widest dtype: then the kernel stores it in two halves of its columns where the
    launch halved its descriptor's last block (the runtime's ``epilogue_subtile``). A block the
    configs do not set (a keyword, a whole axis's tile) makes it False: nothing is known to halve."""
    tuned = [b for b in blocks if not b.isdigit()]
    if len(blocks) < 2 or spec.tune is None or any(b not in spec.tuned_params for b in tuned):
        return False
    fixed = math.prod(int(b) for b in blocks if b.isdigit())
    per_config = zip(*(_config_values(spec, b) for b in tuned), strict=True) if tuned else [()]
    widest: int = max(m.DTYPE_BYTES[d] for d in dtype_options(tensor.dtype))
    largest: int = max(fixed * math.prod(values) for values in per_config)
    return largest * widest > SUBTILE_BYTES


def subtiled_store(desc: str, offsets: list[str], value: str, tiles: list[str]) -> Op:
    """The TMA store of tile ``value`` (of block shape ``tiles``) at ``offsets`` (one a dimension)
    through ``desc``, in two halves of its columns where the launch gave ``desc`` a block of half
    the tile's last dimension (a constexpr test: the halves compile, or the whole store); Triton's
    tutorial 09 splits its epilogue so, to stage half the tile in shared memory."""
    rows, cols = tiles[:-1], tiles[-1]
    half = f"{cols} // 2"
    first, second = ", ".join(offsets), ", ".join([*offsets[:-1], f"{offsets[-1]} + {half}"])
    order = ", ".join(str(i) for i in (*range(len(rows)), len(rows) + 1, len(rows)))
    left, right = f"{desc}_left", f"{desc}_right"
    halves = (
        Line(f"{left}, {right} = tl.split(tl.permute(tl.reshape({value}, ({', '.join(rows)}, 2, {half})), ({order})))"),
        Line(f"{desc}.store([{first}], {left})"),
        Line(f"{desc}.store([{second}], {right})"),
    )
    why = "epilogue subtile: the launch halved the block (_rt.epilogue_subtile), the tile goes in two halves"
    whole = Line(f"{desc}.store([{first}], {value})")
    return IfBlock(f"{desc}.block_shape[{len(tiles) - 1}] < {cols}", why, halves, (whole,))


def make_descriptors(
    spec: m.Spec, kernel: KernelPlan, tail: bool = False, split: bool = False, piece: bool = False
) -> list[Op]:
    """``a_desc = TensorDescriptor(a, shape, strides, block_shape)`` for every tensor; a tuned
    kernel's block shapes are set by ``_descriptor_blocks``. ``tail``: ``a_tail_desc`` for the
    sub-tiles of the last wave, for every tensor a grid axis tiles, their block shapes set by
    ``_descriptor_blocks`` per config (the autotuner's launch); with ``split``, made with the block
    shape of this launch's split (``tail_m``, ``tail_n``), and only for the tensors whose blocks the
    split divides (the others stay None). ``piece``: ``a_piece_desc`` for the second row piece of
    every tensor tiled along the rows (see :class:`~tilegen.lower.plan.PiecePlan`), block shapes
    set by ``_descriptor_blocks``."""
    ops: list[Op] = []
    tuned = set(spec.tuned_params)
    blocks = dict(kernel.descriptors)
    if piece:
        assert kernel.pieces is not None, "piece descriptors of a kernel without row pieces"
        made = [(t, "piece_desc") for t in spec.arrays if t.name.id in kernel.pieces.descriptors]
    elif tail:
        assert kernel.tail is not None, "tail descriptors of a kernel without split tail"
        made = [(t, "tail_desc") for t in spec.arrays if t.name.id in kernel.tail.descriptors]
    else:
        made = [(t, "desc") for t in spec.arrays]
    divided: dict[str, str] = {}
    if split:  # each grid axis's block divided by the split along it
        assert kernel.tail is not None, "a split of a kernel without split tail"
        (_, block_m), (_, block_n) = kernel.tail.tiles
        divided = {block_m: "tail_m", block_n: "tail_n"}

    def value(block: str) -> str:
        return f'config["{block}"]' if block in tuned else block

    for t, suffix in made:
        dims = [d.text if isinstance(d, m.Number) else d.id for d in t.dims]
        shape = blocks[t.name.id]
        block = ["1"] * len(shape) if suffix != "desc" or any(b in tuned for b in shape) else list(shape)
        if split:
            block = [f"{value(b)} // {divided[b]}" if b in divided else value(b) for b in shape]
        line = (f"{t.name.id}_{suffix} = TensorDescriptor({t.name.id}, [{', '.join(dims)}], "
                f"[*_{t.name.id}_strides], [{', '.join(block)}])")
        flag = dict(kernel.transposed).get(t.name.id)
        op: Op = Line(line)
        if flag is not None:
            strides = f"_{t.name.id}_strides"
            transposed = (f"{t.name.id}_{suffix} = TensorDescriptor({t.name.id}, [{', '.join(reversed(dims))}], "
                          f"[{strides}[1], 1], [{', '.join(reversed(block))}])")
            why = f"the tiles of {t.name.id}.T, read transposed by the kernel"
            op = IfBlock(flag, why, (Line(transposed),), (Line(line),))
        along = [divided[b] for b in dict.fromkeys(shape) if b in divided]
        if split and len(along) == 1:  # tiled along one grid axis: divided where the split divides that axis
            op = IfBlock(f"{along[0]} > 1", f"the split divides {t.name.id}'s blocks", (op,))
        ops.append(op)
    return ops


def set_blocks(spec: m.Spec, kernel: KernelPlan) -> Line:
    """``_descriptor_blocks({...})`` before a direct launch: the descriptors' block shapes for the
    remembered config (its tail descriptors, if any, are made with theirs)."""
    tuned = set(spec.tuned_params)
    shapes = [b for _, shape in kernel.descriptors for b in shape]
    fixed = dict.fromkeys(b for b in shapes if b not in tuned and not b.isdigit())  # not the 1s of index axes
    nargs = [f'"{t}_desc": {t}_desc' for t, _ in kernel.descriptors] + [f'"{b}": {b}' for b in fixed]
    nargs += [f'"{t}_piece_desc": {t}_piece_desc' for t in (kernel.pieces.descriptors if kernel.pieces else ())]
    nargs += [f'"{flag}": {flag}' for _, flag in kernel.transposed]
    config = ", **config" if spec.tune is not None else ""
    return Line(f"_descriptor_blocks({{{', '.join(nargs)}{config}}})")


def piece_descriptors(spec: m.Spec, kernel: KernelPlan) -> list[Op]:
    """The second row piece's descriptors for this launch: None where the config's block of the
    rows is a power of two (one piece: the kernel reads none), else made for ``_descriptor_blocks``
    to give them the second piece's block shape."""
    assert kernel.pieces is not None, "a kernel without row pieces"
    block = f'config["{kernel.pieces.block}"]'
    return [
        Line(" = ".join(f"{t}_piece_desc" for t in kernel.pieces.descriptors) + " = None  # one piece: none"),
        IfBlock(
            f"{block} & ({block} - 1)",
            f"{kernel.pieces.block} is a sum of two powers of two: the second row piece's descriptors",
            tuple(make_descriptors(spec, kernel, piece=True)),
        ),
    ]


def tail_descriptors(spec: m.Spec, kernel: KernelPlan) -> list[Op]:
    """The split of the last wave for this launch, and the tail descriptors it needs: none where
    it does not split (the kernel takes None, and compiles its whole-tile call only), else those of
    the tensors whose block shape the split divides. Each descriptor costs host time per launch
    (made, then encoded by Triton's launcher): none is made that the launch does not use."""
    tuned = set(spec.tuned_params)
    assert kernel.tail is not None, "a kernel without split tail"
    (dim_m, block_m), (dim_n, block_n) = kernel.tail.tiles
    blocks = [f'config["{b}"]' if b in tuned else b for b in (block_m, block_n)]
    tails = kernel.tail.descriptors
    return [
        Line(f"_, tail_m, tail_n = _tail_split({dim_m}, {dim_n}, {', '.join(blocks)}, NUM_SMS)"),
        Line(" = ".join(f"{t}_tail_desc" for t in tails) + " = None  # no split: the kernel takes none"),
        IfBlock(
            "tail_m * tail_n > 1",
            "split tail: the sub-tiles' descriptors of the tensors whose blocks the split divides",
            tuple(make_descriptors(spec, kernel, tail=True, split=True)),
        ),
    ]


def lower_descriptor_blocks(kernel: KernelPlan) -> HookPlan:
    """``_descriptor_blocks(nargs)``, the autotune ``pre_hook`` of a tuned kernel that takes TMA
    descriptors (``kernel``): it gives each descriptor in ``nargs`` the block shape of the config
    about to run. With row pieces (:class:`~tilegen.lower.plan.PiecePlan`) the first descriptor of
    a tensor tiled along the rows takes the first piece's rows and its ``_piece_desc`` the
    second's (where there is one); with ``split tail`` each ``_tail_desc`` takes the sub-tiles'
    block shape (``_tail_split`` of the call's sizes), unless the call has none (a direct launch
    makes its tail descriptors with their blocks). A transposed input's block shape is reversed
    where its flag is set."""
    flags = dict(kernel.transposed)
    pieces, tail = kernel.pieces, kernel.tail
    block_m = block_n = None
    if tail is not None:
        (dim_m, block_m), (dim_n, block_n) = tail.tiles

    def item(block: str, suffix: str) -> str:
        """The text of one block dimension for descriptors ``<tensor>_<suffix>``."""
        if block.isdigit():
            return block
        if pieces is not None and block == pieces.block:
            return {"piece_desc": "second", "tail_desc": "first // tail_m"}.get(suffix, "first")
        divided = {block_m: "tail_m", block_n: "tail_n"}.get(block) if suffix == "tail_desc" else None
        return f'nargs["{block}"] // {divided}' if divided else f'nargs["{block}"]'

    def assignments(suffix: str, tensors: tuple[str, ...] | None) -> tuple[Op, ...]:
        lines: list[Op] = []
        for tensor, shape in kernel.descriptors:
            if tensors is not None and tensor not in tensors:
                continue
            items = [item(b, suffix) for b in shape]
            block = f"[{', '.join(items)}]"
            if tensor in flags:
                block = f'[{", ".join(reversed(items))}] if nargs["{flags[tensor]}"] else {block}'
            lines.append(Line(f'nargs["{tensor}_{suffix}"].block_shape = {block}'))
            if tensor in kernel.subtiled and suffix != "tail_desc":  # a tile over _rt.SUBTILE_BYTES: halves
                # (not a tail descriptor: its block tells the kernel the split of the last wave)
                lines.append(Line(f'_epilogue_subtile(nargs["{tensor}_{suffix}"])'))
        return tuple(lines)

    body: list[Op] = []
    doc = "Autotune pre_hook: give each tensor descriptor the block shape of the config about to run"
    if pieces is not None:
        body.append(Line(f'first, second = _pieces(nargs["{pieces.block}"])'))
        doc += (f" (the\nfirst row piece's rows where {pieces.block} is two pieces, and the second piece's to each "
                "_piece_desc: see _pieces)")
    body += assignments("desc", None)
    if pieces is not None:
        body.append(IfBlock(f'nargs.get("{pieces.descriptors[0]}_piece_desc") is not None',
                            "the second row piece's (None: one piece)", assignments("piece_desc", pieces.descriptors)))
    if tail is not None:
        doc += ", and each tail\ndescriptor the block shape of the sub-tiles of the last partial wave (see _tail_split)"
        body += [
            IfBlock(f'nargs.get("{tail.carrier}_tail_desc") is None',
                    "a direct launch: it makes its tail descriptors with their blocks", (Line("return"),)),
            Line(f'_, tail_m, tail_n = _tail_split(nargs["{dim_m}"], nargs["{dim_n}"], nargs["{block_m}"], '
                 f'nargs["{block_n}"], nargs["NUM_SMS"])'),
            *assignments("tail_desc", tail.descriptors),
        ]
    return HookPlan(docstring=doc + ".", body=tuple(body))
