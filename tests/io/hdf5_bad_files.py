"""Writes the HDF5 files hdf5_weights_errors_test.cpp reads: files kiln must refuse with a clear
error, and unusual but valid ones (compressed, big-endian) it must read. One file per case, named
after it, in the folder given as the only argument."""
import os
import sys

import h5py
import numpy as np


def kiln_file(path, version=np.int64(1)):
    f = h5py.File(path, "w")
    if version is not None:
        f.attrs["kiln_format_version"] = version
    return f


def main(folder):
    def p(name):
        return os.path.join(folder, name)

    with kiln_file(p("version2.h5"), np.int64(2)) as f:
        f["w"] = np.ones(3, np.float32)
    with kiln_file(p("version_string.h5"), "1") as f:
        f["w"] = np.ones(3, np.float32)
    with kiln_file(p("no_version.h5"), None) as f:
        f["w"] = np.ones(3, np.float32)
    with kiln_file(p("keras_like.h5"), None) as f:
        f.attrs["layer_names"] = np.array([b"dense"])
        f.create_group("dense").attrs["weight_names"] = np.array([], dtype="S1")

    with kiln_file(p("int16.h5")) as f:
        f.create_group("fc")["weight"] = np.arange(6, dtype=np.int16).reshape(2, 3)
    with kiln_file(p("uint64.h5")) as f:
        f.create_group("fc")["counter"] = np.arange(3, dtype=np.uint64)
    with kiln_file(p("strings.h5")) as f:
        f.create_group("meta")["names"] = np.array([b"a", b"bc"])
    with kiln_file(p("compound.h5")) as f:
        f["pairs"] = np.zeros(2, dtype=[("a", np.int32), ("b", np.float32)])
    with kiln_file(p("unknown_dtype_attr.h5")) as f:
        f["fc.w"] = np.ones(2, np.float32)  # "fc.w" is one dataset name here
        f["z"] = np.ones(2, np.float32)
        f["z"].attrs["dtype"] = "complex64"
    with kiln_file(p("contradicting_attr.h5")) as f:
        f["w"] = np.arange(4, dtype=np.int32)
        f["w"].attrs["dtype"] = "float32"
    with kiln_file(p("bfloat16_wrong_carrier.h5")) as f:
        f["w"] = np.ones(4, np.float32)
        f["w"].attrs["dtype"] = "bfloat16"
    with kiln_file(p("rank17.h5")) as f:
        f["deep"] = np.zeros((1,) * 17, np.float32)
    with kiln_file(p("null_space.h5")) as f:
        f["nothing"] = h5py.Empty("f4")
    with kiln_file(p("external.h5")) as f:
        raw = p("external.raw")
        np.arange(4, dtype=np.float32).tofile(raw)
        f.create_dataset("outside", shape=(4,), dtype=np.float32, external=[(raw, 0, 16)])
    with kiln_file(p("soft_link.h5")) as f:
        f["real"] = np.ones(2, np.float32)
        f["alias"] = h5py.SoftLink("/real")
    with kiln_file(p("cycle.h5")) as f:
        g = f.create_group("g")
        g["w"] = np.ones(2, np.float32)
        g["again"] = g  # a hard link back to itself

    # Valid: compressed chunks, big-endian data, h5py's own float16 and bool, bfloat16 bits in int16.
    with kiln_file(p("valid_unusual.h5")) as f:
        f.create_dataset("gzip", data=np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5, compression="gzip",
                         chunks=(2, 2), shuffle=True)
        f["big_endian"] = np.array([1.5, -2.0, 3.0], dtype=">f4")
        f["big_endian_i64"] = np.array([1 << 40, -5], dtype=">i8")
        f["half"] = np.array([0.5, -1.25], dtype=np.float16)
        f["flags"] = np.array([True, False, True])
        f["bf16"] = np.array([0x3F80, -16384], dtype=np.int16)  # 1.0 and -2.0 as bfloat16 bits
        f["bf16"].attrs["dtype"] = "bfloat16"
        f["named_type"] = np.dtype("f4")  # a committed datatype holds no weights: skipped


if __name__ == "__main__":
    main(sys.argv[1])
