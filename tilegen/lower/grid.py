"""The grid, both sides. The launcher's: the programs along each program id, and whether the
launch folds them onto program id 0. The kernel's: program ids -> tiles, each grid axis's program
id, offsets and mask (after a folded launch's mapping, any swizzle, a flat grid's grouping, a
persistent program's tile loop), and the 64-bit recasts of offsets.

The kernel's side are functions of the :class:`~tilegen.lower.state.KernelState`: they fill
``state.axes`` with an :class:`~tilegen.lower.state.AxisInfo` per grid axis and name the flat grid's
program and tile ids (``pid``, ``num_pid_m``, ``tile_id``, ...) in it. The launcher side
(:func:`grid_text`, :func:`fold_condition`) is launcher text of a checked spec.

A launch takes at most 65535 programs along program ids 1 and 2 (CUDA's grid y and z), 2**31 - 1
along id 0. A grid whose axes put more along id 1 or 2 runs folded: the launcher sets the kernel's
``FOLDED_GRID`` and launches every program along id 0, and the kernel reads each axis's program
id from id 0 (:func:`folded_pids`); otherwise the flag is false and compiles away.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tilegen import model as m
from tilegen.lower.checked import block_of, tensor_of
from tilegen.lower.descriptors import smallest_block
from tilegen.lower.names import stride_name, tuple_text
from tilegen.lower.plan import IfBlock, Line, Op
from tilegen.lower.state import FOLD_FLAG, INT64_FLAG, AxisInfo, KernelState


def grid_ops(state: KernelState) -> tuple[list[Op], list[Op]]:
    """Program ids -> tile offsets and masks for every grid axis (after any swizzle).

    Returns (setup, per-tile) ops: the same program's setup runs once; a persistent
    program runs the per-tile part (and the body) once per tile it takes.
    """
    spec = state.spec
    if not spec.grid:
        return [], []
    setup: list[Op] = [state.comment(spec.grid[0].span)]
    ops: list[Op] = []
    pids: dict[str, str] = {}
    if spec.flat:
        setup += flat_setup(state)
        if spec.split_tail:  # the kernel maps programs to tiles; the tile function takes pid_m, pid_n
            state.tile_map = flat_pids(state, pids)
            state.tile_pids = tuple(pids.values())
        else:
            ops += flat_pids(state, pids)
    elif spec.persistent:  # rows: one program per SM walks the tiles of the one tiled axis
        axis = next(a for a in spec.grid if a.bounds != "whole")
        state.pid = state.fresh("start_pid")
        state.num_tiles = state.fresh("num_tiles")
        setup += [Line(f"{state.pid} = tl.program_id(0)"),
                  Line(f"{state.num_tiles} = tl.cdiv({axis.dim.id}, {block_of(axis)})")]
        state.tile_id = state.fresh("tile_id")
        pids[axis.name.id] = state.fresh(f"pid_{axis.name.id}")
        ops.append(Line(f"{pids[axis.name.id]} = {state.tile_id}"))
    else:
        launched = [a for a in spec.grid if a.bounds != "whole"]  # a whole axis takes no program id
        flattened = launched[:-2] if len(launched) > 3 else []  # onto program id 0, the first slowest
        if flattened:
            setup += flattened_pids(state, flattened, pids)
        for number, axis in enumerate(launched[len(flattened):], start=1 if flattened else 0):
            pids[axis.name.id] = state.fresh(f"pid_{axis.name.id}")
            setup.append(Line(f"{pids[axis.name.id]} = tl.program_id({number})"))
            state.num_programs[axis.name.id] = program_count(axis)
        if folds(spec):
            setup += folded_pids(state, launched, pids)
        setup += swizzle2d(state, pids)
    state.pids = dict(pids)
    ops += int64_casts(state, list(dict.fromkeys(pids.values())), constant_strides(state))
    grid_axes = {a.name.id: a for a in spec.grid}
    names = list(pids) + [a.name.id for a in spec.grid if a.name.id not in pids]
    for name in names:
        axis = grid_axes[state.canonical.get(name, name)]
        if axis.is_index:
            state.axes[name] = AxisInfo(pids[name], None, axis.dim.id, "1", pids[name], scalar=True)
            continue
        whole = axis.bounds == "whole"
        start = "0" if whole else f"{pids[name]} * {block_of(axis)}"
        if state.spec.access_style in ("block_ptr", "descriptor"):
            # Block pointers and descriptors take the tile start and check bounds themselves.
            mask = "checked" if axis.masked or whole else None
            tile = state.whole_blocks[axis.dim.id] if whole else block_of(axis)
            state.axes[name] = AxisInfo("", mask, axis.dim.id, tile, start)
            continue
        offs = state.fresh(f"offs_{name}")
        if whole:  # one tile of all of the dimension, padded to a power of two and masked
            block = state.whole_blocks[axis.dim.id]
            mask = state.fresh(f"mask_{name}")
            # the same in every tile: a persistent program makes them once (its partials' store reads them)
            (setup if spec.walks_rows else ops).extend(
                [Line(f"{offs} = tl.arange(0, {block})"), Line(f"{mask} = {offs} < {axis.dim.id}")])
            state.axes[name] = AxisInfo(offs, mask, axis.dim.id, block, "0")
            continue
        ops.append(Line(f"{offs} = {start} + tl.arange(0, {block_of(axis)})"))
        info = AxisInfo(offs, None, axis.dim.id, block_of(axis), start)
        if axis.masked:
            info.mask = info.load_mask = state.fresh(f"mask_{name}")
            ops.append(Line(f"{info.mask} = {offs} < {axis.dim.id}"))
        if axis.bounds == "wrapped":  # loads wrap around (% dim); stores stay masked
            info.load_offs = state.fresh(f"offs_{name}_wrapped")
            info.load_mask = None
            ops.append(Line(f"{info.load_offs} = {offs} % {axis.dim.id}"))
        state.axes[name] = info
    if not spec.persistent and not spec.split_tail:
        return setup + ops, []
    return setup, ops


def program_count(axis: m.Axis) -> str:
    """Kernel text: the programs along a launched grid axis (its tiles, or its extent for an index axis)."""
    return axis.dim.id if axis.is_index else f"tl.cdiv({axis.dim.id}, {block_of(axis)})"


def flattened_pids(state: KernelState, axes: Sequence[m.Axis], pids: dict[str, str]) -> list[Op]:
    """The program ids of the first launched axes of a grid of more than three (Triton has three
    program ids), all on program id 0, row-major (the first slowest, as a hand-written kernel
    flattens batch and channel): ``pid_n = pid_nc // C``, ``pid_c = pid_nc % C``."""
    counts = [program_count(a) for a in axes]
    flat = state.fresh("pid_" + "".join(a.name.id for a in axes))
    names = ", ".join(a.name.id for a in axes)
    ops: list[Op] = [Line(f"{flat} = tl.program_id(0)  # {names}: one program id, the first slowest")]
    for i, axis in enumerate(axes):
        pids[axis.name.id] = state.fresh(f"pid_{axis.name.id}")
        state.num_programs[axis.name.id] = counts[i]
        later = counts[i + 1:]
        value = f"{flat} // {later[0]}" if len(later) == 1 else f"{flat} // ({' * '.join(later)})" if later else flat
        value = value if i == 0 else f"{value} % {counts[i]}"
        ops.append(Line(f"{pids[axis.name.id]} = {value}"))
    return ops


def folded_pids(state: KernelState, launched: Sequence[m.Axis], pids: dict[str, str]) -> list[Op]:
    """``if FOLDED_GRID:`` each launched axis's program id from program id 0 alone, where the
    launcher ran every program along id 0 (more programs along id 1 or 2 than a launch may have
    there), in the order the unfolded grid runs them: id 0's programs fastest (the last of the
    axes flattened onto it fastest, :func:`flattened_pids`), then id 1's, then id 2's::

        pid = tl.program_id(0)
        pid_m = pid % tl.cdiv(M, BM)
        pid_n = pid // tl.cdiv(M, BM) % tl.cdiv(N, BN)
        pid_b = pid // (tl.cdiv(M, BM) * tl.cdiv(N, BN))
    """
    on_first = len(launched) - 2 if len(launched) > 3 else 1  # the axes on program id 0
    fastest_first = [*reversed(launched[:on_first]), *launched[on_first:]]
    pid = state.fresh("pid")
    body: list[Op] = [Line(f"{pid} = tl.program_id(0)")]
    for axis in launched:
        place = fastest_first.index(axis)
        # the programs of the faster axes (in grid order): pid // them; then % this axis's, but the slowest's
        faster = [state.num_programs[a.name.id] for a in launched if fastest_first.index(a) < place]
        value = f"{pid} // {faster[0]}" if len(faster) == 1 else f"{pid} // ({' * '.join(faster)})" if faster else pid
        value = value if place == len(launched) - 1 else f"{value} % {state.num_programs[axis.name.id]}"
        body.append(Line(f"{pids[axis.name.id]} = {value}"))
    state.folded = True
    why = "the launch ran every program along program id 0 (over 65535 along id 1 or 2)"
    return [IfBlock(FOLD_FLAG, why, tuple(body))]


def int64_casts(state: KernelState, names: list[str], strides: Sequence[str] = ()) -> list[Op]:
    """``if INT64_OFFSETS:`` recast tensors ``names`` and scalar arguments ``strides`` to
    int64 (``tl.cast`` also takes a stride Triton specialised to the constant 1). The
    launcher sets the constexpr when some tensor spans 2**31 elements or more, where int32
    offsets would wrap around."""
    if (not names and not strides) or state.spec.access_style == "descriptor":
        return []  # descriptors address with 64 bits themselves (TMA); coordinates fit int32
    state.int64 = True
    casts = tuple(Line(f"{n} = {n}.to(tl.int64)") for n in names)
    casts += tuple(Line(f"{n} = tl.cast({n}, tl.int64)") for n in strides)
    return [IfBlock(INT64_FLAG, "a tensor spans 2**31 elements or more: 64-bit offsets", casts)]


def constant_strides(state: KernelState) -> list[str]:
    """Strides multiplied by a constant index (``2 * stride_x_0``): int32 products too."""
    found: list[str] = []
    for stmt in m.statements(state.spec.body):
        for access in m.accesses(stmt):
            tensor = tensor_of(state.spec, access.tensor.id)
            for position, item in enumerate(access.index):
                if isinstance(item, m.Number) and item.text != "0":
                    found.append(stride_name(tensor, position))
    return list(dict.fromkeys(found))


def flat_setup(state: KernelState) -> list[Op]:
    """The program-invariant part of a flat grid: tile counts (and, persistent, the
    program's first tile)."""
    spec = state.spec
    first, second = spec.grid
    a, b = first.name.id, second.name.id
    state.pid = state.fresh("start_pid" if spec.persistent else "pid")
    state.num_a, state.num_b = state.fresh(f"num_pid_{a}"), state.fresh(f"num_pid_{b}")
    ops: list[Op] = [
        Line(f"{state.pid} = tl.program_id(0)"),
        Line(f"{state.num_a} = tl.cdiv({first.dim.id}, {block_of(first)})"),
        Line(f"{state.num_b} = tl.cdiv({second.dim.id}, {block_of(second)})"),
    ]
    if spec.persistent or spec.split_tail:
        state.num_tiles = state.fresh("num_tiles")
        ops.append(Line(f"{state.num_tiles} = {state.num_a} * {state.num_b}"))
    if spec.swizzle is not None:
        state.in_group = state.fresh("num_pid_in_group")
        ops.append(Line(f"{state.in_group} = {spec.swizzle.group_text} * {state.num_b}"))
    return ops


def flat_pids(state: KernelState, pids: dict[str, str]) -> list[Op]:
    """Tile ids of a flat grid: row-major, or grouped by GROUP_SIZE_M (tutorial 03). A
    persistent program maps each ``tile_id`` it loops over; others their program id."""
    spec = state.spec
    first, second = spec.grid
    a, b = first.name.id, second.name.id
    pid = state.fresh("tile_id") if spec.persistent or spec.split_tail else state.pid
    state.tile_id = pid
    pids[a], pids[b] = state.fresh(f"pid_{a}"), state.fresh(f"pid_{b}")
    if spec.swizzle is None:
        return [Line(f"{pids[a]} = {pid} // {state.num_b}"), Line(f"{pids[b]} = {pid} % {state.num_b}")]
    group = spec.swizzle.group_text
    in_group, group_id = state.in_group, state.fresh("group_id")
    first_pid, size = state.fresh(f"first_pid_{a}"), state.fresh(f"group_size_{a}")
    return [
        state.comment(spec.swizzle.span),
        Line(f"{group_id} = {pid} // {in_group}"),
        Line(f"{first_pid} = {group_id} * {group}"),
        Line(f"{size} = min({state.num_a} - {first_pid}, {group})"),
        Line(f"{pids[a]} = {first_pid} + (({pid} % {in_group}) % {size})"),
        Line(f"{pids[b]} = ({pid} % {in_group}) // {size}"),
    ]


def swizzle2d(state: KernelState, pids: dict[str, str]) -> list[Op]:
    """``tl.swizzle2d`` on a 2D grid; with ``as`` the remapped ids get the alias names."""
    swizzle = state.spec.swizzle
    if swizzle is None:
        return []
    first, second = (a.id for a in swizzle.axes)
    targets: tuple[str, ...] = (first, second)
    if swizzle.aliases:
        targets = tuple(a.id for a in swizzle.aliases)
        for alias, axis in zip(targets, (first, second), strict=True):
            state.canonical[alias] = axis
            pids[alias] = state.fresh(f"pid_{alias}")
    counts = state.num_programs  # not tl.num_programs: a folded launch has all its programs along id 0
    return [
        state.comment(swizzle.span),
        Line(
            f"{pids[targets[0]]}, {pids[targets[1]]} = tl.swizzle2d("
            f"{pids[first]}, {pids[second]}, {counts[first]}, {counts[second]}, {swizzle.group_text})"
        ),
    ]


# The launcher's side: the grid it launches, and whether it folds it onto program id 0.


def cdiv(size: str, block: str) -> str:
    """Ceiling division as plain integer arithmetic: ``triton.cdiv`` is a Triton builtin that
    costs about 2.5 us per host call, more than the rest of a launcher's checks together."""
    return f"({size} + {block} - 1) // {block}"


def folds(spec: m.Spec) -> bool:
    """Whether the kernel of ``spec`` takes ``FOLDED_GRID``: a plain grid of more than one
    launched axis (flat and persistent grids launch along program id 0 alone)."""
    return not spec.flat and not spec.persistent and sum(a.bounds != "whole" for a in spec.grid) > 1


def launch_sizes(spec: m.Spec, block: Callable[[str], str]) -> list[str]:
    """Launcher text: the programs along each program id the grid of ``spec`` uses (one to
    three; none for a spec without a grid), with each block size as ``block`` gives it."""
    if spec.flat:
        a, b = spec.grid
        tiles = f"({cdiv(a.dim.id, block(block_of(a)))}) * ({cdiv(b.dim.id, block(block_of(b)))})"
        if spec.split_tail:  # the whole tiles, and the sub-tiles of the last partial wave's
            return [f"_tail_split({a.dim.id}, {b.dim.id}, {block(block_of(a))}, {block(block_of(b))}, NUM_SMS)[0]"]
        return [f"min(NUM_SMS, {tiles})" if spec.persistent else tiles]
    sizes = []
    for axis in spec.grid:
        if axis.is_index:
            sizes.append(axis.dim.id)
        elif axis.bounds == "whole":  # one program along it: no grid dimension
            continue
        elif spec.persistent:  # rows walked by at most one program per SM
            sizes.append(f"min(NUM_SMS, {cdiv(axis.dim.id, block(block_of(axis)))})")
        else:
            sizes.append(cdiv(axis.dim.id, block(block_of(axis))))
    if len(sizes) > 3:  # the first axes flattened onto program id 0 (flattened_pids)
        sizes = [" * ".join(f"({s})" for s in sizes[:-2]), *sizes[-2:]]
    return sizes


def grid_text(spec: m.Spec, config: str | None = None) -> str:
    """The launch grid as a 3-tuple (the compiled kernel's runner takes three sizes); tuned block
    sizes are read from the dict named ``config`` (``meta`` in the autotuner's grid lambda). A
    grid the kernel may fold (:func:`folds`) goes through ``_rt.fold_grid``, which puts every
    program along program id 0 where the launcher's ``folded`` says so (:func:`fold_condition`)."""
    tuned = set(spec.tuned_params)

    def block(name: str) -> str:
        return f'{config}["{name}"]' if name in tuned else name

    sizes = launch_sizes(spec, block) or ["1"]
    grid = tuple_text(sizes + ["1"] * (3 - len(sizes)))
    return f"_rt.fold_grid({grid}, folded)" if folds(spec) else grid


def fold_condition(spec: m.Spec) -> str:
    """Launcher text: whether the launch folds its grid onto program id 0 (the kernel's
    ``FOLDED_GRID``): more programs along program id 1 or 2 than ``_rt.MAX_GRID_YZ`` (CUDA's
    65535). The tiles of a tuned block are counted at the least block of any config, so that
    one flag serves every config the autotuner runs."""
    later = launch_sizes(spec, lambda name: smallest_block(spec, name))[1:]
    largest = later[0] if len(later) == 1 else f"max({', '.join(later)})"
    return f"{largest} > _rt.MAX_GRID_YZ"

