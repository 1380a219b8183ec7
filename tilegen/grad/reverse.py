"""The backward of a row kernel by reverse-mode differentiation (see :mod:`tilegen.grad`): the
forward recomputed, each value's adjoint in reverse order, the gradients' stores, and the
backward's declarations.
"""

from __future__ import annotations

import re

from tilegen import model as m
from tilegen.check.tuning import setting_value
from tilegen.grad.adjoint import Adjoint, Value, read_text, total_of
from tilegen.grad.declarations import NoBackward, backward_name, declarations, declared, float_tensor
from tilegen.grad.gradients import Gradients
from tilegen.spec_text import expr_text, index_text, safe_path


def derive_backward(spec: m.Spec, name: str | None = None) -> str:
    """The ``.tile`` text of the backward of the checked ``spec``, kernel ``name`` (default
    :func:`backward_name`). It takes ``d<out>`` for each float output, then the forward's inputs it
    reads; it returns ``d<in>`` for each float tensor input that reaches a float output, in the
    inputs' dtypes, computed in float32. Raises :class:`NoBackward` where the forward has a
    construct without a rule (see the module's docstring)."""
    return Deriver(spec, name or backward_name(spec.name.id)).text()


class Deriver(Gradients):
    """One derivation: the forward's values (hoisted), then the reverse pass, then the text."""

    def text(self) -> str:
        self.refuse()
        stores: list[tuple[m.Store, m.Expr]] = []
        self.taken |= {s.name.id for s in self.spec.body if isinstance(s, m.Assign)}  # no hoisted value takes one
        for stmt in self.spec.body:
            match stmt:
                case m.Assign():
                    value = self.hoist(stmt.value, stmt.span, top=True)
                    self.taken.add(stmt.name.id)
                    self.define(stmt.name.id, value)
                case m.Store():  # (refuse leaves assignments and stores)
                    stores.append((stmt, self.hoist(stmt.value, stmt.span)))
                case _:  # (refuse leaves assignments and stores only)
                    pass
        # a float output stored at the grid's axes: its value, which the backward may read back (saved)
        self.saved = {m.expr_key(value): (store, value) for store, value in stores
                      if float_tensor(self.tensor(store.tensor.id))
                      and all(isinstance(i, m.Name) and i.id in self.axes for i in store.index)}
        seeds: list[m.Tensor] = []
        for store, value in stores:
            tensor = self.tensor(store.tensor.id)
            if not float_tensor(tensor) or not self.is_active(value):
                continue
            grad = "d" + tensor.name.id
            index = ", ".join(index_text(i) for i in store.index)
            seeds.append(tensor)
            axes = frozenset(i.id for i in store.index if isinstance(i, m.Name) and i.id in self.axes)
            self.visit(value, Adjoint(f"f32({grad}[{index}])" if store.index else f"f32({grad})", axes))
        if not seeds:
            raise NoBackward("no float output depends on a float input (other than through 'detach')",
                             stores[0][0].span if stores else None)
        seeds = [t for t in self.spec.outputs if t in seeds]  # in the order the outputs are declared
        lines = self.lines
        for held in reversed(self.values):
            terms = self.adjoints.get(held.name)
            if not terms:
                continue
            own = set(self.local_axes[held.name])
            terms = [self.reduced(t, tuple(own)) for t in terms]
            if len({t.axes - own for t in terms}) > 1:  # broadcast along other grid axes: each summed on its own
                terms = [self.total(t, own, "d" + held.name) if t.axes - own else t for t in terms]
            total = total_of(terms)
            adjoint = self.fresh("d" + held.name)
            lines.append(f"{adjoint} = {total.text}")
            self.local_axes[adjoint] = tuple(total.axes)
            self.visit(held.expr, Adjoint(adjoint, total.axes, total.implicit))
        stores_text = self.store_gradients()
        lines[:] = _live(lines, stores_text)
        self.read_back = self.saved_values()
        used = self.used_values(lines + stores_text)
        self.read_outputs |= {self.read_back[name].tensor.id for name in used if name in self.read_back}
        body = [f"{v.name} = {self.value_text(v)}" for v in self.values if v.name in used]
        statements = body + lines + stores_text
        return self.header(seeds, used, lines + stores_text) + "".join(f"  {line}\n" for line in statements)

    def saved_values(self) -> dict[str, m.Store]:
        """The assigned values the forward stores exactly (a float32 row statistic, ``mu[r] =
        row_mean``: of :attr:`saved`, those whose output has the value's dtype and whose index is
        the value's axes): the backward reads them back from the output, saved by autograd,
        instead of recomputing them (layer norm's mean and rstd, two reductions of each row).
        Their adjoints still follow the expressions that computed them. Name -> the store."""
        found: dict[str, m.Store] = {}
        for store, value in self.saved.values():
            if not isinstance(value, m.Ref) or value.name.id not in self.local_axes:
                continue
            exact = self.tensor(store.tensor.id).dtype.id == self.local_dtypes.get(value.name.id)
            index = {i.id for i in store.index if isinstance(i, m.Name)}  # (all of it: see saved)
            if exact and index == set(self.local_axes[value.name.id]):
                found[value.name.id] = store
        return found

    def value_text(self, value: Value) -> str:
        """The text a value's line of the backward computes it by: its read-back output, if any."""
        store = self.read_back.get(value.name)
        return read_text(store) if store is not None else expr_text(value.expr)

    def used_values(self, lines: list[str]) -> set[str]:
        """The values the backward's ``lines`` read, directly or through other values."""
        words = _words(" ".join(lines))
        by_name = {v.name: v for v in self.values}
        used: set[str] = set()
        todo = [w for w in words if w in by_name]
        while todo:
            name = todo.pop()
            if name in used:
                continue
            used.add(name)
            if name in self.read_back:  # read from its output: nothing recomputed
                continue
            todo += [e.name.id for e in m.subexpressions(by_name[name].expr) if isinstance(e, m.Ref)
                     and e.name.id in by_name]
        return used

    def wider_configs(self) -> list[str]:
        """Configs the backward adds to the forward's where a gradient is summed across programs
        along a tiled axis (a weight's, over the rows): that axis's block at 2 and 4 times the
        configs' largest, with their most warps, so that fewer programs each store a partial sum
        (as the hand-written rms_norm_backward's configs do)."""
        if self.spec.tune is None:
            return []
        tune = self.spec.tune
        if self.walk_rows():  # a persistent walk: few partials already
            return self.pipelined_configs(tune)
        lines: list[str] = []
        for axis in self.spec.grid:
            if axis.name.id not in self.across or axis.block is None:  # (the axes in across have a block)
                continue
            block = axis.block.id
            values = [int(v.text) for c in tune.configs if (v := c.get(block)) is not None]
            warps = [int(w.text) for c in tune.configs if (w := c.get("num_warps")) is not None]
            if not values or any(len(c.settings) > 2 for c in tune.configs):
                continue  # the block is not tuned alone (with num_warps): leave the configs as written
            most = max(warps, default=4)
            for factor in (2, 4):
                setting = f"{block} = {max(values) * factor}"
                lines.append(f"    config {setting}" + (f", num_warps = {most}" if warps else "") + "\n")
            lines[-2:] = ["    # more rows a program: fewer partial sums of the gradients summed across programs\n",
                          *lines[-2:]]
        return lines

    def header(self, seeds: list[m.Tensor], used: set[str], lines: list[str]) -> str:
        spec = self.spec
        words = _words(" ".join(lines + [self.value_text(v) for v in self.values if v.name in used]))
        ins = [f"  in  d{t.name.id}: {declared(t)}\n" for t in seeds]
        needed = [t for t in spec.inputs if t.name.id in words]
        sizes = {d.id for t in seeds + needed for d in t.dims if isinstance(d, m.Name)}
        sizes |= {t.name.id for t in needed if t.is_scalar}
        wanted = [a.dim.id for a in spec.grid if a.extent is None and not a.literal]
        wanted += [n for a in spec.grid if a.extent is not None for n in m.offset_names(a.extent)]
        # a scatter-added gradient's dimensions (V of dweight[idx[t], c]): the input's, read for its shape
        wanted += [d.id for t in spec.inputs if t.name.id in self.scatters for d in t.dims if isinstance(d, m.Name)]
        for name in wanted:  # a size (or a scalar the grid is over) that no input taken so far gives
            if name in sizes:
                continue
            extra = next((t for t in spec.inputs if (t.is_scalar and t.name.id == name)
                          or any(isinstance(d, m.Name) and d.id == name for d in t.dims)), None)
            if extra is None:
                raise NoBackward(f"the grid's size '{name}' comes from no input of the backward")
            needed.append(extra)
            sizes |= {d.id for d in extra.dims if isinstance(d, m.Name)} | {extra.name.id}
        taken = [t for t in spec.inputs if t in needed] + [t for t in spec.outputs if t.name.id in self.read_outputs]
        taken.sort(key=lambda t: t.default is not None or t.optional)  # inputs with defaults last, as declared
        ins += [f"  in  {t.name.id}: {declared(t)}\n" for t in taken]
        outs = [f"  out d{t.name.id}: f32{declared(t, False).removeprefix(m.as_written(t.dtype))} = 0\n"  # atomics
                if t.name.id in self.scatters else f"  out d{t.name.id}: {declared(t, False)}\n"
                for t in spec.inputs if t.name.id in self.gradients]
        saved = [t.name.id for t in spec.outputs if t.name.id in self.read_outputs]
        source = "its inputs" + (f" and its output{'s' if len(saved) > 1 else ''} {', '.join(saved)}" if saved else "")
        return (f"# The backward of {safe_path(spec.path)}, derived by tilegen (tilegen show --grad): the forward\n"
                f"# recomputed from {source}, then each value's adjoint, in reverse order.\n"
                f"kernel {self.name}\n" + "".join(declarations(spec, ins + outs, self.wider_configs(),
                                                                rewrite=self.persistent_rows)))

    def pipelined_configs(self, tune: m.Tune) -> list[str]:
        """A persistent backward's added configs: the forward's configs (``tune``'s) of its largest row block,
        again with ``num_stages = 2``, so that a program loads its next row tile while it
        computes this one (on the H100 the hand-written norm backwards' best configs were so,
        ``c43ff28:benchmarks/explore/explore_persistent_norm_h100.log``)."""
        block = next(a.block.id for a in self.spec.grid if a.bounds != "whole" and a.block is not None)
        sized = [(c, int(v.text)) for c in tune.configs if (v := c.get(block)) is not None]
        if not sized or any(c.get("num_stages") is not None for c, _ in sized):
            return []
        largest = max(size for _, size in sized)
        lines = [f"    config {', '.join(f'{p.name.id} = {setting_value(p).text}' for p in c.settings)}, "
                 "num_stages = 2\n" for c, size in sized if size == largest]
        return ["    # a persistent program walks several row tiles: the next one's loads pipelined\n", *lines]

    def persistent_rows(self, word: str, line: str) -> str:
        """The grid line, made persistent (``grid  persistent r over M by BM, c over N whole``)
        where a gradient is summed across programs along the grid's one tiled axis beside whole
        ones: each program then walks row tiles and stores one partial of the sum, not one per row
        tile (on the H100, rms_norm's backward reaches 66% of DRAM peak so, against 46% with one per row tile)."""
        if word != "grid" or not self.walk_rows():
            return line
        return re.sub(r"^(\s*grid)\s+", r"\1  persistent ", line)

    def walk_rows(self) -> bool:
        """Whether the backward's grid is made persistent (:meth:`persistent_rows`): a plain grid
        of one tiled axis beside whole ones, along which a gradient is summed across programs."""
        spec = self.spec
        launched = [a for a in spec.grid if a.bounds != "whole"]
        rows = (len(launched) == 1 and launched[0].block is not None and not launched[0].is_index
                and launched[0].name.id in self.across)
        return rows and not spec.flat and not spec.persistent and spec.swizzle is None


def _words(text: str) -> set[str]:
    """The names spec text mentions (values, tensors, functions, axes)."""
    return set(re.findall(r"[A-Za-z_]\w*", text))


def _live(lines: list[str], stores: list[str]) -> list[str]:
    """The adjoint ``lines`` (``name = text``, in order) that the ``stores`` read, directly or
    through later lines: an adjoint every use of which another rule wrote out is dropped."""
    read = _words(" ".join(stores))
    kept = []
    for line in reversed(lines):
        target, text = line.split(" = ", 1)
        if target in read:
            kept.append(line)
            read |= _words(text)
    return kept[::-1]
