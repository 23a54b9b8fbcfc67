#!/usr/bin/env python3
"""Checks a torch.save archive fullshard wrote with Python's own zipfile (and torch.load where
torch is installed), independently of fullshard's reader. Run by
tests/unit/checkpoint_torch_save_zip64_test.cc:

    torch_save_zip_check.py ARCHIVE EXPECT.json

EXPECT.json: {"threshold": T, "dtype": "F32"|"BF16"|"F16", "shape": [...], "data_crc": C,
"data_size": N, "data": PATH or null (the raw elements, to compare; null: do not read data/0)}.
Checks, per NOTE [Zip64 records as PyTorch writes them] in core/checkpoint/torch_save.cc: the
record names and their order; every record stored; zipfile's sizes and CRC-32s (read back and
recomputed with zlib, except data/0 when "data" is null); a record carries the zip64 extra field
(id 1) in its central and local headers exactly when its size or local header offset is >= T,
the local one before the "FB" padding; its data starts at a multiple of 64; its data descriptor
is 24 bytes with 64-bit sizes when zip64, else 16. Prints one line; exit 0 when all hold, 1 with
the first failure. With torch installed and "data" given, torch.load's tensor must hold the same
bytes (prints "torch.load: skipped (no torch)" otherwise).
"""
import json
import struct
import sys
import zipfile
import zlib

NAMES = ["data.pkl", ".format_version", ".storage_alignment", "byteorder", "data/0", "version"]
SMALL = {".format_version": b"1", ".storage_alignment": b"64", "byteorder": b"little",
         "version": b"3\n"}


def fail(msg):
    print("torch_save_zip_check: " + msg)
    sys.exit(1)


def extras(blob):
    out, p = [], 0
    while p + 4 <= len(blob):
        hid, n = struct.unpack_from("<HH", blob, p)
        out.append((hid, blob[p + 4:p + 4 + n]))
        p += 4 + n
    return out


def main():
    path, expect = sys.argv[1], json.load(open(sys.argv[2]))
    t = expect["threshold"]
    zf = zipfile.ZipFile(path)
    infos = zf.infolist()
    names = [i.filename for i in infos]
    if names != ["archive/" + n for n in NAMES]:
        fail(f"records {names}")
    f = open(path, "rb")
    zip64_records = 0
    for i in infos:
        short = i.filename[len("archive/"):]
        zip64 = i.file_size >= t or i.header_offset >= t
        zip64_records += zip64
        if i.compress_type != zipfile.ZIP_STORED or i.compress_size != i.file_size:
            fail(f"{i.filename} is not stored")
        central = extras(i.extra)
        if zip64 != any(h == 1 for h, _ in central):
            fail(f"{i.filename}: zip64 field in the central directory should be {zip64}")
        f.seek(i.header_offset)
        local = f.read(30)
        sig, flags, name_len, extra_len = (struct.unpack_from("<I", local, 0)[0],
                                           struct.unpack_from("<H", local, 6)[0],
                                           *struct.unpack_from("<HH", local, 26))
        if sig != 0x04034B50 or flags != 0x0808:
            fail(f"{i.filename}: local header {sig:#x} flags {flags:#x}")
        f.seek(i.header_offset + 30 + name_len)
        loc = extras(f.read(extra_len))
        ids = [h for h, _ in loc]
        if ids != ([1, 0x4246] if zip64 else [0x4246]):  # 0x4246: "FB"
            fail(f"{i.filename}: local extra fields {ids}")
        if zip64:
            want = (struct.pack("<QQ", i.file_size, 0) if i.file_size >= t else b"") + (
                struct.pack("<Q", i.header_offset) if i.header_offset >= t else b"")
            if loc[0][1] != want:
                fail(f"{i.filename}: local zip64 field {loc[0][1].hex()}")
        start = i.header_offset + 30 + name_len + extra_len
        if start % 64:
            fail(f"{i.filename}: data at {start}, not a multiple of 64")
        f.seek(start + i.file_size)
        desc = f.read(24 if zip64 else 16)
        fmt = "<IIQQ" if zip64 else "<IIII"
        if struct.unpack(fmt, desc) != (0x08074B50, i.CRC, i.file_size, i.file_size):
            fail(f"{i.filename}: data descriptor {desc.hex()}")
        if short == "data/0":
            if i.file_size != expect["data_size"] or i.CRC != expect["data_crc"]:
                fail(f"data/0: {i.file_size} bytes, CRC {i.CRC:#x}")
            if expect["data"] is None:
                continue
            want = open(expect["data"], "rb").read()
        else:
            want = SMALL.get(short)
        got = zf.read(i)  # zipfile checks the stored CRC-32 as it reads
        if zlib.crc32(got) != i.CRC or (want is not None and got != want):
            fail(f"{i.filename}: content or CRC differs")
    print(f"zipfile: {len(infos)} records, {zip64_records} with zip64 fields, sizes and CRC-32s "
          f"as written")
    if expect["data"] is None:
        return
    try:
        import torch
    except ImportError:
        print("torch.load: skipped (no torch)")
        return
    dtype = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}[expect["dtype"]]
    x = torch.load(path, weights_only=True)
    if x.dtype != dtype or list(x.shape) != expect["shape"]:
        fail(f"torch.load: {x.dtype} {list(x.shape)}")
    if x.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() != open(expect["data"], "rb").read():
        fail("torch.load: elements differ")
    print(f"torch.load: {x.dtype} {list(x.shape)} bit for bit (torch {torch.__version__})")


main()
