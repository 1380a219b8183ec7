"""Fuzzing the front end: whatever text it is given, compile_spec either builds a module that
Python can compile or raises SpecError with a ``file:line:col`` report. Nothing else.

Three kinds of input: mutations of the real specs (specs/*.tile, tests/specs/*.tile), random
sequences of the language's words, and random text. The pytest run is derandomized and
bounded (about 10 s on 2 cores); inputs the fuzzers found that break the property are kept in
REGRESSIONS (strict xfails until tilegen is fixed).

``python tests/test_fuzz.py N [SECONDS]`` runs the same properties with N random examples
each (or an equal share of SECONDS each), collects every failure instead of stopping at the
first, and prints how many inputs were tried, built and refused, and the shortest input of
each distinct failure.
"""

from __future__ import annotations

import ast
import re
import sys
import time
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # for ``python tests/test_fuzz.py`` without an install
    sys.path.insert(0, str(ROOT))

from tilegen import model  # noqa: E402
from tilegen.check import CHOICE_OPTIONS, FUNCTIONS, KEYWORDS  # noqa: E402
from tilegen.compiler import beside, compile_spec  # noqa: E402
from tilegen.errors import SpecError  # noqa: E402

PATH = "fuzz.tile"
SPECS_FIND = beside(ROOT / "specs" / "fuzz.tile", "specs/fuzz.tile")  # a backward line names a spec in specs/

SPEC_FILES = sorted((ROOT / "specs").glob("*.tile")) + sorted((ROOT / "tests" / "specs").glob("*.tile"))
SPECS = [p.read_text(encoding="utf-8") for p in SPEC_FILES]

#: One token of a spec: a name, a number, ``+=`` or one punctuation character.
TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?|\+=|[<>=!]=|[^\sA-Za-z0-9_]")

#: Words of the language, the functions and options it knows, and its dtypes.
WORDS = [
    "kernel", "in", "out", "block", "grid", "over", "by", "unmasked", "wrapped", "whole", "flat",
    "swizzle", "group", "as", "for", "tune", "key", "config", "default", "choose", "from",
    "access", "pointers", "block_ptr", "dot", "relu", "leaky_relu", "gelu", "sigmoid", "silu",
    "none", "precision", "ieee", "tf32", "tf32x3", "approximate", "tanh", "num_warps",
    "num_stages", "f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "activation",
    "persistent", "descriptor", "dim", "sum", "max", "min", "mean", "where", "maximum", "exp", "inf",
]
# ... and whatever the language has grown since (the checker's and the model's own tables).
WORDS = sorted(set(WORDS) | set(KEYWORDS) | set(FUNCTIONS) | set(CHOICE_OPTIONS) | set(model.DTYPES)
               | set(model.ACCESS_STYLES) | set(model.PRECISIONS) | set(model.LAUNCH_OPTIONS))
#: Names a spec might use, including ones that clash with generated code or Python.
NAMES = [
    "a", "b", "c", "x", "y", "z", "acc", "k", "m", "n", "i", "j", "h", "w", "M", "N", "K", "B",
    "H", "W", "BM", "BN", "BK", "BS", "G", "GROUP_SIZE", "sm", "sn", "tl", "triton", "torch",
    "os", "grid", "reference", "class", "lambda", "import", "__import__", "_x", "apply_x",
    "offs_m", "mask_m", "pid_m", "a_ptr", "stride_a_m", "k_kernel", "device", "launch", "meta",
]
NUMBERS = ["0", "1", "2", "3", "8", "16", "17", "32", "64", "1024", "0.5", "1.", ".5", "1e3", "2E-2",
           "00", "007", "99999999999999999999", "4294967296", "1" * 400]
PUNCT = [":", ",", "[", "]", "(", ")", "=", "+=", "+", "-", "*", "/", "#", ".", "%", "@", "\\", '"', "'",
         "<", "<=", ">", ">=", "==", "!=", "&", "|", "inf", "-inf"]
LAYOUT = ["\n", "\n  ", "\n    ", "\n      ", "\n\t", "\n \t", "\r\n", " ", "  ", "\t", "\x0c"]
SPECIAL = ['"""', "'''", "\\", "#", "\t", "\r", "\n", "\x00", "\x0c", "\x0b", "\x1b", "\u2028",
           "\u2029", "\u0085", "\ufeff", "\u200b", "é", "名", "\U0001f600",
           "ſ", "K", "𝐱",  # noqa: RUF001 - look-alike letters on purpose (NFKC folds the first and last to s and x)
           "{", "}",
           "{{", "{%", "%}", "${", "'", '"', "\\n", "# -*- coding: latin-1 -*-"]

TOKENS = sorted({t for text in SPECS for t in TOKEN_RE.findall(text)} | set(WORDS) | set(NAMES)
                | set(NUMBERS) | set(PUNCT))


# --------------------------------------------------------------------------- the property

#: Outcome counts for the long run (``ok``: built and compiled; ``error``: SpecError).
COUNTS = {"ok": 0, "error": 0}


def check_outcome(text: str) -> str:
    """Compile ``text``; fail unless it builds a compilable module or raises SpecError."""
    try:
        module = compile_spec(text, PATH, SPECS_FIND)
    except SpecError as err:
        rendered = err.render()
        assert isinstance(rendered, str) and rendered.startswith(f"{PATH}:"), rendered
        assert err.diagnostics, "a SpecError without diagnostics"
        for diagnostic in err.diagnostics:
            assert diagnostic.span.line >= 1 and diagnostic.span.column >= 1, diagnostic
        str(err)
        COUNTS["error"] += 1
        return "error"
    source = module.source
    assert isinstance(source, str) and source.endswith("\n")
    assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", module.kernel), module.kernel
    tree = ast.parse(source)
    compile(source, "gen.py", "exec")
    compile(source.encode("utf-8"), "gen.py", "exec")  # as a file: coding cookies honoured
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert {module.kernel, f"{module.kernel}_kernel", "reference"} <= defined, sorted(defined)
    COUNTS["ok"] += 1
    return "ok"


# --------------------------------------------------------------------------- strategies

def _token_spans(line: str) -> list[tuple[int, int]]:
    return [match.span() for match in TOKEN_RE.finditer(line)]


@st.composite
def junk(draw) -> str:
    """A short run of hostile characters: specials, unicode, control characters."""
    return draw(
        st.one_of(
            st.sampled_from(SPECIAL),
            st.text(min_size=1, max_size=4),
            st.text(st.characters(max_codepoint=0x7F), min_size=1, max_size=4),
        )
    )


@st.composite
def mutated_spec(draw) -> str:
    """A real spec with 1..5 mutations applied to its lines."""
    lines = draw(st.sampled_from(SPECS)).split("\n")
    for _ in range(draw(st.integers(1, 5))):
        op = draw(
            st.sampled_from(
                ["delete", "duplicate", "swap", "token", "token", "token", "number", "insert",
                 "insert", "indent", "truncate", "join", "foreign", "strip_comment", "rename"]
            )
        )
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, line)
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op in ("token", "number"):
            spans = _token_spans(line)
            if spans:
                start, end = draw(st.sampled_from(spans))
                new = draw(st.sampled_from(NUMBERS if op == "number" else TOKENS))
                lines[i] = line[:start] + new + line[end:]
        elif op == "insert":
            at = draw(st.integers(0, len(line)))
            lines[i] = line[:at] + draw(junk()) + line[at:]
        elif op == "indent":
            body = line.lstrip(" \t")
            lines[i] = draw(st.sampled_from(["", " ", "  ", "   ", "    ", "\t", "  \t", "\t  ", "        "])) + body
        elif op == "truncate":
            text = "\n".join(lines)
            lines = text[: draw(st.integers(0, len(text)))].split("\n")
        elif op == "join" and i + 1 < len(lines):
            lines[i : i + 2] = [line + draw(st.sampled_from([" ", "", "; "])) + lines[i + 1].lstrip()]
        elif op == "foreign":  # a line from another spec (reaches the checker and lowering)
            other = draw(st.sampled_from(SPECS)).split("\n")
            lines.insert(i, draw(st.sampled_from(other)))
        elif op == "strip_comment":
            lines[i] = line.split("#")[0].rstrip()
        elif op == "rename":  # one name replaced everywhere: the spec stays consistent
            names = sorted({t for t in TOKEN_RE.findall(line) if t[0].isalpha() or t[0] == "_"})
            if names:
                old = draw(st.sampled_from(names))
                new = draw(st.sampled_from(sorted(set(WORDS) | set(NAMES))))
                pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(old)}(?![A-Za-z0-9_])")
                lines = [pattern.sub(new, each) if not each.lstrip().startswith("#") else each for each in lines]
    return "\n".join(lines)


@st.composite
def token_soup(draw) -> str:
    """Lines of the language's words, names, numbers and punctuation, under a kernel header
    most of the time so the parser gets past the first line."""
    atoms = st.one_of(
        st.sampled_from(WORDS), st.sampled_from(NAMES), st.sampled_from(NUMBERS),
        st.sampled_from(PUNCT), st.sampled_from(TOKENS),
    )
    out = []
    if draw(st.booleans()) or draw(st.booleans()):
        out.append(f"kernel {draw(st.sampled_from(NAMES))}\n")
    for _ in range(draw(st.integers(0, 10))):
        indent = draw(st.sampled_from(["", "  ", "  ", "  ", "    ", "\t", " "]))
        words = draw(st.lists(atoms, min_size=0, max_size=12))
        sep = draw(st.sampled_from([" ", " ", ""]))
        out.append(indent + sep.join(words) + draw(st.sampled_from(["\n", "\n", "", "\r\n", " # c\n"])))
        if draw(st.integers(0, 9)) == 0:
            out.append(draw(st.sampled_from(LAYOUT)))
    return "".join(out)


@st.composite
def random_text(draw) -> str:
    """Any text: arbitrary unicode, or text over the characters specs are written in."""
    spec_chars = "".join(sorted({c for text in SPECS for c in text} | set("\t\r\x0c\\\"'")))
    return draw(st.one_of(st.text(max_size=300), st.text(alphabet=spec_chars, max_size=300)))


STRATEGIES = {"mutations": mutated_spec(), "tokens": token_soup(), "random": random_text()}

#: Examples per property in the pytest run (about 10 s in all on 2 cores); the long run below
#: (``python tests/test_fuzz.py N``) is the place for many more.
BUDGET = {"mutations": 400, "tokens": 300, "random": 400}

_SETTINGS = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": list(HealthCheck),
}


# --------------------------------------------------------------------------- the tests

def test_real_specs_build_through_the_harness():
    """The harness says "ok" of real specs (else every fuzz case could pass as a refusal); every
    spec builds in tests/test_build.py's test_generated_is_current, so a sample of kinds here."""
    assert SPECS, "no specs found"
    for text in SPECS[:: max(1, len(SPECS) // 8)]:
        assert check_outcome(text) == "ok"


@settings(max_examples=BUDGET["mutations"], **_SETTINGS)
@given(mutated_spec())
def test_mutated_specs_build_or_raise_spec_error(text):
    check_outcome(text)


@settings(max_examples=BUDGET["tokens"], **_SETTINGS)
@given(token_soup())
def test_token_soup_builds_or_raises_spec_error(text):
    check_outcome(text)


@settings(max_examples=BUDGET["random"], **_SETTINGS)
@given(random_text())
def test_random_text_builds_or_raises_spec_error(text):
    check_outcome(text)


def _one_d(body: str, decl: str = "  in  x: f32[N]", block: str = "16", kernel: str = "k") -> str:
    return f"kernel {kernel}\n{decl}\n  out z: f32[N]\n  block BS = {block}\n  grid  i over N by BS\n{body}\n"


#: Inputs the fuzzers met (bugs since fixed: leading zeros, float dims, constant stores, Python
#: keywords as kernel names, names shaped like kernel arguments) or that sit on edges:
#: name -> (text, xfail reason or None).
REGRESSIONS = {
    "empty": ("", None),
    "only-comments": ("# a\n# b\n", None),
    "kernel-line-only": ("kernel k\n", None),
    "bom": ("\ufeff" + _one_d("  z[i] = x[i]"), None),
    "crlf": (_one_d("  z[i] = x[i]").replace("\n", "\r\n"), None),
    "tab-indent": (_one_d("  z[i] = x[i]").replace("\n  ", "\n\t"), None),
    "mixed-indent": (_one_d("\tz[i] = x[i]"), None),
    "huge-block": (_one_d("  z[i] = x[i]", block=str(2**100)), None),
    "huge-number": (_one_d("  z[i] = x[i] * " + "9" * 400), None),
    "exponent-number": (_one_d("  z[i] = x[i] * 1e999"), None),
    "deep-parens": (_one_d("  z[i] = " + "(" * 200 + "x[i]" + ")" * 200), None),
    "long-sum": (_one_d("  z[i] = x[i]" + " + x[i]" * 300), None),
    "zero-dim": (_one_d("  z[i] = x[0, i]", decl="  in  x: f32[0, N]"), None),
    "float-dim": (_one_d("  z[i] = x[i]", decl="  in  x: f32[N]\n  in  w: f32[2.5, N]"), None),
    "float-dim-const-index": (_one_d("  z[i] = x[0, i]", decl="  in  x: f32[2.5, N]"), None),
    "leading-zero-dim": (_one_d("  z[i] = x[0, i]", decl="  in  x: f32[03, N]"), None),
    "leading-zero-block": (_one_d("  z[i] = x[i]", block="016"), None),
    "leading-zero-index": (_one_d("  z[i] = x[01, i]", decl="  in  x: f32[3, N]"), None),
    "leading-zero-constant": (_one_d("  z[i] = x[i] * 007"), None),
    "leading-zero-init": (_one_d("  t: f32[i] = 01\n  z[i] = t + x[i]"), None),
    "leading-zero-slope": (_one_d("  z[i] = leaky_relu(x[i], 01)"), None),
    "leading-zero-config": (
        "kernel k\n  in  x: f32[N]\n  out z: f32[N]\n  block BS\n  grid  i over N by BS\n"
        "  tune key N\n    config BS = 016, num_warps = 04, num_stages = 02\n  z[i] = x[i]\n",
        None,
    ),
    "leading-zero-group": (
        "kernel k\n  in  x: f32[M, N]\n  out z: f32[M, N]\n  block BM = 16, BN = 16\n"
        "  grid  m over M by BM, n over N by BN\n  swizzle m, n group 02\n  z[m, n] = x[m, n]\n",
        None,
    ),
    "double-zero-index": (_one_d("  z[i] = x[00, i]", decl="  in  x: f32[3, N]"), None),
    "store-int-constant": (_one_d("  z[i] = 2"), None),
    "store-float-constant": (_one_d("  z[i] = 2.5"), None),
    "kernel-named-in": (_one_d("  z[i] = x[i]", kernel="in"), None),
    "kernel-named-from": (_one_d("  z[i] = x[i]", kernel="from"), None),
    "kernel-named-grid": (_one_d("  z[i] = x[i]", kernel="grid"), None),
    "dim-named-like-pointer": (
        "kernel k\n  in  x: f32[x_ptr]\n  out z: f32[x_ptr]\n  block BS = 16\n  grid  i over x_ptr by BS\n"
        "  z[i] = x[i]\n",
        None,
    ),
    "block-named-like-pointer": (
        "kernel k\n  in  x: f32[N]\n  out z: f32[N]\n  block z_ptr = 16\n  grid  i over N by z_ptr\n  z[i] = x[i]\n",
        None,
    ),
    "scalar-named-like-pointer": (
        _one_d("  z[i] = x[i] * x_ptr", decl="  in  x: f32[N]\n  in  x_ptr: f32"), None,
    ),
    "dim-named-like-stride": (
        "kernel k\n  in  x: f32[stride_x_n, N]\n  out z: f32[stride_x_n, N]\n  block BM = 16, BN = 16\n"
        "  grid  m over stride_x_n by BM, n over N by BN\n  z[m, n] = x[m, n]\n",
        None,
    ),
    "block-named-INT64_OFFSETS": (
        "kernel k\n  in  x: f32[N]\n  out z: f32[N]\n  block BS = 16, INT64_OFFSETS = 2\n"
        "  grid  i over N by BS\n  z[i] = x[i]\n",
        None,
    ),
    "block-named-like-choice": (
        "kernel k\n  in  x: f32[N]\n  out z: f32[N]\n  block BS = 16, ACT = 2\n  grid  i over N by BS\n"
        "  choose act from none, relu\n  z[i] = act(x[i])\n",
        None,
    ),
    "tensor-named-like-pointer": (
        _one_d("  z[i] = x[i] * x_ptr[i]", decl="  in  x: f32[N]\n  in  x_ptr: f32[N]"), None,
    ),
}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reason) if reason else ())
        for name, (text, reason) in REGRESSIONS.items()
    ],
)
def test_regression_inputs_build_or_raise_spec_error(name):
    check_outcome(REGRESSIONS[name][0])


# --------------------------------------------------------------------------- the long run

def long_fuzz(n: int, seconds: float | None = None) -> dict:
    """Run every property with ``n`` random (not derandomized) examples each, or with an
    equal share of ``seconds`` each when that is given. Failures are collected (input,
    exception) rather than raised; returns and prints the counts."""
    report = {"tried": 0, "ok": 0, "error": 0, "failures": []}
    start = time.monotonic()
    per_strategy = {}
    for index, (name, strategy) in enumerate(STRATEGIES.items()):
        before = dict(COUNTS)
        tried = [0]

        def make_run_one(name, tried):
            def run_one(text):
                tried[0] += 1
                try:
                    check_outcome(text)
                except Exception as err:  # a bug: keep the input, carry on
                    error = "".join(traceback.format_exception_only(type(err), err)).strip()
                    report["failures"].append((name, text, error))

            return run_one

        run = make_run_one(name, tried)

        deadline = None if seconds is None else start + seconds * (index + 1) / len(STRATEGIES)
        while tried[0] < n and (deadline is None or time.monotonic() < deadline):
            batch = min(500, n - tried[0])
            settings(
                max_examples=batch, deadline=None, database=None, derandomize=False,
                suppress_health_check=list(HealthCheck),
            )(given(strategy)(run))()
        per_strategy[name] = {
            "tried": tried[0],
            "ok": COUNTS["ok"] - before["ok"],
            "error": COUNTS["error"] - before["error"],
        }
        report["tried"] += tried[0]
    report["ok"] = sum(s["ok"] for s in per_strategy.values())
    report["error"] = sum(s["error"] for s in per_strategy.values())
    elapsed = time.monotonic() - start
    print(f"long fuzz: {report['tried']} inputs in {elapsed:.0f} s: {report['ok']} built, "
          f"{report['error']} SpecError, {len(report['failures'])} other failures")
    for name, counts in per_strategy.items():
        print(f"  {name:10s} tried {counts['tried']:7d}  built {counts['ok']:7d}  SpecError {counts['error']:7d}")
    seen = set()
    for name, text, error in sorted(report["failures"], key=lambda f: len(f[1])):
        key = error.splitlines()[-1]
        if key in seen:
            continue
        seen.add(key)
        print(f"--- failure ({name}): {error}\n{text!r}")
    return report


if __name__ == "__main__":
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")
    # python tests/test_fuzz.py [EXAMPLES_PER_PROPERTY [SECONDS]]
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    limit = float(sys.argv[2]) if len(sys.argv) > 2 else None
    result = long_fuzz(count, limit)
    sys.exit(1 if result["failures"] else 0)
