"""Hostile specs: names that try to clash with Python or with the generated module, and
comments that try to break out of the generated header's ``#`` lines.

A name that would shadow or break generated code must be refused as reserved; comment text,
whatever it holds, must stay inside comment lines and leave the module's code unchanged.
"""

from __future__ import annotations

import ast
import io
import keyword
import re
import tokenize
import warnings
from pathlib import Path

import pytest
import torch

from tilegen.check import KEYWORDS
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.lower import spec_hash
from tilegen.runner import load_module

PATH = "hostile.tile"

# --------------------------------------------------------------------------- names

#: A spec with every kind of name, each a placeholder: kernel, tensors, scalar, dimension,
#: block, grid axis, swizzle group and alias, choice, declared tile, loop axis, local.
FULL = """\
kernel {kernel}
  in  {tin}: f16[{dim}, K]
  in  b: f16[K, N]
  in  {scalar}: f32
  out {tout}: f16[{dim}, N]
  block {block} = 16, BN = 16, BK = 16
  grid  {gaxis} over {dim} by {block}, n over N by BN
  swizzle {gaxis}, n group {group} = 4 as {alias}, sn
  choose {choice} from none, relu
  {decl}: f32[{gaxis}, n] = 0
  for {laxis} over K by BK
    {decl} += dot({tin}[{gaxis}, {laxis}], b[{laxis}, n])
  {tout}[{alias}, sn] = {choice}({scalar} * {decl})
"""
DEFAULTS = {
    "kernel": "k", "tin": "a", "scalar": "alpha", "tout": "c", "dim": "M", "block": "BM", "gaxis": "m", "group": "G",
    "alias": "sm", "choice": "act", "decl": "acc", "laxis": "kk",
}
POSITIONS = list(DEFAULTS)


def full_spec(**names) -> str:
    return FULL.format(**{**DEFAULTS, **names})


#: Words of the .tile language. Its lexer is contextual: where only a name can come (after
#: ``kernel``, ``in``, ``out``, in declarations) a language word is read as a name.
LANGUAGE_WORDS = sorted(KEYWORDS)

PYTHON_KEYWORDS = sorted(set(keyword.kwlist) - set(LANGUAGE_WORDS))
SOFT_KEYWORDS = sorted(keyword.softkwlist)
DUNDERS = ["__import__", "__builtins__", "__name__", "__file__", "__class__"]
PRIVATE = ["_check_input", "_check_device", "_INTERPRET", "_CONFIGS", "_x", "_"]
GENERATED = ["tl", "triton", "torch", "os", "warnings", "grid", "reference", "device", "launch", "int64",
             "relu", "gelu", "sigmoid", "silu", "leaky_relu", "dot", "apply_x", "apply_act", "meta",
             "op", "threading", "wrap_triton", "name"]  # the custom op: module attribute, imports, namespace
#: The generated kernel function of the default kernel name ``k``.
OWN_KERNEL = "k_kernel"

#: Kernel names are module-level (``<name>``, ``<name>_kernel``): a word of the language is a
#: valid kernel name (``kernel swizzle``) unless it is a Python keyword (``kernel in``).
KERNEL_NAME_OK = {word for word in LANGUAGE_WORDS if not keyword.iskeyword(word)}

#: Names shaped like the kernel's own arguments are reserved in every position but the kernel.
ARGUMENT_SHAPED = ["x_ptr", "z_ptr", "N_ptr", "stride_x_n", "stride_z_n", "a_desc", "_x_strides"]


def _reserved_cases():
    cases = []
    for group, names in [
        ("keyword", PYTHON_KEYWORDS),
        ("soft", SOFT_KEYWORDS),
        ("dunder", DUNDERS),
        ("private", PRIVATE),
        ("generated", GENERATED),
        ("own-kernel", [OWN_KERNEL]),
        ("argument", ARGUMENT_SHAPED),
    ]:
        for name in names:
            for position in POSITIONS:
                if position == "kernel" and (group in ("own-kernel", "argument") or name in KERNEL_NAME_OK):
                    continue  # module-level names: kernel x_ptr defines x_ptr and x_ptr_kernel, no clash
                cases.append(pytest.param(name, position, id=f"{group}-{name}-{position}"))
    return cases


def test_full_spec_builds_with_default_names():
    module = compile_spec(full_spec(), PATH)
    compile(module.source, "gen.py", "exec")


@pytest.mark.parametrize("name,position", _reserved_cases())
def test_reserved_name_is_refused(name, position):
    with pytest.raises(SpecError) as info:
        compile_spec(full_spec(**{position: name}), PATH)
    assert info.value.render().startswith(f"{PATH}:")
    messages = [d.message for d in info.value.diagnostics]
    if name in LANGUAGE_WORDS and not any("is reserved" in message for message in messages):
        # where the lexer reads the word as a keyword, a syntax error is the refusal
        assert messages[0].startswith("unexpected"), messages
        return
    assert any(f"'{name}' is reserved" in message for message in messages), messages


def _word_cases():
    return [
        pytest.param(word, position, id=f"{word}-{position}")
        for word in LANGUAGE_WORDS
        for position in POSITIONS
        if not (position == "kernel" and word in KERNEL_NAME_OK)
    ]


@pytest.mark.parametrize("word,position", _word_cases())
def test_language_word_as_name_is_refused(word, position):
    """A word of the language is never a name: a syntax error, or refused as reserved."""
    with pytest.raises(SpecError) as info:
        compile_spec(full_spec(**{position: word}), PATH)
    assert info.value.render().startswith(f"{PATH}:")


@pytest.mark.parametrize("word", sorted(KERNEL_NAME_OK))
def test_language_word_is_a_valid_kernel_name(tmp_path, word):
    module = compile_spec(full_spec(kernel=word), PATH)
    compile(module.source, "gen.py", "exec")


#: A 1D spec whose input name is a placeholder; gelu(tanh) pulls in a module-level helper.
ONE_D = """\
kernel {kernel}
  in  {x}: f32[N]
  out z: f32[N]
  block BS = 16
  grid  i over N by BS
  z[i] = gelu({x}[i], approximate=tanh) + 1
"""


@pytest.mark.parametrize(
    "kernel,x",
    [
        ("k", "k"),  # the kernel's name as a tensor name: the launcher's argument shadows it
        ("x", "x"),
        ("k", "pid_i"), ("k", "offs_i"), ("k", "mask_i"), ("k", "x_pt"), ("k", "strides_x"),
        ("k", "gelu_tanh"), ("k", "cdiv"),
        ("k", "copy"), ("k", "approximate"), ("k", "z_value"), ("k", "rows"),
        ("k", "kernel_"), ("k", "K_kernel"),
    ],
)
def test_names_near_generated_ones_build_and_match_reference(tmp_path, kernel, x):
    module = compile_spec(ONE_D.format(kernel=kernel, x=x), PATH)
    path = tmp_path / f"{module.kernel}_{x}.py"
    path.write_text(module.source, encoding="utf-8")
    loaded = load_module(path)
    data = torch.linspace(-3, 3, 37)
    torch.testing.assert_close(getattr(loaded, kernel)(data), loaded.reference(data), atol=1e-5, rtol=1e-5)


#: Two inputs; the second input's name or the size's name is the placeholder.
TWO_IN = """\
kernel k
  in  x: f32[{dim}]
  in  {y}: f32[{dim}]
  out z: f32[{dim}]
  block BS = 16
  grid  i over {dim} by BS
  z[i] = x[i] * 2 + {y}[i]
"""


def _builtins_used_by_generated_modules() -> list[str]:
    """Builtins the committed generated modules name (``type``, ``isinstance``, ``ValueError``,
    ...) and the checker does not reserve: a spec name equal to one must not break a module."""
    import builtins

    from tilegen.check import RESERVED

    root = Path(__file__).resolve().parent.parent / "generated"
    used = set()
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id in dir(builtins):
                used.add(node.id)
    return sorted(used - RESERVED)


def test_every_builtin_the_generated_modules_use_is_reserved():
    """Launchers call isinstance, type, abs, min, ValueError, ... inline: a spec name equal to
    one would shadow it, so the checker reserves every builtin."""
    assert _builtins_used_by_generated_modules() == []


def _builtin_cases():
    return [pytest.param(name, position, id=f"{name}-{position}")
            for name in ("type", "isinstance", "ValueError", "abs", "min") for position in ("tensor", "dim")]


@pytest.mark.parametrize("name,position", _builtin_cases())
def test_builtin_names_are_refused_or_harmless(tmp_path, name, position):
    names = {"y": name, "dim": "N"} if position == "tensor" else {"y": "y", "dim": name}
    try:
        module = compile_spec(TWO_IN.format(**names), PATH)
    except SpecError as err:
        assert f"'{name}' is reserved" in err.render()
        return
    path = tmp_path / f"k_{name}_{position}.py"
    path.write_text(module.source, encoding="utf-8")
    loaded = load_module(path)
    x, y = torch.linspace(-3, 3, 37), torch.linspace(5, 6, 37)
    torch.testing.assert_close(loaded.k(x, y), loaded.reference(x, y))
    with pytest.raises(ValueError):
        loaded.k(x, y[:5])
    with pytest.raises(TypeError):
        loaded.k(x, y.double())
    with pytest.raises(ValueError):
        loaded.k(x, y, BS=3)


def test_duplicate_tensor_names_are_refused():
    text = """\
kernel k
  in  x: f32[N]
  in  x: f32[N]
  out z: f32[N]
  block BS = 16
  grid  i over N by BS
  z[i] = x[i]
"""
    with pytest.raises(SpecError) as info:
        compile_spec(text, PATH)
    assert "duplicate name 'x'" in info.value.render()
    assert info.value.diagnostics[0].span.line == 3


def test_output_named_like_input_is_refused():
    text = """\
kernel k
  in  x: f32[N]
  out x: f32[N]
  block BS = 16
  grid  i over N by BS
  x[i] = x[i]
"""
    with pytest.raises(SpecError) as info:
        compile_spec(text, PATH)
    assert "duplicate name 'x'" in info.value.render()


def test_names_longer_than_200_characters_build(tmp_path):
    kernel = "k" + "e" * 240
    x = "x" * 230
    dim = "N" * 210
    block = "B" * 205
    axis = "i" * 220
    text = f"""\
kernel {kernel}
  in  {x}: f32[{dim}]
  out z: f32[{dim}]
  block {block} = 16
  grid  {axis} over {dim} by {block}
  z[{axis}] = {x}[{axis}] * 2
"""
    module = compile_spec(text, PATH)
    assert module.kernel == kernel
    ast.parse(module.source)
    path = tmp_path / "long.py"
    path.write_text(module.source, encoding="utf-8")
    loaded = load_module(path)
    data = torch.arange(40, dtype=torch.float32)
    torch.testing.assert_close(getattr(loaded, kernel)(data), data * 2)


# --------------------------------------------------------------------------- comments

BASE = """\
kernel k
  in  x: f32[N]
  out z: f32[N]
  block BS = 16
  grid  i over N by BS
  z[i] = x[i]
"""
MARK = "PWNED"

TRICKS = {
    "triple-double": '"""',
    "triple-single": "'''",
    "backslash-eol": "\\",
    "cr": "\r",
    "crlf-in-text": "\r\x0b",
    "form-feed": "\x0c",
    "vertical-tab": "\x0b",
    "line-separator": "\u2028",
    "paragraph-separator": "\u2029",
    "next-line": "\u0085",
    "nul": "\x00",
    "escape": "\x1b[2J",
    "bom": "\ufeff",
    "system": 'import os; os.system("echo pwned")',
    "system-after-quote": '"""; import os; os.system("echo pwned"); """',
    "newline-escape": "\\n import os",
    "jinja": "{{ plan }}{% raw %}{#",
    "fstring": "{__import__('os').system('echo pwned')}",
    "tab": "\t",
}


def _placements(trick: str) -> dict[str, str]:
    payload = f"{MARK}{trick}{MARK}"
    lines = BASE.splitlines(keepends=True)
    return {
        "first-line": f"# {payload}\n" + BASE,
        "between-lines": "".join(lines[:3]) + f"# {payload}\n" + "".join(lines[3:]),
        "indented": "".join(lines[:5]) + f"  # {payload}\n" + "".join(lines[5:]),
        "trailing": BASE.replace("z[i] = x[i]\n", f"z[i] = x[i]  # {payload}\n"),
        "last-line-no-newline": BASE + f"# {payload}",
    }


def _comment_cases():
    cases = []
    for trick_name, trick in TRICKS.items():
        for place in _placements(trick):
            cases.append(pytest.param(trick, place, id=f"{trick_name}-{place}"))
    return cases


#: Names the generated modules call; a comment must not add any.
SUSPICIOUS_CALLS = {"system", "popen", "exec", "eval", "compile", "__import__", "open", "getattr", "spawn"}
# importlib.util, sys: the loading of tilegen's runtime beside the module (_runtime)
ALLOWED_IMPORTS = {"os", "threading", "torch", "torch.library", "triton", "triton.language", "warnings", "math",
                   "importlib.util", "sys"}


def _called_names(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.append(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "?"))
    return names


def _imports(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


def _assert_marker_only_in_comments(source: str) -> None:
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    in_comments = sum(t.string.count(MARK) for t in tokens if t.type == tokenize.COMMENT)
    elsewhere = [t for t in tokens if t.type != tokenize.COMMENT and MARK in t.string]
    assert not elsewhere, elsewhere
    assert in_comments == source.count(MARK)
    for line in source.splitlines():
        if MARK in line:
            assert line.lstrip().startswith("#"), line


BASELINE = compile_spec(BASE, PATH).source
# what the baseline calls of these (none: register_op is tilegen's runtime's), and nothing an input could add
BASELINE_SUSPICIOUS = SUSPICIOUS_CALLS & set(_called_names(ast.parse(BASELINE)))


def _code(source: str, spec_text: str) -> str:
    """The AST of a generated module with its spec hash (a string literal: the op's identity and
    the tune cache's name) made neutral: a comment changes the hash, never the code."""
    return ast.dump(ast.parse(source.replace(spec_hash(spec_text), "0" * 16)))


@pytest.mark.parametrize("trick,place", _comment_cases())
def test_comment_text_stays_in_comments(trick, place):
    text = _placements(trick)[place]
    module = compile_spec(text, PATH)
    source = module.source
    tree = ast.parse(source)
    compile(source, "gen.py", "exec")
    compile(source.encode("utf-8"), "gen.py", "exec")
    # The comment changes comments only: the code is the baseline's, node for node.
    assert _code(source, text) == _code(BASELINE, BASE)
    assert SUSPICIOUS_CALLS & set(_called_names(tree)) <= BASELINE_SUSPICIOUS
    assert _imports(tree) <= ALLOWED_IMPORTS
    _assert_marker_only_in_comments(source)
    # A spec no file holds (a derived backward's; here a path without .tile) is echoed in the
    # header, made printable: the marker is there, in comments only.
    echoed = compile_spec(text, PATH.removesuffix(".tile")).source
    _assert_marker_only_in_comments(echoed)
    assert MARK in echoed


def test_coding_cookie_in_spec_does_not_reach_the_module_header():
    text = "# -*- coding: latin-1 -*-\n# vim: set fileencoding=latin-1 :\n# caf\u00e9 \u540d\n" + BASE
    source = compile_spec(text, PATH).source
    cookie = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
    assert not any(cookie.match(line) for line in source.splitlines()[:2])
    # Compiled as the bytes of the written file: still the baseline code.
    baseline = BASELINE.replace(spec_hash(BASE), spec_hash(text))
    assert ast.dump(ast.parse(source.encode("utf-8"))) == ast.dump(ast.parse(baseline))


def test_hostile_module_imports_without_side_effects(tmp_path, capfd):
    text = "\n".join(
        f"# {MARK}{trick}{MARK}" for trick in TRICKS.values()
    ) + "\n" + BASE.replace("z[i] = x[i]\n", 'z[i] = x[i]  # """; import os; os.system("echo pwned")\n')
    module = compile_spec(text, PATH)
    path = tmp_path / "k.py"
    path.write_text(module.source, encoding="utf-8")
    loaded = load_module(path)
    data = torch.arange(20, dtype=torch.float32)
    assert torch.equal(loaded.k(data), data)
    assert "pwned" not in capfd.readouterr().out


# Lark counts lines by "\n" only; str.splitlines() also splits at \r, \v, \f, \x1c-\x1e,
# \x85, \u2028 and \u2029. tilegen takes spec lines the parser's way (model.source_lines), so
# such a character in a comment does not shift the quoted lines.
LINE_BREAKERS = {"cr": "\r", "form-feed": "\x0c", "vertical-tab": "\x0b", "line-separator": "\u2028",
                 "next-line": "\u0085", "file-separator": "\x1c"}
def _lines_by_newline(text: str) -> list[str]:
    return text.split("\n")


@pytest.mark.parametrize(
    "breaker", [pytest.param(v, id=k) for k, v in LINE_BREAKERS.items()]
    + [pytest.param("\t", id="tab-control")],
)
def test_kernel_comments_quote_the_line_they_name(breaker):
    from tilegen.lower.names import printable

    text = f"# a{breaker}b\n" + BASE
    source = compile_spec(text, PATH).source
    spec_lines = _lines_by_newline(text)
    quoted = re.findall(rf"# {re.escape(PATH)}:(\d+): (.*)", source)
    assert quoted
    for number, line in quoted:
        assert line == printable(spec_lines[int(number) - 1]), (number, line)


@pytest.mark.parametrize(
    "breaker", [pytest.param(v, id=k) for k, v in LINE_BREAKERS.items()]
    + [pytest.param("\t", id="tab-control")],
)
def test_error_report_quotes_the_line_it_names(breaker):
    text = f"# a{breaker}b\n" + BASE.replace("z[i] = x[i]", "z[i] = q[i]")
    with pytest.raises(SpecError) as info:
        compile_spec(text, PATH)
    head, quoted, _caret = info.value.render().splitlines()[:3]
    assert head.startswith(f"{PATH}:7:")
    assert quoted.strip() == "z[i] = q[i]"


def test_lone_surrogate_in_comment_is_a_spec_error_or_builds():
    text = "# \ud800\n" + BASE
    try:
        module = compile_spec(text, PATH)
    except SpecError as err:
        assert err.render().startswith(f"{PATH}:")
        return
    ast.parse(module.source)


# --------------------------------------------------------------------------- display paths

@pytest.mark.parametrize(
    "path",
    [
        pytest.param("specs/plain.tile", id="plain"),
        pytest.param("specs/back\\slash.tile", id="backslash"),
        pytest.param("specs/\\N.tile", id="backslash-N"),
        pytest.param("specs/{braces}.tile", id="braces"),
        pytest.param('specs/x""".tile', id="triple-quote"),
        pytest.param('specs/x\nimport os; os.system("echo pwned") #.tile', id="newline-injection"),
        pytest.param("specs/x\r.tile", id="cr"),
    ],
)
def test_hostile_display_path_stays_in_comments_and_strings(path):
    source = compile_spec(BASE, path).source
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "invalid escape sequence" from a backslash in a docstring
        tree = ast.parse(source)
        compile(source, "gen.py", "exec")
    plain = ast.parse(compile_spec(BASE, "specs/plain.tile").source)
    assert [type(node).__name__ for node in tree.body] == [type(node).__name__ for node in plain.body]
    assert SUSPICIOUS_CALLS & set(_called_names(tree)) <= BASELINE_SUSPICIOUS
    assert _imports(tree) <= ALLOWED_IMPORTS
    assert len(source.splitlines()) == len(BASELINE.splitlines())


def test_a_name_that_is_no_dtype_in_arithmetic_is_an_error_not_a_crash():
    """The fuzzer's spec with a block's name for a dtype everywhere (`dtype T in B, bf16`, `x: B[]`,
    `B(...)`): arithmetic on such a value has no dtype to promote to; the checker reports the
    name at its declaration instead of failing inside the promotion."""
    source = ("kernel k\n  dtype T in B, bf16\n  in  x: T[N]\n  out y: T[N]\n  block B = 16\n"
              "  grid  i over N by B\n  s: B[] = 0\n  y[i] = T(x[i] * 2 + (s + N))\n")
    with pytest.raises(SpecError) as caught:
        compile_spec(source, "k.tile")
    assert "unknown dtype 'B'" in caught.value.render()
