"""A ``deterministic`` kernel: its ``+=`` stores add in the order of their tokens.

``dweight[idx[t], c] += dy[t, c]`` adds by atomics, in an order the GPU picks; under
``deterministic`` each element's sum is ``start + v[t1] + v[t2] + ...`` with ``t1 < t2 < ...``,
added one token after another (in float32 for f16, bf16 and f32 outputs, rounded to the output's
dtype once), as torch's ``index_put_(..., accumulate=True)`` and ``index_add_`` add on the CPU:
the same bits at every block size, config and run. The scheme is the segment walk of
torch's deterministic embedding backward (sort the tokens by index, sum each run of equal
indices in one thread) on the tile grid:

* the launcher sorts the tokens by their index, stably (``_rt.sorted_runs``): ``order[j]`` is
  the token at sorted position ``j``, and ``run_end[j]`` the position past the end of the run of
  equal indices that starts at ``j`` (``j`` itself where none starts there);
* the kernel's axis ``t`` runs over sorted positions. Lane ``j`` of a program heads the run
  starting at ``j``, if any, and walks it: ``for step in range(0, tl.max(run_len_t, 0))``, each
  step loading the token ``order[j + step]`` as the lane's ``t`` and running the body on it,
  every ``+=`` store adding into a register accumulator (``acc_<y>``, started at the output's
  declared value) where a plain store would add atomically. After the walk each head lane
  stores its accumulator once, where its tokens' stores point (they share the index, so the
  element); a run whose tokens all fail the store's ``where`` stores the start value again.

Every token is one lane's step in one program (each sorted position belongs to one run), so
plain stores and loads through ``t`` see each token once, as before. A program takes as many
steps as its longest run: a repeated index (a padding token) walks serially, the price of a
fixed order. :func:`ordered_spec` adds the two inputs; :class:`OrderedWalk` writes the walk.
The checker's rules: :mod:`tilegen.check.ordered`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tilegen import model as m
from tilegen.check.ordered import sort_key
from tilegen.lower.names import stride_name, triton_dtype, tuple_text
from tilegen.lower.plan import Comment, ForLoop, Line, Op
from tilegen.lower.state import AxisInfo, KernelState


def ordered_spec(spec: m.Spec) -> m.Spec:
    """``spec`` (checked, ``deterministic``) with the inputs ``<t>_order`` and ``<t>_run_end``
    (i64 [N], N the extent of the axis ``t`` its ``+=`` stores scatter at) and its
    :class:`~tilegen.model.Ordered`: the kernel and launcher it is lowered to walk sorted tokens."""
    store = next(s for s in m.statements(spec.body) if isinstance(s, m.Store) and s.update == "add")
    key = sort_key(spec, store)
    assert key is not None, "the checker gives every '+=' store of a deterministic spec a sort key"
    index, axis = key
    dim = spec.tensor(index)
    assert dim is not None, "the sort key is an input"
    taken = {t.name.id for t in spec.tensors} | {s.name.id for s in m.statements(spec.body)
                                                  if isinstance(s, m.Assign | m.Declare)}

    def free(base: str) -> str:
        name = base
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    order, run_end = free(f"{axis}_order"), free(f"{axis}_run_end")
    i64 = m.Name("i64", spec.deterministic or store.span)
    added = tuple(m.Tensor("in", m.Name(name, dim.name.span), i64, dim.dims, dim.span) for name in (order, run_end))
    return dataclasses.replace(spec, tensors=(*spec.tensors, *added), ordered=m.Ordered(axis, index, order, run_end))


@dataclass
class OrderedWalk:
    """The walk of a deterministic kernel (:mod:`tilegen.lower.ordered`) as it is lowered: made
    after the grid's offsets, it renames the axis's offsets and mask to the walked token's (the
    body is lowered with them), collects each ``+=`` store's accumulator (:meth:`accumulate`),
    and wraps the body's ops in the walk (:meth:`wrap`)."""

    state: KernelState
    positions: str = ""  # the program's sorted positions (the grid's offs_t)
    grid_mask: str | None = None  # the grid's mask of them (None: an unmasked axis)
    run_len: str = ""  # steps each lane walks (0: no run starts at its position)
    step: str = ""
    before: list[Op] = field(default_factory=list)  # accumulators and carried pointers, started
    after: list[Op] = field(default_factory=list)  # the stores after the walk

    def __post_init__(self) -> None:
        state = self.state
        ordered = state.spec.ordered
        assert ordered is not None, "a walk of an ordered spec"
        info = state.axes[ordered.axis]
        self.positions, self.grid_mask = info.offs, info.mask
        self.run_len = state.fresh(f"run_len_{ordered.axis}")
        self.step = state.fresh("step")
        walked_offs = state.fresh(f"offs_{ordered.axis}")
        walked_mask = state.fresh(f"mask_{ordered.axis}")
        state.axes[ordered.axis] = AxisInfo(walked_offs, walked_mask, info.dim, info.tile, info.start, walked_offs,
                                            walked_mask, info.scalar)

    def _strided(self, name: str, offsets: str) -> str:
        tensor = self.state.spec.tensor(name)
        assert tensor is not None, "the walk's inputs are the spec's"
        return f"{name}_ptr + ({offsets}) * {stride_name(tensor, 0)}"

    @staticmethod
    def sum_dtype(tensor: m.Tensor) -> str:
        """The Triton dtype a run's sum into ``tensor`` is kept in: float32 for f16, bf16 and f32
        outputs (rounded to the output's dtype once, at its store), else the output's own."""
        return "tl.float32" if tensor.dtype.id in ("f16", "bf16", "f32") else triton_dtype(tensor.dtype)

    def accumulate(self, stmt: m.Store, context: tuple[str, ...], ptr: str, mask: str, guard: str | None,
                   value: str) -> list[Op]:
        """The ``+=`` store ``stmt`` at one step of the walk: ``value`` (a tile over ``context``, in
        :meth:`sum_dtype`) added into its accumulator where ``mask`` (the lanes inside the output)
        and ``guard`` (its ``where``) hold; the element ``ptr`` points at carried for the store
        after the walk."""
        state = self.state
        tensor = state.spec.tensor(stmt.tensor.id)
        assert tensor is not None and tensor.initial is not None, "the checker gives a '+=' output its start"
        dtype, written = self.sum_dtype(tensor), triton_dtype(tensor.dtype)
        shape = tuple_text(state.axes[a].tile for a in context)
        acc, ptrs, inside = (state.fresh(f"{base}_{tensor.name.id}") for base in ("acc", "run_ptrs", "run_mask"))
        start = f"tl.full({shape}, {tensor.initial.text}, dtype={written})"  # the start as the output holds it
        self.before += [
            Line(f"{acc} = {start}" if written == dtype else f"{acc} = {start}.to({dtype})"),
            Line(f"{ptrs} = {tensor.name.id}_ptr + tl.zeros({shape}, dtype=tl.int32)"),
            Line(f"{inside} = tl.zeros({shape}, dtype=tl.int1)"),
        ]
        adds = f"{mask} & ({guard})" if guard else mask
        rounded = acc if written == dtype else f"{acc}.to({written})"
        self.after.append(Line(f"tl.store({ptrs}, {rounded}, mask={inside})"))
        return [
            Line(f"{acc} = tl.where({adds}, {acc} + {value}, {acc})"),
            Line(f"{ptrs} = tl.where({mask}, {ptr}, {ptrs})"),
            Line(f"{inside} = {inside} | ({mask})"),
        ]

    def wrap(self, body: list[Op]) -> list[Op]:
        """``body`` (the statements' ops, lowered with the walked token's offsets) inside the walk."""
        state = self.state
        ordered = state.spec.ordered
        assert ordered is not None, "a walk of an ordered spec"
        info = state.axes[ordered.axis]
        run_end = self._strided(ordered.run_end, self.positions)
        if self.grid_mask:
            loaded = f"tl.load({run_end}, mask={self.grid_mask}, other=0)"
            run_len = f"tl.where({self.grid_mask}, {loaded} - {self.positions}, 0)"
        else:
            run_len = f"tl.load({run_end}) - {self.positions}"
        steps = [
            Line(f"{info.mask} = {self.step} < {self.run_len}"),
            Line(f"{info.offs} = tl.load({self._strided(ordered.order, f'{self.positions} + {self.step}')}, "
                 f"mask={info.mask}, other=0)"),
        ]
        return [
            Comment(f"deterministic: lane j is the j-th token sorted by {ordered.key}; the lane where a run of "
                    "equal indices starts walks it in order"),
            Line(f"{self.run_len} = {run_len}"),
            *self.before,
            ForLoop(self.step, f"range(0, tl.max({self.run_len}, 0))", (*steps, *body)),
            *self.after,
        ]
