"""Tuning rules: the autotune key and the configs of a ``tune`` block. Reports to the
:class:`~tilegen.check.state.CheckState` it is given and raises nothing.
"""

from __future__ import annotations

from tilegen import model as m
from tilegen.check.state import CheckState, is_power_of_two


def setting_value(setting: m.Param) -> m.Number:
    """The value a config's setting gives (``128`` of ``config BM = 128``). The parser gives every
    setting one (only a ``block BM`` declaration leaves its value out); raises ValueError for a
    setting without one."""
    if setting.default is None:
        raise ValueError(f"config setting '{setting.name.id}' has no value")
    return setting.default


def check_tune(state: CheckState, tune: m.Tune) -> None:
    """``tune``: a key of distinct sizes (integer scalar inputs an axis runs over among them), at
    most one default and one interpreter config, no config listed twice,
    each setting once per config and of a block parameter or launch option, positive integers
    (a power of two for ``num_warps``), and every block parameter without a default set."""
    sizes = {d.id for t in state.spec.tensors for d in t.dims if isinstance(d, m.Name)}
    # an integer scalar input an axis runs over (l over L, with in L: i32) keys like a size
    extents = {n for a in state.spec.axes() for n in ([a.dim.id] + (m.offset_names(a.extent) if a.extent else []))}
    sizes |= {t.name.id for t in state.spec.inputs if t.is_scalar and t.name.id in extents
              and t.dtype.id not in m.FLOAT_DTYPES}
    for position, key in enumerate(tune.key):
        if any(earlier.id == key.id for earlier in tune.key[:position]):
            state.errors.error(f"'{key.id}' is in the autotune key twice", key.span)
        elif key.id not in sizes:
            state.errors.error(
                f"autotune key '{key.id}' is not a size; use dimensions such as {', '.join(sorted(sizes))}",
                key.span,
            )
    for role, marked in (("default", [c for c in tune.configs if c.default]),
                         ("interpreter", [c for c in tune.configs if c.interpreter])):
        for extra in marked[1:]:
            if extra.span == marked[0].span:  # one line: 'default config BM in [...]'
                state.errors.error(f"the {role} config gives one value per setting, not a list", extra.span)
                break
            state.errors.error(f"only one config can be the {role} config", extra.span)
    written: dict[frozenset[tuple[str, str]], m.Config] = {}
    for config in tune.configs:
        values = frozenset((s.name.id, setting_value(s).text) for s in config.settings)
        first = written.setdefault(values, config)
        one_line = (config.default and first.default) or (config.interpreter and first.interpreter)  # reported above
        if first is not config and not one_line:
            again = "again on its line" if first.span == config.span else f"as on line {first.span.line}"
            shown = ", ".join(f"{s.name.id} = {setting_value(s).text}" for s in config.settings)
            state.errors.error(f"config {shown} is listed twice ({again}); each config is timed once", config.span)
    for config in tune.configs:
        seen: set[str] = set()
        for setting in config.settings:
            name = setting.name.id
            if name in seen:
                state.errors.error(f"'{name}' is set twice in this config", setting.name.span)
            seen.add(name)
            if name not in state.params and name not in m.LAUNCH_OPTIONS:
                state.errors.error(
                    f"config sets '{name}', which is not a block parameter or one of "
                    f"{', '.join(m.LAUNCH_OPTIONS)}",
                    setting.name.span,
                )
            value = setting_value(setting)
            if not value.is_int or int(value.text) < 1:
                state.errors.error(f"'{name}' must be a positive integer, not {value.text}", value.span)
            elif name == "num_warps" and not is_power_of_two(int(value.text)):
                state.errors.error(f"num_warps = {value.text} is not a power of two", value.span)
        for param in state.spec.params:
            if param.default is None and param.name.id not in seen:
                state.errors.error(
                    f"this config leaves '{param.name.id}' unset, and it has no default", config.span
                )
