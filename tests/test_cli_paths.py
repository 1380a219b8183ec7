"""Errors name the spec at the path the user typed (relative, ``./``, ``../`` or absolute), as
compilers do, so editors and CI problem matchers open it from the user's folder; a folder
argument names each spec as the folder as typed joined with the file. Generated modules keep
their machine-independent ``specs/<file>`` header whatever path found the spec.
"""

import shutil

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT
from tilegen.cli import app

#: ``y`` is not declared: an error at line 6, column 10.
BAD = "kernel other\n  in  x: f32[N]\n  out z: f32[N]\n  block BS = 64\n  grid i over N by BS\n  z[i] = y[i]\n"


@pytest.fixture
def work(tmp_path):
    """``tmp/specs/{bad,copy}.tile``, an empty ``tmp/elsewhere/`` and ``tmp/out/`` holding a
    previous module that no failed command may touch."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "bad.tile").write_text(BAD)
    shutil.copy(ROOT / "specs" / "copy.tile", specs / "copy.tile")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "other.py").write_text("# previous module\n")
    return tmp_path


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def assert_located(result, location: str) -> None:
    """Exit 1 and ``location: error: ...`` at the start of a line, the line and a caret after."""
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith(f"{location}:6:10: error: unknown tensor 'y'")]
    assert heads, result.output
    assert lines[heads[0] + 1].strip() == "z[i] = y[i]" and lines[heads[0] + 2].strip() == "^"


def assert_out_untouched(work) -> None:
    assert sorted(p.name for p in (work / "out").iterdir()) == ["other.py"]
    assert (work / "out" / "other.py").read_text() == "# previous module\n"


@pytest.mark.parametrize("typed", ["bad.tile", "./bad.tile"])
@pytest.mark.parametrize("command", ["check", "build", "show", "run"])
def test_path_typed_inside_the_folder(work, monkeypatch, command, typed):
    monkeypatch.chdir(work / "specs")
    extra = ["-o", str(work / "out")] if command == "build" else []
    result = invoke(command, typed, *extra)
    assert_located(result, typed)
    assert "specs/bad.tile" not in result.output  # not the folder-prefixed display path
    assert_out_untouched(work)


@pytest.mark.parametrize("command", ["check", "build", "show", "run"])
def test_dotdot_path(work, monkeypatch, command):
    monkeypatch.chdir(work / "elsewhere")
    extra = ["-o", "../out"] if command == "build" else []
    assert_located(invoke(command, "../specs/bad.tile", *extra), "../specs/bad.tile")
    assert_out_untouched(work)


@pytest.mark.parametrize("command", ["check", "build", "show", "run"])
def test_absolute_path(work, monkeypatch, command):
    monkeypatch.chdir(work / "elsewhere")
    absolute = str(work / "specs" / "bad.tile")
    extra = ["-o", str(work / "out")] if command == "build" else []
    assert_located(invoke(command, absolute, *extra), absolute)
    assert_out_untouched(work)


@pytest.mark.parametrize("folder", ["specs", "specs/", "./specs", "../{root}/specs"])
def test_folder_names_each_spec_under_the_folder_as_typed(work, monkeypatch, folder):
    monkeypatch.chdir(work)
    folder = folder.format(root=work.name)
    expected = folder.rstrip("/") + "/bad.tile"
    assert_located(invoke("check", folder), expected)
    result = invoke("build", folder, "-o", str(work / "out"))
    assert_located(result, expected)
    assert (work / "out" / "copy.py").read_bytes() == (ROOT / "generated" / "copy.py").read_bytes()
    assert (work / "out" / "other.py").read_text() == "# previous module\n"  # the bad spec's module


def test_demo_reports_a_bad_spec_at_the_typed_folder(work, monkeypatch):
    monkeypatch.chdir(work / "elsewhere")
    (work / "specs" / "copy.tile").unlink()  # the bad spec alone: nothing to run
    result = invoke("demo", "../specs", "-o", "../out", "--out-dir", "../photo", "--programs", "1")
    assert_located(result, "../specs/bad.tile")
    assert_out_untouched(work)


def test_success_messages_name_the_typed_path_and_modules_keep_the_stable_header(work, monkeypatch):
    monkeypatch.chdir(work / "elsewhere")
    (work / "specs" / "bad.tile").unlink()
    absolute = str(work / "specs" / "copy.tile")
    for typed in ("../specs/copy.tile", absolute, "../specs"):
        out = work / "built" / str(len(typed))
        result = invoke("build", typed, "-o", str(out))
        assert result.exit_code == 0, result.output
        shown = typed if typed.endswith(".tile") else f"{typed}/copy.tile"
        assert f"({shown})" in result.output
        assert (out / "copy.py").read_bytes() == (ROOT / "generated" / "copy.py").read_bytes()
        checked = invoke("check", typed)
        assert checked.exit_code == 0 and f"ok  {shown}" in checked.output
    shown = invoke("show", absolute)
    assert shown.output.startswith("# Generated by tilegen") and "from specs/copy.tile" in shown.output.splitlines()[0]
    assert str(work) not in shown.output


def test_missing_path_is_an_error_not_a_traceback(work, monkeypatch):
    monkeypatch.chdir(work)
    for command in ("check", "build", "show", "run", "demo"):
        result = invoke(command, "nowhere.tile" if command != "demo" else "nowhere")
        assert result.exit_code == 1 and "error: no such spec file or folder: nowhere" in result.output


def test_run_and_show_take_one_spec(work, monkeypatch):
    monkeypatch.chdir(work)
    for command in ("show", "run"):
        result = invoke(command, "specs")
        assert result.exit_code == 1 and f"error: {command} takes one spec file; specs holds 2" in result.output


def test_load_module_takes_a_path_as_typed(work, monkeypatch):
    """``load_module`` takes the module's path as a ``str`` (relative to the working folder) as well
    as a ``Path``, and a missing file is a FileNotFoundError, not an AttributeError."""
    import torch

    from tilegen.runner import load_module

    shutil.copy(ROOT / "generated" / "add.py", work / "out" / "add.py")
    monkeypatch.chdir(work)
    module = load_module("out/add.py")
    x, y = torch.randn(100), torch.randn(100)
    torch.testing.assert_close(module.add(x, y), x + y)
    with pytest.raises(FileNotFoundError):
        load_module("out/missing.py")
