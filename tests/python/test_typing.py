"""The native layer's typed, named boundary: farcall/_farcall.pyi and
py.typed ship with the package, the stub matches the module it describes,
and the native calls take named arguments and option classes."""

from __future__ import annotations

import difflib
import pathlib

import pytest

import farcall
from farcall import _farcall

PACKAGE = pathlib.Path(farcall.__file__).resolve().parent


def test_the_package_ships_a_stub_and_py_typed():
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_farcall.pyi").is_file()


def test_the_committed_stub_is_the_one_the_module_gives():
    # The build tree makes the stub afresh from the module (python/CMakeLists.txt).
    generated = PACKAGE.parent / "stubs" / "_farcall.pyi"
    if not generated.is_file():
        pytest.skip(f"no generated stub at {generated}: this farcall is not a build tree's")
    committed = (PACKAGE / "_farcall.pyi").read_text().splitlines()
    fresh = generated.read_text().splitlines()
    diff = "\n".join(difflib.unified_diff(committed, fresh, "python/farcall/_farcall.pyi",
                                          str(generated), lineterm=""))
    assert not diff, ("python/farcall/_farcall.pyi is out of date; copy the generated one over "
                      f"it:\n{diff}")


def test_native_calls_take_named_arguments_only_in_their_order():
    options = _farcall.ClientOptions()
    with pytest.raises(TypeError):
        _farcall.Client("127.0.0.1:1", "", "", "", "")  # the old nine positional strings
    client = _farcall.Client(target="127.0.0.1:1", options=options)
    with pytest.raises(TypeError):
        client.describe(5.0, 1)
    client.close()


def test_call_options_refuse_unknown_names_and_negative_timeouts():
    o = _farcall.CallOptions()
    assert (o.transport, o.rpc, o.timeout, o.stop) == ("auto", "auto", 60.0, None)
    o.transport, o.rpc, o.timeout = "ucx", "stream", 2.5
    assert (o.transport, o.rpc, o.timeout) == ("ucx", "stream", 2.5)
    with pytest.raises(ValueError, match=r"^rpc must be 'auto', 'unary' or 'stream'; got 'fast'$"):
        o.rpc = "fast"
    with pytest.raises(ValueError,
                       match=r"^transport must be 'auto', 'grpc', 'shm' or 'ucx'; got 'tcp'$"):
        o.transport = "tcp"
    with pytest.raises(ValueError, match=r"^timeout must be 0 or more seconds; got -1$"):
        o.timeout = -1.0
    stop = _farcall.CallStop()
    o.stop = stop
    assert o.stop is stop
    o.stop = None
    assert o.stop is None


def test_client_options_carry_every_field_to_the_client():
    o = _farcall.ClientOptions()
    o.token = "secret"
    # A token in clear to a host that is not this one is refused by Connect,
    # so the field did reach the C++ options.
    with pytest.raises(farcall.InvalidArgumentError, match="the token would travel in clear"):
        _farcall.Client(target="192.0.2.1:50050", options=o)
    o.allow_insecure_tokens = True
    _farcall.Client(target="192.0.2.1:50050", options=o).close()


def test_a_bad_transport_is_refused_when_the_client_is_made():
    with pytest.raises(ValueError, match=r"transport must be 'auto', 'grpc', 'shm' or 'ucx'"):
        farcall.Client("127.0.0.1:1", transport="tcp")
