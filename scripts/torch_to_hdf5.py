#!/usr/bin/env python3
"""Export a PyTorch state_dict to kiln's HDF5 weights layout (see io/hdf5_weights.h).

    python3 scripts/torch_to_hdf5.py state_dict.pt out.h5 [--skip-num-batches-tracked]
                                     [--meta key=value ...]

or, from Python:

    from torch_to_hdf5 import export_state_dict
    export_state_dict(model.state_dict(), "out.h5")

Layout: one dataset per tensor in groups following the dotted key ("layers.0.weight" ->
/layers/0/weight, groups tracking creation order so the state_dict order is kept), a string
attribute `dtype` on each naming the kiln dtype, bfloat16 stored as uint16 (its bits), the root
attribute `kiln_format_version` = 1 and the metadata as root string attributes. kiln's dtypes are
bool, uint8, int8, int32, int64, uint32, float16, bfloat16, float32 and float64; a tensor of
another dtype (int16, complex, quantized) is refused, naming its key. num_batches_tracked is kept:
kiln's BatchNorm has the slot (pass skip_num_batches_tracked for models that lack it). The file is
written under a temporary name beside `path`, fsync'd and renamed, so a failed export never leaves
a half-written file.

write_arrays() does the same for numpy arrays and needs only numpy and h5py.
"""
import argparse
import os
import sys

FORMAT_VERSION = 1

# numpy dtype name -> kiln dtype name (kiln names its dtypes as numpy does).
_NUMPY_TO_KILN = {
    "bool": "bool",
    "uint8": "uint8",
    "int8": "int8",
    "int32": "int32",
    "int64": "int64",
    "uint32": "uint32",
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
}


def _check_keys(keys):
    """Every key must become a path of groups ending in a dataset (as kiln's save_weights checks)."""
    for key in keys:
        parts = key.split(".")
        if any(p == "" for p in parts):
            raise KeyError(f"key has an empty component: '{key}'")
        if "/" in key:
            raise KeyError(f"key holds '/', HDF5's path separator: '{key}'")
    ordered = sorted(keys)
    for i, key in enumerate(ordered):
        # Keys that extend `key` sort right after it ("a", "a.b"); other keys may sit between ("a-b").
        for other in ordered[i + 1 :]:
            if other.startswith(key + "."):
                raise KeyError(f"keys collide as HDF5 groups: '{key}' is a dataset but '{other}' needs it to be a group")
            if not other.startswith(key):
                break


def write_arrays(arrays, path, metadata=None):
    """Writes numpy arrays in kiln's layout. `arrays` maps dotted keys to numpy arrays or to
    (array, kiln dtype name) pairs; the dtype name defaults to the array's ("bfloat16" must be
    given, with the uint16 bits as the array)."""
    import h5py
    import numpy as np

    metadata = dict(metadata or {})
    if "kiln_format_version" in metadata:
        raise ValueError("metadata may not use the key 'kiln_format_version'")
    items = []
    for key, value in arrays.items():
        arr, dtype = value if isinstance(value, tuple) else (value, None)
        arr = np.asarray(arr, order="C")  # (np.ascontiguousarray would make 0-d arrays 1-d)
        if dtype is None:
            dtype = _NUMPY_TO_KILN.get(arr.dtype.name)
            if dtype is None:
                raise TypeError(f"'{key}': {arr.dtype.name} has no kiln dtype")
        elif dtype == "bfloat16":
            if arr.dtype != np.uint16:
                raise TypeError(f"'{key}': bfloat16 bits must be given as uint16, got {arr.dtype.name}")
        elif _NUMPY_TO_KILN.get(arr.dtype.name) != dtype:
            raise TypeError(f"'{key}': dtype {dtype} does not match the array's {arr.dtype.name}")
        items.append((key, arr, dtype))
    _check_keys([k for k, _, _ in items])

    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w", track_order=True) as f:
            f.attrs["kiln_format_version"] = np.int64(FORMAT_VERSION)
            for k, v in metadata.items():
                f.attrs[k] = str(v)
            for key, arr, dtype in items:
                parts = key.split(".")
                group = f
                for p in parts[:-1]:
                    group = group[p] if p in group else group.create_group(p, track_order=True)
                dset = group.create_dataset(parts[-1], data=arr)
                dset.attrs["dtype"] = dtype
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    try:
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the file itself is synced


def export_state_dict(state_dict, path, metadata=None, skip_num_batches_tracked=False):
    """Writes a PyTorch state_dict (a mapping of dotted keys to tensors) in kiln's layout."""
    import numpy as np
    import torch

    arrays = {}
    for key, t in state_dict.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"'{key}' is a {type(t).__name__}, not a tensor")
        if skip_num_batches_tracked and key.split(".")[-1] == "num_batches_tracked":
            continue
        if t.is_quantized or t.is_sparse or t.is_complex():
            raise TypeError(f"'{key}': quantized, sparse and complex tensors have no kiln dtype")
        t = t.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            arrays[key] = (t.view(torch.int16).numpy().view(np.uint16), "bfloat16")
        else:
            arr = t.numpy()
            if arr.dtype.name not in _NUMPY_TO_KILN:
                raise TypeError(f"'{key}': {t.dtype} has no kiln dtype")
            arrays[key] = arr
    write_arrays(arrays, path, metadata)


def _load_state_dict(source):
    import torch

    obj = torch.load(source, map_location="cpu")
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict) and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj
    raise TypeError(f"{source}: expected a state_dict (a dict of tensors) or a torch.nn.Module, got {type(obj).__name__}")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Export a PyTorch state_dict to kiln's HDF5 weights layout.")
    parser.add_argument("state_dict", help="a file written by torch.save(model.state_dict(), ...)")
    parser.add_argument("out", help="the HDF5 file to write")
    parser.add_argument("--skip-num-batches-tracked", action="store_true", help="leave out BatchNorm counters")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="a root string attribute")
    args = parser.parse_args(argv)
    metadata = {}
    for item in args.meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--meta expects KEY=VALUE, got '{item}'")
        metadata[key] = value
    export_state_dict(_load_state_dict(args.state_dict), args.out, metadata, args.skip_num_batches_tracked)
    return 0


if __name__ == "__main__":
    sys.exit(main())
