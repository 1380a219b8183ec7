"""What the checker guarantees of a spec, as types: look-ups that cannot fail on a checked spec.

The model answers ``None`` where a name is unknown (:meth:`tilegen.model.Spec.tensor`,
:func:`tilegen.functions.lookup`) or a part is optional (an axis's ``block``), because the
checker asks those questions of specs that may be wrong. The lowering reads checked specs
only, where every tensor an access names is declared, every call resolves and a tiled axis has
its block; these functions say so once (:func:`tilegen.functions.function_of` says it of a
call), and fail loudly (``AssertionError``) should the checker ever let such a spec through.
"""

from __future__ import annotations

from tilegen import model as m


def tensor_of(spec: m.Spec, name: str) -> m.Tensor:
    """The tensor ``name`` that ``spec`` declares."""
    found = spec.tensor(name)
    assert found is not None, f"{spec.name.id} declares no tensor '{name}'"
    return found


def block_of(axis: m.Axis) -> str:
    """The block parameter of a tiled axis (``BM`` of ``m over M by BM``): a ``whole`` or index
    axis has none."""
    assert axis.block is not None, f"axis '{axis.name.id}' has no block"
    return axis.block.id


def default_of(param: m.Param) -> str:
    """The default of a parameter, as written: every parameter has one but a tuned spec's
    ``block BM``, which its configs set."""
    assert param.default is not None, f"'{param.name.id}' has no default"
    return param.default.text
