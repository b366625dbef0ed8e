"""Builds seeded PyTorch models that mirror kiln models key for key, exports their state_dicts with
scripts/torch_to_hdf5.py and writes fixed inputs and PyTorch's outputs for torch_export_test.cpp.
One process for everything (importing torch dominates the run time). Usage:
torch_export_models.py <folder>.

  mlp.h5       models::Mlp({20, {32, 16}, 5}, relu)          export_state_dict
  lenet.h5     models::LeNet()                               the command line, from a torch.save file
  encoder.h5   two nn::TransformerEncoderLayer (d 16, 4 heads, ff 32; the second pre-norm with gelu)
  bn.h5        nn::BatchNorm1d(5) after three training steps (num_batches_tracked = 3)
  mlp_bf16.h5  the MLP's state_dict in bfloat16
  io.h5        <model>.x and <model>.y: inputs and PyTorch's eval-mode outputs (float32)
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import torch_to_hdf5  # noqa: E402


class Mlp(nn.Module):
    """models::Mlp: layers.0 ... layers.n, relu between them."""

    def __init__(self, sizes):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return x


class LeNet(nn.Module):
    """models::LeNet for 28x28 single-channel images."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.reshape(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class Encoder(nn.Module):
    """layers.0 (post-norm, relu) and layers.1 (pre-norm, gelu), built separately so they differ
    (nn.TransformerEncoder would deep-copy one layer)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(
            [
                nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True),
                nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True, norm_first=True,
                                           activation="gelu"),
            ]
        )

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def main(folder):
    def p(name):
        return os.path.join(folder, name)

    torch.manual_seed(0)
    mlp = Mlp([20, 32, 16, 5])
    lenet = LeNet()
    encoder = Encoder()
    bn = nn.BatchNorm1d(5)
    with torch.no_grad():
        # Biases and norms start at 0 and 1; noise makes a swapped or dropped parameter visible.
        for param in encoder.parameters():
            param.add_(0.1 * torch.randn_like(param))
        bn.weight.add_(torch.randn(5))
        bn.bias.add_(torch.randn(5))
        for _ in range(3):
            bn(torch.randn(16, 5) * 2 + 1)  # training mode: updates the running statistics
    for m in (mlp, lenet, encoder, bn):
        m.eval()

    inputs = {
        "mlp": torch.randn(8, 20),
        "lenet": torch.randn(4, 1, 28, 28),
        "encoder": torch.randn(3, 7, 16),
        "bn": torch.randn(6, 5),
    }
    arrays = {}
    with torch.no_grad():
        for name, model in (("mlp", mlp), ("lenet", lenet), ("encoder", encoder), ("bn", bn)):
            arrays[f"{name}.x"] = inputs[name].numpy()
            arrays[f"{name}.y"] = model(inputs[name]).numpy()
    torch_to_hdf5.write_arrays(arrays, p("io.h5"))

    torch_to_hdf5.export_state_dict(mlp.state_dict(), p("mlp.h5"))
    torch_to_hdf5.export_state_dict(encoder.state_dict(), p("encoder.h5"))
    torch_to_hdf5.export_state_dict(bn.state_dict(), p("bn.h5"))
    torch_to_hdf5.export_state_dict({k: v.to(torch.bfloat16) for k, v in mlp.state_dict().items()}, p("mlp_bf16.h5"))
    torch.save(lenet.state_dict(), p("lenet.pt"))
    status = torch_to_hdf5.main([p("lenet.pt"), p("lenet.h5"), "--meta", "source=torch", "--meta", "model=lenet"])
    if status != 0:
        sys.exit(status)


if __name__ == "__main__":
    main(sys.argv[1])
