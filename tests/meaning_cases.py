"""The cases of tests/test_meaning.py: for each spec, the sizes, block sizes, forced autotune
configs, dtypes, choices and scalar signs it runs at, derived from the checked spec alone.

Everything here reads the spec's model (``tilegen.model``), never its generated module, so the
cases are known when pytest collects them (one test id each) and a new spec is covered without
editing anything. What the harness cannot derive for a spec (an axis bound it does not know, a
block parameter that tiles nothing and groups nothing, fewer than three distinct block settings
where a spec has blocks) raises :class:`CannotDerive`, which the test reports as a failure of that
spec: no spec is skipped in silence.

Sizes have tails: every extent a masked (or wrapped) axis tiles is odd (or, where a TMA descriptor
must read its rows, 16-byte aligned but not a multiple of 32), at least 1.5 times the smallest
block over it, so that at least one setting runs two tiles with a partial last one and the
largest settings run one tile wider than the extent. An ``unmasked`` axis's extent is a multiple
of every block the launcher could be given for it (the launcher refuses anything else). Beside
these regular sizes (or smaller "compact" ones where a spec's settings would take too many tile
steps for the interpreter, and where still too many, "narrow" ones: compact with a batch of one,
one index along the grid's first index axis) each spec runs once at "tiny" sizes, below every
block, and a spec
whose launcher may split a loop (``for ... split``) or a grid's last wave (``split tail``) runs
each setting at sizes where it does (:data:`INTERPRETER_SMS`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from pathlib import Path

from tilegen import model as m
from tilegen.runner import derived_over, fit_jagged_rows, interpreter_blocks, later_factor, loaded_starts, tile_steps
from tilegen.sizes import round_to_multiples, scalar_sizes, size_names, solve_derived

ROOT = Path(__file__).resolve().parent.parent
SPEC_DIRS = ("specs", "tests/specs")

#: Extents of masked axes, in order of first appearance: odd, so never a multiple of a block.
ODD_EXTENTS = (29, 21, 33, 19, 27, 17, 31, 23)
#: ``whole`` extents (not powers of two: a masked tail in the one tile), by the size scale of a
#: spec without blocks: tiles of 128, 64 and 256, with 28, 27 and 3 lanes masked (a larger tile
#: runs the same program on more lanes; a spec with two whole axes runs the square); a whole
#: axis that a ``dot`` contracts or spans (a head dimension) takes 61, or 40 where its rows go
#: through a TMA descriptor (16-byte rows, a 64-wide tile).
WHOLE_EXTENTS = (100, 37, 253)
DOT_WHOLE_EXTENT, DOT_WHOLE_ALIGNED = 61, 40
#: Extent of an index (batch) axis: one program per index.
INDEX_EXTENT = 2
#: Extent of an unmasked axis of a spec without tune configs (its blocks are chosen to divide it).
UNMASKED_EXTENT = 64
#: Group sizes (``swizzle ... group G``) cycled over the cases: 1, one that is not a power of
#: two, and the spec's default.
GROUPS = (1, 3, None)
#: A ``dot`` needs tiles of 16 or more along each axis.
DOT_MIN = 16
#: Smaller odd extents, for specs whose block settings would otherwise take more than STEP_BUDGET
#: tile steps (programs times the steps of their loops, :func:`tilegen.runner.tile_steps`; the
#: interpreter runs them one after another, 2 to 30 ms a step).
COMPACT_EXTENTS = (13, 11, 15, 9, 17, 7, 19, 5)
STEP_BUDGET = 440
#: Extents below every block (each tile partial); index extents are then 1.
TINY_EXTENTS = (5, 3, 7, 9, 11, 13, 15, 17)
#: "tiny" sizes of dimensions no axis walks (a convolution's or a pooling's input height and width,
#: a gather's table): the program count grows with the output extents they make, not the tiles.
TINY_UNWALKED = (3, 4, 5, 6, 7, 8, 9, 10)
#: The interpreter's SMs as generated launchers count them (``_num_sms``: 4 without a GPU). A
#: ``split`` loop runs in several parts where the output tiles fill at most half of them and the
#: loop has 8 or more tiles (the "split-k" shape: tiny output extents, a loop of 8 tiles and a
#: tail, at least SPLIT_MIN_EXTENT long so that the operands outweigh the partial sums); ``split
#: tail`` splits the tiles past the last whole wave (the "split-tail" shape: SPLIT_TAIL_TILES
#: tiles along the first grid axis, one along the others, so one tile is left over).
INTERPRETER_SMS = 4
SPLIT_MIN_EXTENT = 256
SPLIT_TAIL_TILES = INTERPRETER_SMS + 1
#: Jagged rows (``values[offsets[b] + l]``, ``l over L``) at the regular sizes: this many rows,
#: of lengths 1 to L (about L - 1/2 on average), so that rows of several lengths, and rows shorter
#: than L, run in each program's tile; more rows run the same code in more programs.
JAGGED_ROWS = 4
#: The size sets: the regular one, "compact", "narrow", "tiny", and the two that make a launcher split.
SHAPES = ("", "compact", "narrow", "tiny", "split-k", "split-tail")


class CannotDerive(Exception):
    """The harness cannot derive sizes or settings for a spec (a construct it does not know)."""


@dataclass(frozen=True)
class Case:
    """One run of a spec: what the launcher is called with and what it is compared with.

    ``keywords``: launcher keywords (block sizes, group sizes, choices); ``config``: the index in
    the module's ``_CONFIGS`` forced for a tuned spec (None: untuned); ``binding``: the dtype of
    each dtype variable; ``variant``: ``"tma"`` (descriptor rows 16-byte aligned: the descriptor
    or block-pointer kernel), ``"pointers"`` (rows that are not: the pointer kernel generated from
    the same spec) or ``""``; ``sign``: the sign of float scalar inputs (+1 or -1); ``seed``: the
    inputs' random seed.
    """

    path: str
    kernel: str
    id: str
    sizes: dict[str, int]
    keywords: dict = field(default_factory=dict)
    config: int | None = None
    binding: dict[str, str] = field(default_factory=dict)
    variant: str = ""
    sign: int = 1
    seed: int = 0


def spec_paths() -> list[Path]:
    """Every ``.tile`` file of specs/ and tests/specs/, sorted."""
    return [path for folder in SPEC_DIRS for path in sorted((ROOT / folder).glob("*.tile"))]


def checked(path: Path) -> m.Spec:
    """The checked model of the spec at ``path`` (displayed relative to the repository), parsed
    once per process (tests.conftest.checked_spec)."""
    from tests.conftest import checked_spec

    return checked_spec(path)


# --------------------------------------------------------------------------- spec analysis


def dot_axes(spec: m.Spec) -> set[str]:
    """Names of the axes that some ``dot`` operand spans (loaded, or through a local)."""
    axes = {a.name.id for a in spec.axes()}
    local_axes: dict[str, set[str]] = {}
    found: set[str] = set()

    def spanned(expr) -> set[str]:
        out: set[str] = set()
        for part in m.subexpressions(expr):
            if isinstance(part, m.Load):
                out |= {i.id for i in part.index if isinstance(i, m.Name) and i.id in axes}
            elif isinstance(part, m.Ref):
                out |= local_axes.get(part.name.id, {part.name.id} & axes)
        return out

    for stmt in m.statements(spec.body):
        if isinstance(stmt, m.Declare):
            local_axes[stmt.name.id] = {a.id for a in stmt.axes}
            continue
        if isinstance(stmt, m.Loop):
            continue
        for call in m.subexpressions(stmt.value):
            if m.is_dot(call):
                for arg in call.args:
                    found |= spanned(arg)
        if isinstance(stmt, m.Assign):
            local_axes.setdefault(stmt.name.id, set()).update(spanned(stmt.value))
    return found


def group_params(spec: m.Spec) -> set[str]:
    """Block parameters that are a swizzle's group size (not a tile size)."""
    if spec.swizzle is None:
        return set()
    group = spec.swizzle.group
    if isinstance(group, m.Param):
        return {group.name.id}
    if isinstance(group, m.Name):
        return {group.id}
    return set()


def tile_params(spec: m.Spec) -> dict[str, list[m.Axis]]:
    """Block parameter -> the axes it tiles (grid and loop axes ``... by <B>``)."""
    tiles: dict[str, list[m.Axis]] = {}
    for axis in spec.axes():
        if axis.block is not None:
            tiles.setdefault(axis.block.id, []).append(axis)
    return tiles


def uses_tma(spec: m.Spec) -> bool:
    """Whether some launch of the spec goes through TMA descriptors where the rows allow it
    (``access descriptor``, or ``access block_ptr`` on a Triton without block pointers), and
    otherwise through the pointer kernel generated from the same spec."""
    return spec.access_style in ("descriptor", "block_ptr")


def config_blocks(spec: m.Spec, config: m.Config) -> dict[str, int]:
    """The block settings of a tune config (``num_warps`` and ``num_stages`` left out)."""
    params = {p.name.id for p in spec.params}
    return {s.name.id: int(s.default.text) for s in config.settings if s.name.id in params}


def _power_of_two(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


def _next_power_of_two(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


def _previous_power_of_two(value: int) -> int:
    return 1 << (max(value, 1).bit_length() - 1)


# --------------------------------------------------------------------------- sizes


def _itemsize(dtype: str) -> int:
    return {"f16": 2, "bf16": 2, "f32": 4, "f64": 8, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u8": 1}.get(dtype, 4)


def _row_alignment(spec: m.Spec) -> dict[str, int]:
    """Size symbol -> the element count a TMA row along it must be a multiple of (16 bytes),
    for the symbols that are the last (contiguous) dimension of some tensor."""
    alignment: dict[str, int] = {}
    for tensor in spec.arrays:
        last = tensor.dims[-1]
        if isinstance(last, m.Name):
            # a dtype variable may stand for a 2-byte dtype: the strictest of its options
            options = [o.id for v in spec.dtype_vars if v.name.id == tensor.dtype.id for o in v.options]
            size = min(_itemsize(d) for d in options) if options else _itemsize(tensor.dtype.id)
            alignment[last.id] = max(alignment.get(last.id, 1), 16 // size)
    return alignment


def split_loop_dims(spec: m.Spec) -> set[str]:
    """The dimensions of the spec's ``split`` loops (split-K)."""
    return {s.axis.dim.id for s in m.statements(spec.body) if isinstance(s, m.Loop) and s.split}


def derive_sizes(spec: m.Spec, variant: str = "", scale: int = 0, shape: str = "",
                 blocks: dict[str, int] | None = None) -> dict[str, int]:
    """A value for every size symbol of ``spec`` with tails (see the module docstring).

    ``variant``: ``"tma"`` makes the rows TMA reads 16-byte aligned, ``"pointers"`` leaves them
    odd; ``scale`` picks another whole extent (for specs without blocks, which vary sizes only);
    ``shape`` (with ``blocks``, the block values of the run) one of :data:`SHAPES`.
    Raises CannotDerive for an axis bound the harness does not know."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}")
    blocks = blocks or {}
    axes = spec.axes()
    dots = dot_axes(spec)
    smallest: dict[str, int] = {}  # block parameter -> its smallest / largest tune config value
    largest: dict[str, int] = {}
    if spec.tune is not None:
        for config in spec.tune.configs:
            for name, value in config_blocks(spec, config).items():
                smallest[name] = min(smallest.get(name, value), value)
                largest[name] = max(largest.get(name, value), value)
    alignment = _row_alignment(spec) if variant == "tma" else {}
    tiny = shape in ("tiny", "split-k")
    odd = iter(TINY_EXTENTS if tiny else COMPACT_EXTENTS if shape in ("compact", "narrow") else ODD_EXTENTS)
    unwalked = iter(TINY_UNWALKED)
    batch = next((a.dim.id for a in spec.grid if a.is_index), None) if shape == "narrow" else None
    split = split_loop_dims(spec) if shape == "split-k" else set()
    tiled_grid = [a for a in spec.grid if a.block is not None]
    rows = tiled_grid[0].dim.id if shape == "split-tail" and tiled_grid else None
    columns = {a.dim.id for a in tiled_grid[1:]} - {rows} if shape == "split-tail" else set()
    sizes: dict[str, int] = {}

    def block_of(over: list[m.Axis]) -> int:
        values = [blocks[a.block.id] for a in over if a.block is not None and a.block.id in blocks]
        if not values:
            raise CannotDerive(f"{spec.path}: no block value for {[a.name.id for a in over]} in shape {shape}")
        return max(values)

    sizes.update(scalar_sizes(spec))  # g over G, c over C / G: G's value first
    for dim in size_names(spec):
        if dim.id in sizes:
            continue
        over = [a for a in axes if a.dim.id == dim.id]
        kinds = {a.bounds for a in over}
        unknown = kinds - {"masked", "wrapped", "unmasked", "whole", "index"}
        if unknown:
            raise CannotDerive(f"{spec.path}: no size rule for axes of bounds {sorted(unknown)} over {dim.id}")
        align = alignment.get(dim.id, 1)
        if "whole" in kinds:
            dot = any(a.name.id in dots for a in over)
            if tiny:
                size = _aligned(5 if dot else 3, align, sizes.values()) if align > 1 else (5 if dot else 3)
            elif dot:
                size = DOT_WHOLE_ALIGNED if align > 1 else DOT_WHOLE_EXTENT
            else:
                size = _aligned(WHOLE_EXTENTS[scale], align, sizes.values()) if align > 1 else WHOLE_EXTENTS[scale]
        elif "unmasked" in kinds:  # a multiple of every block the launcher may be given for it
            tuned = max((largest.get(a.block.id, 0) for a in over if a.block is not None), default=0)
            size = 2 * tuned if tuned else UNMASKED_EXTENT
            if dim.id in split:
                size = max(size, 8 * block_of(over), SPLIT_MIN_EXTENT)
        elif (kinds and kinds <= {"index"}) or any(later_factor(a, dim.id) for a in derived_over(spec, dim.id)):
            size = 1 if tiny or dim.id == batch else INDEX_EXTENT  # a batch, or a window's KW of q over C * KH * KW
        elif dim.id in split:  # 8 or more tiles of the loop, and a tail
            block = block_of(over)
            size = max(8 * block, SPLIT_MIN_EXTENT) + (align if align > 1 else block // 2 + 1)
        elif dim.id == rows:  # SPLIT_TAIL_TILES tiles, the last one partial
            block = block_of(over)
            size = (SPLIT_TAIL_TILES - 1) * block + _below(block, align)
        elif dim.id in columns:  # one partial tile
            size = _below(block_of(over), align)
        else:  # masked or wrapped tiles (or no axis at all): an odd extent, a tail for every block
            size = next(unwalked, 11) if tiny and not over else next(odd, 41)
            floor = 0 if tiny else min(
                (smallest[a.block.id] for a in over if a.block is not None and a.block.id in smallest), default=0)
            if size < floor + floor // 2 + 1:
                size = floor + floor // 2 + 1
                size += 1 - size % 2
                while size in sizes.values():  # distinct extents: a swapped pair of sizes shows
                    size += 2
            if align > 1:
                size = _aligned(size, align, sizes.values())
        sizes[dim.id] = size
    round_to_multiples(spec, sizes)  # rope's D / 2 in an index: D even
    if not tiny:
        _jagged_rows(spec, sizes)
    return fit_jagged_rows(spec, solve_derived(spec, sizes))


def _jagged_rows(spec: m.Spec, sizes: dict[str, int]) -> None:
    """Make the jagged rows of ``spec`` (:func:`tilegen.runner.loaded_starts`) JAGGED_ROWS rows
    whose lengths average about half an element less than the longest a row may be (the size of
    the axes added to a row's start, L of ``l over L``): the offsets' one dimension JAGGED_ROWS + 1,
    the dimension the rows lie in (not an axis's) their total length."""
    axis_dims = {a.dim.id for a in spec.axes()}
    for name, (dim, added) in loaded_starts(spec).items():
        offsets = spec.tensor(name)
        if offsets is None or len(offsets.dims) != 1 or not isinstance(offsets.dims[0], m.Name):
            continue
        if not isinstance(dim, m.Name) or dim.id in axis_dims or not added or offsets.dims[0].id in axis_dims:
            continue
        longest = min(sizes[a] for a in added)
        sizes[offsets.dims[0].id] = JAGGED_ROWS + 1
        sizes[dim.id] = max(JAGGED_ROWS, JAGGED_ROWS * longest - JAGGED_ROWS // 2)


def _aligned(size: int, align: int, taken) -> int:
    """``size`` rounded up to a multiple of ``align`` that is not a multiple of 32 (a tail for
    blocks of 32 and more) and not already used by another symbol."""
    size = -(-size // align) * align
    taken = set(taken)
    while size % 32 == 0 or size in taken:
        size += align
    return size


def _below(block: int, align: int) -> int:
    """An extent of one partial tile of ``block``: about half of it, a multiple of ``align``."""
    if align <= 1:
        return block // 2 + 1
    return max(align, block // 2 // align * align)


def steps(spec: m.Spec, sizes: dict[str, int], runs: list[_Run]) -> int:
    """The most tile steps the spec's kernel takes at ``sizes`` in any of ``runs``
    (:func:`tilegen.runner.tile_steps` at each run's blocks, the spec's defaults for those a run
    leaves out): its programs times the steps of its loops (``for kh over KH``: each program runs its
    body once per index, as that many programs would)."""
    return max(tile_steps(spec, sizes, {**interpreter_blocks(spec), **run.blocks}) for run in runs)


# --------------------------------------------------------------------------- settings


def _tile_choices(spec: m.Spec, sizes: dict[str, int]) -> dict[str, dict[str, int]]:
    """Block parameter -> {"small", "large", "mid"} values for an untuned spec: powers of two
    below and above the extents it tiles (16 or more for a ``dot`` axis; dividing an unmasked
    extent)."""
    dots = dot_axes(spec)
    choices = {}
    for name, over in tile_params(spec).items():
        extent = max(sizes[a.dim.id] for a in over)
        dot = any(a.name.id in dots for a in over)
        unmasked = any(a.bounds == "unmasked" for a in over)
        floor = DOT_MIN if dot else 1
        small = max(floor, _previous_power_of_two(extent // 4))
        large = extent if unmasked else _next_power_of_two(extent + 1)
        if unmasked:
            unmasked_extent = min(sizes[a.dim.id] for a in over if a.bounds == "unmasked")
            if not _power_of_two(large) or unmasked_extent % large:
                raise CannotDerive(f"{spec.path}: unmasked extent {unmasked_extent} of {name} is not a power of two")
        large = max(large, floor)
        mid = max(floor, min(large // 2, 2 * small))
        choices[name] = {"small": small, "large": large, "mid": mid}
    return choices


def _untuned_settings(spec: m.Spec, sizes: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """(label, launcher block keywords) of an untuned spec: every block small; every block
    large; the two alternations of small and large (so that a swapped pair of blocks shows);
    the spec's defaults; each block's middle value. Distinct settings only, at least three."""
    tiles = _tile_choices(spec, sizes)
    groups = group_params(spec)
    params = [p.name.id for p in spec.params]
    for name in params:
        if name not in tiles and name not in groups:
            raise CannotDerive(f"{spec.path}: block parameter {name} neither tiles an axis nor sizes a swizzle group")
    defaults = {p.name.id: int(p.default.text) for p in spec.params if p.default is not None}
    order = [n for n in params if n in tiles]
    plans = [
        dict.fromkeys(order, "small"),
        dict.fromkeys(order, "large"),
        {n: ("large" if i % 2 == 0 else "small") for i, n in enumerate(order)},
        {n: ("small" if i % 2 == 0 else "large") for i, n in enumerate(order)},
        None,  # the spec's defaults
        dict.fromkeys(order, "mid"),
    ]
    settings: list[dict[str, int]] = []
    for plan in plans:
        blocks = dict(defaults) if plan is None else {n: tiles[n][size] for n, size in plan.items()}
        blocks = {n: blocks[n] for n in order if n in blocks}
        if blocks not in settings:
            settings.append(blocks)
    if order and len(settings) < 3:
        raise CannotDerive(f"{spec.path}: fewer than three distinct block settings for {order}: {settings}")
    out = []
    for index, blocks in enumerate(settings):
        for name in sorted(groups & set(params)):
            group = GROUPS[index % len(GROUPS)]
            blocks[name] = defaults[name] if group is None else group
        out.append((",".join(f"{k}={v}" for k, v in blocks.items()), blocks))
    return out


def _tuned_picks(spec: m.Spec, pointers: bool) -> list[int]:
    """Indices of the tune configs to force: the default config, then for each tuned block the
    first config with its smallest and the first with its largest value (row pieces included
    through TMA), distinct block settings only; at least three where the spec has three.
    ``pointers``: only configs the pointer kernel runs (every block a power of two)."""
    configs = spec.tune.configs
    default = configs.index(spec.default_config())
    runnable = [
        i for i in [default, *range(len(configs))]
        if not pointers or all(_power_of_two(v) for v in config_blocks(spec, configs[i]).values())
    ]
    if not runnable:
        raise CannotDerive(f"{spec.path}: no tune config to run")
    extremes = [runnable[0]]
    for name in spec.tuned_params:
        values = {i: config_blocks(spec, configs[i])[name] for i in runnable if name in config_blocks(spec, configs[i])}
        if values:
            extremes.append(min(values, key=lambda i: (values[i], i)))
            extremes.append(min(values, key=lambda i: (-values[i], i)))
    chosen: list[int] = []
    seen: set[tuple] = set()
    for index in extremes + runnable:  # the runnable ones only while fewer than three are distinct
        key = tuple(sorted(config_blocks(spec, configs[index]).items()))
        if key in seen:
            continue
        if len(chosen) >= 3 and index not in extremes:
            break
        seen.add(key)
        chosen.append(index)
    return chosen


@dataclass(frozen=True)
class _Run:
    """One setting of a spec before dtypes, choices and signs are spread over the runs."""

    label: str
    keywords: dict
    config: int | None
    blocks: dict[str, int]
    variant: str = ""
    shape: str = ""
    scale: int = 0


def _settings(spec: m.Spec, variant: str, sizes: dict[str, int]) -> list[_Run]:
    """The block settings of ``spec`` for ``variant`` (see :func:`cases_for`)."""
    if spec.tune is not None:
        groups = group_params(spec) - set(spec.tuned_params)
        defaults = {p.name.id: int(p.default.text) for p in spec.params if p.default is not None}
        runs = []
        for position, index in enumerate(_tuned_picks(spec, pointers=variant == "pointers")):
            blocks = config_blocks(spec, spec.tune.configs[index])
            keywords = {}
            for name in sorted(groups):  # launcher keywords beside the tuned blocks
                group = GROUPS[position % len(GROUPS)]
                keywords[name] = defaults[name] if group is None else group
            label = f"config{index}:" + ",".join(f"{k}={v}" for k, v in {**blocks, **keywords}.items())
            runs.append(_Run(label, keywords, index, {**blocks, **keywords}, variant))
        return runs
    if tile_params(spec) or group_params(spec):
        return [_Run(label, keywords, None, keywords, variant) for label, keywords in _untuned_settings(spec, sizes)]
    return []


def cases_for(path: Path) -> list[Case]:
    """Every case of the spec at ``path`` (see :class:`Case`): per variant (TMA-aligned rows and
    odd rows for a spec that reads through descriptors), each block setting (forced tune configs,
    or launcher keywords) at the regular sizes (compact ones where the settings would take more
    than STEP_BUDGET tile steps, narrow ones where compact ones still would, and where even those
    would and the spec has index loops, the first setting alone at tiny sizes), the first setting at
    tiny sizes, and, for a spec whose launcher
    splits loops or tails, each setting at sizes that make it split; a spec without blocks at
    three sizes and tiny ones. Dtypes, choices and the scalars' sign rotate over the cases, each
    dtype and option at least once. Raises CannotDerive (or the checker's SpecError) where the
    harness cannot run the spec."""
    spec = checked(path)
    relative = path.relative_to(ROOT).as_posix()
    stem = relative.removesuffix(".tile")
    kernel = spec.name.id
    runs: list[_Run] = []
    for variant in ["tma", "pointers"] if uses_tma(spec) else [""]:
        shape = ""
        settings = _settings(spec, variant, derive_sizes(spec, variant))
        index_loops = any(isinstance(s, m.Loop) and s.axis.is_index for s in m.statements(spec.body)) or any(
            later_factor(a, f.name.id) for a in spec.axes() if a.extent is not None
            for f in m.subexpressions(a.extent) if isinstance(f, m.Ref))  # or a loop over C * KH * KW
        if (spec.tune is None or index_loops) and settings:  # a convolution's taps: work per program
            if steps(spec, derive_sizes(spec, variant), settings) > STEP_BUDGET:
                for shape in ("compact", "narrow"):
                    smaller = derive_sizes(spec, variant, shape=shape)
                    settings = _settings(spec, variant, smaller)
                    if steps(spec, smaller, settings) <= STEP_BUDGET:
                        break
                else:
                    if index_loops:  # still too long for the interpreter: one setting, tiny
                        settings, shape = settings[:1], "tiny"
        if not settings:  # no blocks at all: the tiles follow the sizes, so the sizes vary
            for scale in range(len(WHOLE_EXTENTS)):
                sizes = derive_sizes(spec, variant, scale)
                label = "sizes:" + ",".join(f"{k}={v}" for k, v in sizes.items())
                runs.append(_Run(label, {}, None, {}, variant, "", scale))
            runs.append(_Run("sizes", {}, None, {}, variant, "tiny"))
            continue
        runs += [_Run(r.label, r.keywords, r.config, r.blocks, variant, shape) for r in settings]
        first = settings[0]
        runs.append(_Run(first.label, first.keywords, first.config, first.blocks, variant, "tiny"))
        for extra, wanted in (("split-k", bool(split_loop_dims(spec))), ("split-tail", bool(spec.split_tail))):
            if wanted:
                runs += [_Run(r.label, r.keywords, r.config, r.blocks, variant, extra) for r in settings]
    bindings = spec.bindings()
    choices = [(c.name.id, [o.id for o in c.options]) for c in spec.choices]
    count = max([len(runs), len(bindings)] + [len(options) for _, options in choices])
    cases = []
    for position in range(count):
        run = runs[position % len(runs)]
        keywords = dict(run.keywords)
        for name, options in choices:
            keywords[name] = options[position % len(options)]
        binding = bindings[position % len(bindings)]
        parts = [stem, *(f"{k}={v}" for k, v in binding.items()), run.label]
        parts += [f"{name}={keywords[name]}" for name, _ in choices]
        parts += [word for word in (run.variant, run.shape) if word and word != "compact"]
        case_id = "-".join(parts)
        if position >= len(runs):  # a repeated run for a dtype or option: its own id
            case_id += f"-again{position // len(runs)}"
        sizes = derive_sizes(spec, run.variant, run.scale, run.shape, run.blocks)
        cases.append(Case(
            path=relative, kernel=kernel, id=case_id, sizes=sizes, keywords=keywords, config=run.config,
            binding=binding, variant=run.variant, sign=1 if position % 2 == 0 else -1,
            seed=zlib.crc32(case_id.encode()),
        ))
    ids = [case.id for case in cases]
    if len(set(ids)) != len(ids):
        raise CannotDerive(f"{spec.path}: two cases with one id: {sorted(i for i in ids if ids.count(i) > 1)}")
    return cases
