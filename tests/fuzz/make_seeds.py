"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/NAME/): valid inputs
of each kind, encoded by hand so that this needs nothing but Python.

    python3 tests/fuzz/make_seeds.py
"""

import io
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, wire, payload):
    key = varint((num << 3) | wire)
    if wire == 0:
        return key + varint(payload)
    return key + varint(len(payload)) + payload


def spec(dtype, dims):
    packed = b"".join(varint(d) for d in dims)
    return field(1, 0, dtype) + (field(2, 2, packed) if dims else b"")


def attribute(name, kind, value):
    if kind == "i64":
        v = field(1, 0, value)
    elif kind == "f64":
        v = varint((2 << 3) | 1) + struct.pack("<d", value)
    elif kind == "b":
        v = field(3, 0, int(value))
    else:
        v = field(4, 2, value.encode())
    return field(8, 2, field(1, 2, name.encode()) + field(2, 2, v))


def header(handler, platforms, args, results, aliases=(), attrs=()):
    h = field(1, 2, handler.encode())
    for p in platforms:
        h += field(2, 2, p.encode())
    for a in args:
        h += field(3, 2, spec(*a))
    for r in results:
        h += field(4, 2, spec(*r))
    for i, o in aliases:
        h += field(5, 2, field(1, 0, i) + field(2, 0, o))
    for a in attrs:
        h += attribute(*a)
    return h


def chunk(index, offset, data):
    return field(2, 2, field(1, 0, index) + field(2, 0, offset) + field(3, 2, data))


HEADERS = {
    "copy": header("copy", ["cpu"], [(11, [4])], [(11, [4])]),
    "axpy": header("axpy", ["cpu"], [(11, [8]), (11, [8])], [(11, [8])], [(1, 0)],
                   [("alpha", "f64", 2.0)]),
    "fail": header("fail", ["cpu"], [], [], (), [("code", "i64", 7), ("message", "str", "x")]),
    "bad_platform": header("copy", ["tpu"], [(16, [2, 3])], [(16, [2, 3])]),
    "two_platforms": header("copy", ["cpu", "cuda"], [(1, [])], [(1, [])]),
    "rank3": header("copy", ["cpu"], [(20, [2, 3, 4])], [(20, [2, 3, 4])], [(0, 0)]),
}


def npy(dtype_descr, shape, data):
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (dtype_descr, shape)
    hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + data


def shm_request(op, size, token):
    # core/shm_protocol.cc: op, size (u64) and a 32-byte token.
    return struct.pack("<BQ", op, size) + token.ljust(32, b"\0")


def shm_reply(status, token, message):
    # core/shm_protocol.cc: status, a 32-byte token, u32 length, message.
    return bytes([status]) + token.ljust(32, b"\0") + struct.pack("<I", len(message)) + message


def capability_fields(principal, handler, agent, expires_ms):
    # core/capability.cc: three u16-length-prefixed fields (big endian) and
    # the expiry in Unix ms (u64, big endian). The fuzzer puts the version
    # and its key's id before them and the Ed25519 signature after.
    def f(b):
        return struct.pack(">H", len(b)) + b
    return f(principal) + f(handler) + f(agent) + struct.pack(">Q", expires_ms)


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    for name, h in HEADERS.items():
        write("header_limits_fuzz", name, h)
        frame = field(1, 2, h) + chunk(0, 0, b"\x00" * 16)
        write("frame_decoder_fuzz", name, frame)
    write("frame_decoder_fuzz", "chunks_only", chunk(0, 0, b"ab") + chunk(0, 2, b"cd"))
    write("chunk_assembler_fuzz", "in_order", bytes([1, 0, 0, 7, 0, 2, 0, 0, 44, 1]))
    write("chunk_assembler_fuzz", "overlap", bytes([2, 0, 0, 10, 0, 2, 5, 0, 10, 0]))
    write("npy_fuzz", "f32", npy("<f4", "(2, 2)", struct.pack("<4f", 1, 2, 3, 4)))
    write("npy_fuzz", "scalar", npy("<i8", "()", struct.pack("<q", 7)))
    write("npy_fuzz", "bf16_void", npy("<V2", "(3,)", b"\x00" * 6))
    write("shm_protocol_fuzz", "register", shm_request(1, 1 << 20, b""))
    write("shm_protocol_fuzz", "unregister", shm_request(2, 0, b"a" * 32))
    write("shm_protocol_fuzz", "reply", shm_reply(9, b"t" * 32, b"sealed with F_SEAL_SHRINK"))
    # 60 s after the fuzzer's clock (1,800,000,000 s).
    soon = 1_800_000_000_000 + 60_000
    write("capability_fuzz", "minted",
          capability_fields(b"token:0a1b2c3d4e5f", b"scale", b"cpu-agent-50051-host-0a1b2c3d", soon))
    write("capability_fuzz", "anonymous", capability_fields(b"", b"copy", b"a", soon))


if __name__ == "__main__":
    main()
