"""torch twins of the MXNet nets the cross-environment tests train (no MXNet here: importable in ./.venv-torch)."""
import torch

#: The MLP of ``tests.migrate._mx_reference``: sizes, tanh between layers, MXNet name -> torch key.
MLP_SIZES = (5, 7, 6, 3)
MLP_MAPPING = {f"mlp_fc{i}_{kind}": f"{2 * i}.{kind}" for i in range(3) for kind in ("weight", "bias")}


def mlp(dtype=torch.float32) -> torch.nn.Sequential:
    """The torch twin of ``tests.migrate._mx_reference.mx_net`` (Linear-Tanh-Linear-Tanh-Linear)."""
    layers = []
    for i in range(len(MLP_SIZES) - 1):
        layers.append(torch.nn.Linear(MLP_SIZES[i], MLP_SIZES[i + 1]))
        if i < len(MLP_SIZES) - 2:
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers).to(dtype)


class BnDepthwiseNet(torch.nn.Module):
    """The twin of ``tests.test_torch_env.MxBnDepthwise``: conv-BN-relu, a depthwise conv-BN-relu, pool, dense."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.dw_bn = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.relu(self.dw_bn(self.dw(x)))
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def bn_depthwise_net() -> BnDepthwiseNet:
    """Factory ``migrate all --torch tests.torch_side.models:bn_depthwise_net`` builds."""
    torch.manual_seed(0)
    return BnDepthwiseNet()


class ModuleBnTwin(torch.nn.Module):
    """The twin of ``tests.migrate.mapping.test_module_batchnorm.bn_symbol`` (a Module checkpoint): conv (no bias),
    BatchNorm2d with MXNet's eps, a per-channel PReLU, global average pool, linear."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(4, eps=1e-3, momentum=0.1)
        self.relu1 = torch.nn.PReLU(4)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        x = self.relu1(self.bn1(self.conv1(x)))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def module_bn_twin() -> ModuleBnTwin:
    """Factory ``migrate all --torch tests.torch_side.models:module_bn_twin`` builds."""
    torch.manual_seed(0)
    return ModuleBnTwin()


#: The sizes of ``sharded_net``: a 3-row layer (2 and 1 rows on 2 ranks) and a 1-element bias (rank 1 holds none).
SHARDED_SIZES = (5, 3, 4, 1)


def sharded_net() -> torch.nn.Sequential:
    """Linear-BatchNorm1d-Tanh-Linear-Tanh-Linear (5 -> 3 -> 4 -> 1), seeded: on 2 ranks its tensors split unevenly
    and the last bias (1 element) lies on rank 0 alone. Any values: ``load_migration`` overwrites them."""
    torch.manual_seed(3)
    a, b, c, d = SHARDED_SIZES
    return torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.BatchNorm1d(b), torch.nn.Tanh(), torch.nn.Linear(b, c),
                               torch.nn.Tanh(), torch.nn.Linear(c, d))
