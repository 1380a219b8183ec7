"""The issue-3 constructs: each new check has its own failing spec and message."""

import pytest
import torch

from tilegen.check import check
from tilegen.compiler import compile_spec
from tilegen.errors import SpecError
from tilegen.parser import parse
from tilegen.runner import load_module

TUNED = """\
kernel k
  in  a: f16[M, K]
  in  b: f16[K, N]
  in  alpha: f32
  out c: f16[M, N]
  block BM, BN, BK = 32, G = 8
  grid flat m over M by BM, n over N by BN
  swizzle m, n group G
  tune key M, N, K
    config BM = 64, BN = 64, num_warps = 4, num_stages = 3
    default config BM = 32, BN = 32, num_warps = 2
  choose act from none, relu, gelu
  acc: f32[m, n] = 0
  for k over K by BK
    acc += dot(a[m, k], b[k, n])
  c[m, n] = act(alpha * acc)
"""

ADD = """\
kernel add
  in  x: f32[N]
  in  y: f32[N]
  out z: f32[N]
  block BS = 64
  grid  i over N by BS
  z[i] = x[i] + y[i]
"""


def test_tuned_spec_parses_into_configs_key_and_choice():
    spec = check(parse(TUNED, "k.tile"))
    assert spec.flat and spec.tuned_params == ("BM", "BN")
    assert [k.id for k in spec.tune.key] == ["M", "N", "K"]
    assert spec.default_config() is spec.tune.configs[1]
    assert spec.choices[0].constexpr == "ACT" and [o.id for o in spec.choices[0].options] == ["none", "relu", "gelu"]
    assert spec.tensor("alpha").is_scalar


def test_a_setting_with_several_values_makes_one_config_per_combination():
    """``BM in [...]`` settings multiply out in the order written (the first outermost), as the
    nested loops of tutorial 06's config list; plain settings repeat in every config."""
    text = TUNED.replace("config BM = 64, BN = 64, num_warps = 4, num_stages = 3",
                         "config BM in [64, 128], BN = 64, num_warps = 4, num_stages in [2, 3, 4]")
    spec = check(parse(text, "k.tile"))
    written = [{s.name.id: int(s.default.text) for s in c.settings} for c in spec.tune.configs]
    expected = [{"BM": bm, "BN": 64, "num_warps": 4, "num_stages": st} for bm in (64, 128) for st in (2, 3, 4)]
    assert written == [*expected, {"BM": 32, "BN": 32, "num_warps": 2}]
    assert spec.default_config() is spec.tune.configs[-1]
    assert len({c.span for c in spec.tune.configs[:-1]}) == 1  # errors in any of them point at its line


def test_default_and_interpreter_configs_mark_a_listed_config_once():
    """``default config`` / ``interpreter config`` repeating a config a list gives mark that config
    (timed once, where the marked line stands); the interpreter config is its own, the default
    config the GPU's untuned one; without an interpreter config the interpreter runs the default."""
    text = TUNED.replace("config BM = 64, BN = 64, num_warps = 4, num_stages = 3\n"
                         "    default config BM = 32, BN = 32, num_warps = 2",
                         "config BM in [32, 64], BN = 64, num_warps = 4, num_stages in [2, 3]\n"
                         "    interpreter config BM = 32, BN = 32, num_warps = 2\n"
                         "    default config BM = 64, BN = 64, num_warps = 4, num_stages = 3")
    spec = check(parse(text, "k.tile"))
    written = [tuple(int(s.default.text) for s in c.settings) for c in spec.tune.configs]
    assert written == [(32, 64, 4, 2), (32, 64, 4, 3), (64, 64, 4, 2), (32, 32, 2), (64, 64, 4, 3)]
    assert spec.interpreter_config() is spec.tune.configs[3] and spec.default_config() is spec.tune.configs[4]
    plain = check(parse(TUNED, "k.tile"))
    assert plain.interpreter_config() is plain.default_config()


def test_a_rounded_key_size_keys_the_launcher_on_its_next_power_of_two(tmp_path):
    """``tune key next_power_of_2(N)``: sizes that round to one power of two share the config
    tuned at the first of them (under the interpreter: the default config, remembered per key),
    as a server's batch sizes would; Triton's autotuner itself keys on the size."""
    text = ADD.replace("block BS = 64", "block BS").replace(
        "  z[i]", "  tune key next_power_of_2(N)\n    default config BS = 64\n    config BS = 128\n  z[i]")
    spec = check(parse(text, "add.tile"))
    assert spec.tune.rounded == {"N"} and spec.tune.key_as_written == "next_power_of_2(N)"
    path = tmp_path / "add.py"
    path.write_text(compile_spec(text, "add.tile").source)
    module = load_module(path)
    assert 'key=["N"]' in path.read_text()
    for n in (100, 120, 128, 129, 200):
        x, y = torch.randn(n), torch.randn(n)
        torch.testing.assert_close(module.add(x, y), x + y)
    assert sorted(key[1:] for key in module._tuner.tuned) == [(128,), (256,)]


def errors(text):
    with pytest.raises(SpecError) as info:
        check(parse(text, "bad.tile"))
    return info.value.render()


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("tune key M, N, K", "tune key M, N, BM", "autotune key 'BM' is not a size"),
        ("tune key M, N, K", "tune key M, N, next_power_of_2(BM)", "autotune key 'BM' is not a size"),
        ("tune key M, N, K", "tune key M, N, next_power_of_2(M)",
         "bad.tile:9:34: error: 'M' is in the autotune key twice"),
        ("tune key M, N, K", "tune key M, N, round(K)",
         "bad.tile:9:23: error: unexpected '('; expected ',' or end of line"),
        (
            "default config BM = 32, BN = 32,",
            "default config BM = 32,",
            "this config leaves 'BN' unset, and it has no default",
        ),
        ("num_warps = 4,", "num_warps = 3,", "num_warps = 3 is not a power of two"),
        ("config BM = 64,", "config BQ = 64,", "config sets 'BQ', which is not a block parameter"),
        ("config BM = 64,", "default config BM = 48,", "only one config can be the default"),
        ("default config BM = 32,", "interpreter config BM in [32, 64],",
         "the interpreter config gives one value per setting"),
        ("num_stages = 3\n", "num_stages = 3\n    interpreter config BM = 16, BN = 16, num_warps = 4\n"
         "    interpreter config BM = 32, BN = 16, num_warps = 4\n", "only one config can be the interpreter config"),
        ("config BM = 64,", "config BM = 48,", "block size 'BM' = 48 is not a power of two"),
        ("config BM = 64,", "config BM = 8,", "'dot' tiles need every block size >= 16; 'BM' = 8"),
        ("config BM = 64, BN = 64,", "config BM = 64, BM = 32, BN = 64,", "'BM' is set twice in this config"),
        ("config BM = 64,", "config BM in [64, 48],", "block size 'BM' = 48 is not a power of two"),
        ("num_warps = 4,", "num_warps in [4, 3],", "num_warps = 3 is not a power of two"),
        ("default config BM = 32,", "default config BM in [32, 64],", "the default config gives one value per setting"),
        ("config BM = 64,", "config BM in [64, 64],", "config BM = 64, BN = 64, num_warps = 4, num_stages = 3 is "
         "listed twice (again on its line)"),
        ("num_stages = 3\n", "num_stages = 3\n    config BM = 64, BN = 64, num_warps = 4, num_stages = 3\n",
         "num_stages = 3 is listed twice (as on line 10)"),
        ("config BM = 64,", "config BM in [],", "bad.tile:10:19: error: unexpected ']'; expected a number"),
        ("none, relu, gelu", "none, relu, tanh", "'tanh' cannot be chosen"),
        ("none, relu, gelu", "none, relu, relu", "option 'relu' is listed twice"),
        ("act(alpha * acc)", "act(alpha * acc, 2)", "'act' (a choice) takes 1 argument, not 2"),
        ("act(alpha * acc)", "alpha[m, n]", "'alpha' is a scalar; use it without an index"),
        ("in  alpha: f32", "out alpha: f32", "output 'alpha' needs a shape"),
        ("grid flat m over M by BM, n over N by BN", "grid flat m over M by BM", "a flat grid flattens two tiled axes"),
        ("for k over K by BK", "for k over K by BK wrapped", "only grid axes can be 'wrapped'"),
        ("swizzle m, n group G", "swizzle m, n group H", "unknown parameter 'H'"),
        ("acc: f32[m, n] = 0", "relu: f32[m, n] = 0", "variable name 'relu' is reserved"),
    ],
)
def test_tuned_spec_errors(old, new, message):
    assert old in TUNED
    assert message in errors(TUNED.replace(old, new))


def test_block_without_default_needs_tune():
    assert "'BS' needs a value: 'block BS = 64'" in errors(ADD.replace("BS = 64", "BS"))


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("z[i] = x[i] + y[i]", "z[i] = leaky_relu(x[i], y[i])", "the negative_slope of 'leaky_relu' must be a number"),
        ("z[i] = x[i] + y[i]", "z[i] = gelu(x[i], approximate=erf)", "unknown approximate 'erf'"),
        ("z[i] = x[i] + y[i]", "z[i] = relu(x[i], slope=2)", "unknown argument 'slope' to 'relu'"),
        ("grid  i over N by BS", "grid  i over N by BS\n  access tma", "unknown access style 'tma'"),
        ("grid  i over N by BS", "grid  i over N by BS wrapped\n  access block_ptr", "block pointers cannot wrap"),
        ("grid  i over N by BS", "grid  j over N, i over N by BS", ""),
    ],
)
def test_elementwise_and_access_errors(old, new, message):
    assert old in ADD
    text = ADD.replace(old, new)
    if message:
        assert message in errors(text)
    else:
        check(parse(text, "ok.tile"))  # an index axis beside a tile axis is valid


@pytest.mark.parametrize("bounds", ["unmasked", "wrapped"])
@pytest.mark.parametrize("access", ["pointers", "descriptor", "block_ptr"])
def test_a_tiled_bound_without_a_block_is_an_error(access, bounds):
    """``i over N unmasked`` (no ``by``) names no block: an error at the axis, not a traceback (a
    descriptor's block shape read the missing block)."""
    text = ADD.replace("grid  i over N by BS", f"grid  i over N {bounds}\n  access {access}")
    assert f"bad.tile:6:9: error: '{bounds}' is for tiled axes: 'i over N by B {bounds}'" in errors(text)


@pytest.mark.parametrize("access", ["pointers", "descriptor", "block_ptr"])
def test_a_tensor_input_never_read_is_refused_where_each_tensor_is_a_descriptor(access):
    """An input only declared (``y`` unread) would become a TMA descriptor or block pointer of no
    tile, whose launch failed inside Triton ("rank mismatch"); the checker names it instead. Through
    pointers it is a pointer the kernel never follows: valid."""
    text = ADD.replace("grid  i over N by BS", f"grid  i over N by BS\n  access {access}")
    text = text.replace("z[i] = x[i] + y[i]", "z[i] = x[i] * 2")
    if access == "pointers":
        check(parse(text, "ok.tile"))
        return
    made = "TMA descriptor" if access == "descriptor" else "block pointer"
    assert (f"bad.tile:3:7: error: input tensor 'y' is never read; 'access {access}' passes each tensor as a {made} "
            f"of the tiles the body reads: read it, remove it, or write 'access pointers'") in errors(text)


def test_a_reduction_over_an_unmasked_axis_without_a_block_is_an_error():
    text = """\
kernel rows
  in  x: f32[M, N]
  out y: f32[M]
  grid  r over M, c over N unmasked
  y[r] = sum(x[r, c], dim=c)
"""
    assert "bad.tile:4:19: error: 'unmasked' is for tiled axes: 'c over N by B unmasked'" in errors(text)


def test_a_dot_must_contract_over_one_shared_axis():
    text = TUNED.replace("acc += dot(a[m, k], b[k, n])", "acc += dot(a[m, k], a[m, k])")
    assert "'dot' contracts over the one axis its operands share; they span m, k and m, k" in errors(text)
    text = TUNED.replace("acc += dot(a[m, k], b[k, n])", "acc += dot(a[m, k], alpha * b[k, n])")
    assert "'dot' operands must have one dtype; 'a' is f16, the second is f32 (cast one, e.g. f16(...))" in errors(text)


def test_index_axis_is_not_a_tile_dimension():
    text = TUNED.replace("grid flat m over M by BM, n over N by BN", "grid  m over M by BM, n over N by BN, q over K")
    text = text.replace("acc: f32[m, n] = 0", "acc: f32[m, q] = 0")
    assert "'q' is an index axis (no block), not a tile dimension" in errors(text)


def test_language_words_are_keywords_for_the_parser():
    # 'tune' starts a tune block, so it cannot name a variable; the error is a syntax error.
    text = ADD.replace("z[i] = x[i] + y[i]", "tune = x[i]\n  z[i] = tune")
    assert "bad.tile:7:8: error: unexpected '='; expected 'key'" in errors(text)


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("in  b: f16[K, N]", "in  b: bf16[K, N]", "'dot' operands must have one dtype; 'a' is f16, 'b' is bf16"),
        (
            "in  a: f16[M, K]\n  in  b: f16[K, N]",
            "in  a: u8[M, K]\n  in  b: u8[K, N]",
            "'dot' does not take u8 tiles ('a')",
        ),
        ("acc: f32[m, n] = 0", "acc: i32[m, n] = 0", "'acc' is i32, but 'dot' of f16 tiles accumulates in f32 or f16"),
    ],
)
def test_dtype_the_operation_does_not_support(old, new, message):
    assert old in TUNED
    assert message in errors(TUNED.replace(old, new))


@pytest.mark.parametrize("name", ["_x", "_check_input", "device", "launch", "apply_x", "warnings", "LOOP_STAGES"])
def test_names_kept_for_generated_code_are_refused(name):
    text = ADD.replace("z[i] = x[i] + y[i]", f"{name} = x[i]\n  z[i] = {name} + y[i]")
    assert f"variable name '{name}' is reserved" in errors(text)


def test_spec_names_that_look_generated_are_kept_and_generated_ones_renamed():
    from tilegen.compiler import compile_spec

    text = ADD.replace("z[i] = x[i] + y[i]", "offs_i = x[i] + y[i]\n  mask_i = offs_i * 2\n  z[i] = mask_i")
    source = compile_spec(text, "k.tile").source
    assert "offs_i_1 = pid_i * BS + tl.arange(0, BS)" in source
    assert "mask_i_1 = offs_i_1 < N" in source
    assert "offs_i = x + y" in source and "tl.store(z_ptr + offs_i_1 * stride_z_n, mask_i, mask=mask_i_1)" in source


def test_a_kernel_needs_an_input_tensor():
    text = ADD.replace("  in  x: f32[N]\n  in  y: f32[N]\n", "  in  s: f32\n").replace("x[i] + y[i]", "s")
    assert "the kernel has no 'in' tensor with a shape" in errors(text)


# An axis over a literal extent (k over 4) indexes a literal dimension (x: f32[N, 4]): it was
# refused ("axis 'k' tiles '4', but dimension 1 of 'x' is '4'"), and where it indexed nothing the
# launcher made 4 a derived size: '4 = 4', a SyntaxError.
@pytest.mark.parametrize(("spec", "shape", "oracle"), [
    ("  in  x: f32[N, 4]\n  out y: f32[N]\n  grid  r over N, k over 4 whole\n  y[r] = sum(x[r, k], dim=k)\n",
     (5, 4), lambda x: x.sum(1)),
    ("  in  x: f32[N, 6]\n  out y: f32[N, 6]\n  block BK = 4\n  grid  r over N\n  acc: f32[] = 0\n"
     "  for k over 6 by BK\n    acc += sum(x[r, k], dim=k)\n  for j over 6 by BK\n    y[r, j] = x[r, j] - acc / 6\n",
     (5, 6), lambda x: x - x.mean(1, keepdim=True)),
    ("  in  x: f32[3, N]\n  out y: f32[3, N]\n  block BN = 8\n  grid  c over 3, n over N by BN\n"
     "  y[c, n] = x[c, n] * (c + 1)\n", (3, 19), lambda x: x * torch.arange(1, 4)[:, None]),
    ("  in  x: f32[N, 4]\n  out y: f32[N, 4]\n  block BN = 2\n  grid  r over N by BN, k over 4 whole\n"
     "  y[r, k] = x[r, k] - mean(x[r, k], dim=k)\n", (5, 4), lambda x: x - x.mean(1, keepdim=True)),
    ("  in  x: f32[N]\n  out y: f32[N]\n  block BN = 8\n  grid  r over N by BN, k over 4 whole\n"
     "  y[r] = x[r] * sum(f32(k), dim=k)\n", (19,), lambda x: x * 6),
])
def test_an_axis_over_a_literal_extent(compiled, spec, shape, oracle):
    module = compiled("kernel k\n" + spec)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(len(spec)))
    torch.testing.assert_close(module.k(x), oracle(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(module.reference(x), oracle(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("spec", "message"), [
    ("  in  x: f32[N, 4]\n  out y: f32[N]\n  grid  r over N, k over 3 whole\n  y[r] = sum(x[r, k], dim=k)\n",
     "axis 'k' tiles '3', but dimension 1 of 'x' is '4'"),
    ("  in  x: f32[N, 4]\n  out y: f32[N]\n  grid  r over N, k over 2.5 whole\n  y[r] = sum(x[r, 0], dim=k)\n",
     "the extent of 'k' must be a positive integer, not 2.5"),
    # an offset of an axis the index already holds: one axis spans one dimension of the tile
    ("  in  x: f32[N, N]\n  out y: f32[N]\n  block BN = 4\n  grid  j over N by BN\n  y[j] = x[j, j + 0]\n",
     "axis 'j' indexes 'x' twice"),
])
def test_what_a_literal_extent_or_an_index_may_not_say(spec, message):
    with pytest.raises(SpecError) as caught:
        compile_spec("kernel k\n" + spec, "k.tile")
    assert message in [d.message for d in caught.value.diagnostics]
