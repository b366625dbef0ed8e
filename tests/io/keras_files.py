"""Writes the Keras weight files keras_weights_test.cpp reads, in the layouts Keras itself writes
(Keras is not needed: h5py writes the same groups and attributes), and keras_ref.h5 (kiln's layout,
through scripts/torch_to_hdf5.py's write_arrays) with inputs and the outputs of Keras' math for
them, computed here with numpy in Keras' own layouts (NHWC, HWIO kernels). Usage:
keras_files.py <folder>."""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from torch_to_hdf5 import write_arrays  # noqa: E402

rng = np.random.default_rng(20240611)


def normal(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# Weights in Keras' variable order (Keras 3 numbers them in this order).
WEIGHTS = {
    "dense": {"kernel": normal(6, 4), "bias": normal(4)},
    "conv2d": {"kernel": normal(3, 3, 3, 5), "bias": normal(5)},
    "depthwise_conv2d": {"depthwise_kernel": normal(3, 3, 3, 2), "bias": normal(6)},
    "batch_normalization": {
        "gamma": normal(5),
        "beta": normal(5),
        "moving_mean": normal(5),
        "moving_variance": rng.uniform(0.5, 2.0, 5).astype(np.float32),
    },
    "dense_1": {"kernel": normal(4, 2), "bias": normal(2)},
}
NO_WEIGHTS = ["input_1", "flatten"]  # layers without weights are listed too


def list_attribute(obj, name, values, pieces):
    """Keras' save_attributes_to_hdf5_group: one attribute, or name0, name1, ... when long."""
    if not values:
        obj.attrs[name] = np.asarray([])  # Keras writes an empty list as an empty float64 array
        return
    data = np.array([v.encode("utf8") for v in values])
    if pieces == 1:
        obj.attrs[name] = data
        return
    for i, chunk in enumerate(np.array_split(data, pieces)):
        obj.attrs[f"{name}{i}"] = chunk


def legacy(path, under_model_weights=False, split=False, keras3_paths=False):
    with h5py.File(path, "w") as f:
        if under_model_weights:  # model.save's full-model file
            f.attrs["model_config"] = "{}"
            f.create_group("optimizer_weights")["iterations:0"] = np.int64(7)
            base = f.create_group("model_weights")
        else:
            base = f
        layers = NO_WEIGHTS + list(WEIGHTS)
        list_attribute(base, "layer_names", layers, 3 if split else 1)
        base.attrs["backend"] = b"tensorflow"
        base.attrs["keras_version"] = b"2.15.0"
        for layer in layers:
            g = base.create_group(layer)
            weights = WEIGHTS.get(layer, {})
            if keras3_paths:  # Keras 3's legacy_h5_format names weights by variable path
                # (and calls a depthwise kernel just "kernel")
                names = [f"sequential/{layer}/{'kernel' if w == 'depthwise_kernel' else w}" for w in weights]
            else:  # tf.keras: "<layer>/<weight>:0"
                names = [f"{layer}/{w}:0" for w in weights]
            list_attribute(g, "weight_names", names, 2 if split and len(names) > 2 else 1)
            for name, value in zip(names, weights.values()):
                g.create_dataset(name, data=value)


def keras3(path, nested=False, layers=None):
    layers = layers or WEIGHTS
    with h5py.File(path, "w") as f:
        f.create_group("vars")  # the model's own variables: none
        top = f.create_group("layers")
        holder = top.create_group("functional").create_group("layers") if nested else top
        holder.create_group("flatten").create_group("vars")  # no variables
        for layer, weights in layers.items():
            v = holder.create_group(layer).create_group("vars")
            for i, value in enumerate(weights.values()):
                v[str(i)] = value
        opt = f.create_group("optimizer").create_group("vars")
        opt["0"] = np.int64(3)
        opt["1"] = normal(6, 4)


def conv_nhwc(x, k, b):
    """Keras Conv2D, padding 'valid', stride 1: x (N, H, W, C), k (kh, kw, C, O)."""
    kh, kw = k.shape[:2]
    ho, wo = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], ho, wo, k.shape[3]))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nhwc,co->nhwo", x[:, i : i + ho, j : j + wo, :].astype(np.float64), k[i, j])
    return out + b


def depthwise_nhwc(x, k, b):
    """Keras DepthwiseConv2D, 'valid', stride 1: k (kh, kw, C, M); output channel c*M + m."""
    kh, kw, c, m = k.shape
    ho, wo = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    out = np.zeros((x.shape[0], ho, wo, c, m))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nhwc,cm->nhwcm", x[:, i : i + ho, j : j + wo, :].astype(np.float64), k[i, j])
    return out.reshape(x.shape[0], ho, wo, c * m) + b


def references(path):
    w = WEIGHTS
    refs = {}
    x = normal(5, 6)
    refs["dense.x"], refs["dense.y"] = x, x.astype(np.float64) @ w["dense"]["kernel"] + w["dense"]["bias"]
    x = normal(3, 4)
    refs["dense_1.x"], refs["dense_1.y"] = x, x.astype(np.float64) @ w["dense_1"]["kernel"] + w["dense_1"]["bias"]
    x = normal(2, 7, 7, 3)
    refs["conv.x"], refs["conv.y"] = x, conv_nhwc(x, w["conv2d"]["kernel"], w["conv2d"]["bias"])
    d = w["depthwise_conv2d"]
    refs["depthwise.x"], refs["depthwise.y"] = x, depthwise_nhwc(x, d["depthwise_kernel"], d["bias"])
    bn = w["batch_normalization"]
    x = normal(8, 5)
    refs["bn.x"] = x
    refs["bn.y"] = (x - bn["moving_mean"]) / np.sqrt(bn["moving_variance"].astype(np.float64) + 1e-3) * bn[
        "gamma"
    ] + bn["beta"]
    write_arrays({k: v.astype(np.float32) for k, v in refs.items()}, path)


def main(folder):
    def p(name):
        return os.path.join(folder, name)

    legacy(p("legacy.h5"))
    legacy(p("legacy_split.h5"), under_model_weights=True, split=True, keras3_paths=True)
    keras3(p("model.weights.h5"))
    keras3(p("nested.weights.h5"), nested=True)
    bn3 = {"batch_normalization": {k: WEIGHTS["batch_normalization"][k] for k in ("gamma", "moving_mean", "moving_variance")}}
    keras3(p("bn3.weights.h5"), layers=bn3)
    with h5py.File(p("missing_group.h5"), "w") as f:
        list_attribute(f, "layer_names", ["dense", "ghost"], 1)
        g = f.create_group("dense")
        list_attribute(g, "weight_names", ["dense/kernel:0"], 1)
        g["dense/kernel:0"] = WEIGHTS["dense"]["kernel"]
    with h5py.File(p("missing_weight.h5"), "w") as f:
        list_attribute(f, "layer_names", ["dense"], 1)
        g = f.create_group("dense")
        list_attribute(g, "weight_names", ["dense/kernel:0", "dense/bias:0"], 1)
        g["dense/kernel:0"] = WEIGHTS["dense"]["kernel"]
    references(p("keras_ref.h5"))


if __name__ == "__main__":
    main(sys.argv[1])
