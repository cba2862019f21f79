#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz-convert.c.

Each seed is one case a human would write first: valid layouts that must
round-trip, and the refusals the core documents.  The byte format is the one
fuzz-convert.c decodes; keep the two in step.

Usage: make-corpus.py DIR
"""
import os
import struct
import sys

# Descriptor path, first flags byte.
STRIDES, MASK, STREAM, READONLY, DATA_NULL, RAW_DTYPE, LEGACY, RO_OK = (
    1 << i for i in range(8))
# Descriptor path, second flags byte: device choice in bits 2-3.
DEV_UNKNOWN, DEV_CPU, DEV_CUDA = 0 << 2, 1 << 2, 2 << 2
# Tensor path, mode byte (odd).
T_LEGACY, T_DATA_NULL, T_SHAPE_NULL, T_STRIDES_NULL = 2, 4, 8, 16


def u64(v):
    return struct.pack("<Q", v & (2**64 - 1))


def num(v, scale=1):
    """The fuzzer's integer encoding: small values in one byte, else raw."""
    if v % scale == 0 and 0 <= v // scale < 64 and scale > 1:
        return bytes([0x40 | v // scale])
    if v % scale == 0 and 0 < -v // scale < 64 and scale > 1:
        return bytes([0x80 | -v // scale])
    if 0 <= v < 64:
        return bytes([v])
    return b"\xc0" + u64(v)


def desc(f1, f2, ndim, typestr, shape, strides=(), version=3, stream=None,
         data=0x7F0000001000, itemsize=4, device_id=None):
    out = bytes([0, f1, f2])
    if device_id is not None:
        out += bytes([device_id])
    out += bytes([version, ndim & 0xFF])
    out += bytes([len(typestr)]) + typestr.encode()
    if f1 & STREAM:
        out += num(stream)
    if not f1 & DATA_NULL:
        out += u64(data)
    out += b"".join(num(s) for s in shape)
    if f1 & STRIDES:
        out += b"".join(num(s, itemsize) for s in strides)
    return out


def tensor(mode, ndim, shape=(), strides=(), major=1, minor=3, flags=0,
           code=2, bits=32, device=1, data=0x7F0000002000, byte_offset=0):
    out = bytes([1 | mode, major, minor, flags, code, bits, 0, device, 0,
                 ndim & 0xFF])
    if not mode & T_DATA_NULL:
        out += u64(data)
    out += num(byte_offset)
    if not mode & T_SHAPE_NULL:
        out += b"".join(num(s) for s in shape)
    if not mode & T_STRIDES_NULL:
        out += b"".join(num(s) for s in strides)
    return out


SEEDS = {
    "desc-c-contiguous-f4": desc(LEGACY, DEV_CPU, 2, "<f4", (3, 4)),
    "desc-transposed-i8": desc(STRIDES | LEGACY, DEV_CUDA, 2, "<i8", (3, 4),
                               (8, 24), itemsize=8, device_id=1),
    "desc-negative-stride": desc(STRIDES | LEGACY, DEV_CPU, 1, "<f4", (5,),
                                 (-4,)),
    "desc-zero-size-null-data": desc(DATA_NULL | LEGACY, DEV_CPU, 3, "<f4",
                                     (0, 2**40, 2**40)),
    "desc-scalar": desc(LEGACY, DEV_CPU, 0, "|b1", ()),
    "desc-readonly-legacy": desc(READONLY | LEGACY, DEV_CPU, 1, "<u2", (7,)),
    "desc-odd-stride-length-one": desc(STRIDES | LEGACY, DEV_CPU, 2, "<f8",
                                       (1, 3), (3, 8), itemsize=8),
    "desc-stream-zero": desc(STREAM, DEV_CUDA, 1, "<f4", (2,), stream=0,
                             device_id=0),
    "desc-mask": desc(MASK, DEV_CPU, 1, "<f4", (2,)),
    "desc-huge-shape": desc(0, DEV_CPU, 2, "<c16", (2**62, 4), itemsize=16),
    # Extents at the edges of 64 bits and of the address space.
    "desc-offset-near-2-63": desc(0, DEV_CPU, 1, "<u2", (4,),
                                  data=2**63 - 8, itemsize=2),
    "desc-stride-2-62": desc(STRIDES, DEV_CPU, 1, "|u1", (3,), (2**62,),
                             itemsize=1),
    "desc-stride-int64-min": desc(STRIDES, DEV_CPU, 2, "|u1", (2, 2),
                                  (-2**62, -2**62), data=2**63, itemsize=1),
    "desc-reversed-bytes": desc(STRIDES | LEGACY, DEV_CPU, 1, "|u1", (16,),
                                (-1,), data=0x7F0000001000 + 15, itemsize=1),
    "desc-reversed-below-zero": desc(STRIDES, DEV_CPU, 1, "<f4", (4,), (-4,),
                                     data=8),
    "desc-end-wraps-to-zero": desc(LEGACY, DEV_CPU, 1, "<f4", (4,),
                                   data=2**64 - 16),
    "tensor-byte-offset-2-63": tensor(0, 1, (4,), (1,), byte_offset=2**63 - 8),
    "tensor-versioned-strided": tensor(0, 2, (4, 3), (1, 4)),
    "tensor-legacy-null-strides": tensor(T_LEGACY | T_STRIDES_NULL, 2,
                                         (4, 3)),
    "tensor-byte-offset": tensor(0, 1, (3,), (1,), byte_offset=12),
    "tensor-byte-offset-wraps": tensor(0, 1, (3,), (1,),
                                       data=0xA0A0A0A0A0A0A010,
                                       byte_offset=-0x40),
    "tensor-future-major": tensor(0, 1, (3,), (1,), major=2),
    "tensor-subbyte-padded": tensor(0, 1, (8,), (1,), flags=4, code=17,
                                    bits=4),
}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(sys.argv[1], name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
