"""The Python extension's build and the XLA FFI path: a build asked for the
extension (FARCALL_PYTHON=ON, as `pip install ./python` is) stops when
jaxlib's FFI headers cannot be found, unless told to go on without them.
Each case configures the repository's CMake project (no compiling) in a
temporary directory, with a jaxlib that fails to import first on the path."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def configure(tmp_path, *defines, no_jaxlib=True):
    fake = tmp_path / "fake"
    (fake / "jaxlib").mkdir(parents=True, exist_ok=True)
    (fake / "jaxlib" / "__init__.py").write_text("raise ImportError('no jaxlib here')\n")
    env = dict(os.environ)
    if no_jaxlib:
        env["PYTHONPATH"] = str(fake)
    r = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "build"), "-G", "Ninja",
                        "-DFARCALL_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}",
                        *defines], env=env, capture_output=True, text=True, timeout=300)
    return r.returncode, " ".join((r.stdout + r.stderr).split())


@pytest.fixture(autouse=True)
def needs_cmake():
    # A machine with only the installed wheel (tests/wheel) has no CMake.
    if shutil.which("cmake") is None or subprocess.run(
            ["cmake", "--version"], capture_output=True).returncode != 0:
        pytest.skip("SKIPPED: no cmake on this machine")


def test_a_build_that_must_have_the_extension_stops_without_the_ffi_headers(tmp_path):
    rc, out = configure(tmp_path, "-DFARCALL_PYTHON=ON")
    assert rc != 0
    assert "farcall: jaxlib's XLA FFI headers were not found" in out
    assert "-DFARCALL_WITHOUT_XLA_FFI=ON" in out


def test_told_to_go_on_it_builds_the_extension_without_the_ffi_path(tmp_path):
    rc, out = configure(tmp_path, "-DFARCALL_PYTHON=ON", "-DFARCALL_WITHOUT_XLA_FFI=ON")
    assert rc == 0, out
    assert "farcall: Python extension without the XLA FFI handler" in out


def test_an_include_directory_without_the_ffi_headers_is_refused(tmp_path):
    rc, out = configure(tmp_path, "-DFARCALL_PYTHON=ON", f"-DFARCALL_XLA_FFI_INCLUDE={tmp_path}",
                        no_jaxlib=False)
    assert rc != 0
    assert "holds no xla/ffi/api/ffi.h" in out


def test_with_jaxlib_the_extension_has_the_ffi_path(tmp_path):
    rc, out = configure(tmp_path, "-DFARCALL_PYTHON=ON", no_jaxlib=False)
    assert rc == 0, out
    assert "farcall: Python extension with the XLA FFI handler" in out
