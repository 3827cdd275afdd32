"""The headline case: mxnet.gluon.model_zoo.vision networks (random init) against torchvision's counterparts.

Each pair is either mapped and verified (every node and the output within tolerance) or reported as not
equivalent with the reason and the names on both sides. BatchNorm statistics are perturbed so that a wrong
mapping cannot hide behind identity statistics.
"""
import mxnet as mx
import numpy as np
import pytest
import torchvision
from mxnet.gluon.model_zoo import vision

import migrate

pytestmark = pytest.mark.slow


def _zoo(name, shape):
    mx.random.seed(0)
    net = getattr(vision, name)()
    net.initialize()
    net(mx.nd.zeros(shape))
    rng = np.random.default_rng(0)
    for p in net.collect_params().values():
        if p.name.endswith(("running_var", "gamma")):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
        elif p.name.endswith(("running_mean", "beta")):
            p.set_data(mx.nd.array(rng.normal(0.0, 0.1, p.shape)))
    return net


# mxnet name, torchvision name, input shape, names that must pair (MXNet -> torch)
EQUIVALENT = [
    ("resnet18_v1", "resnet18", (1, 3, 64, 64),
     {"stage1_conv0_weight": "layer1.0.conv1.weight", "stage2_conv2_weight":
      "layer2.0.downsample.0.weight", "stage2_batchnorm2_running_var": "layer2.0.downsample.1.running_var",
      "stage4_batchnorm4_gamma": "layer4.1.bn2.weight", "dense0_weight": "fc.weight"}),
    ("squeezenet1_0", "squeezenet1_0", (1, 3, 224, 224),
     {"conv1_weight": "features.3.squeeze.weight", "conv2_weight":
      "features.3.expand1x1.weight", "conv3_weight": "features.3.expand3x3.weight",
      "conv25_bias": "classifier.1.bias"}),
    ("densenet121", "densenet121", (1, 3, 224, 224),
     {"stage1_conv0_weight": "features.denseblock1.denselayer1.conv1.weight",
      "stage4_batchnorm31_running_mean": "features.denseblock4.denselayer16.norm2.running_mean",
      "batchnorm4_gamma": "features.norm5.weight", "dense0_weight": "classifier.weight"}),
    ("inception_v3", "inception_v3", (1, 3, 299, 299), {"conv0_weight": "Conv2d_1a_3x3.conv.weight",
                                                         "dense0_weight": "fc.weight"}),
]


@pytest.mark.parametrize("mx_name,tv_name,shape,truth", EQUIVALENT, ids=[e[0] for e in EQUIVALENT])
def test_equivalent_pairs_map_and_verify(mx_name, tv_name, shape, truth):
    """Every parameter and buffer maps, the sampled names are right, every node matches within 1e-5 (relative
    above magnitude 1)."""
    kwargs = {"aux_logits": False, "init_weights": False} if tv_name == "inception_v3" else {}
    net, model = _zoo(mx_name, shape), getattr(torchvision.models, tv_name)(**kwargs)
    mapping = migrate.name_mapping(net, model, shape)
    assert mapping.ok, (mapping.differences, mapping.unmatched_mx, mapping.unmatched_torch)
    assert len(mapping) == len(list(net.collect_params().keys()))
    assert set(mapping.values()) | set(mapping.torch_defaults) == set(model.state_dict())
    truth = {net.prefix + k: v for k, v in truth.items()}
    assert {k: mapping[k] for k in truth} == truth
    report = migrate.verify(net, model, mapping, shape)
    assert report.ok, str(report)
    assert all(r.max_abs_diff is not None for r in report.rows), str(report)


def test_resnet50_v1_puts_the_stride_elsewhere():
    """model-zoo resnet50_v1 strides the first 1x1 conv of a downsampling bottleneck, torchvision (v1.5) the 3x3:
    every name pairs, the strides are reported on both convs of stages 2-4, and verify diverges there."""
    net, model = _zoo("resnet50_v1", (1, 3, 64, 64)), torchvision.models.resnet50()
    mapping = migrate.name_mapping(net, model, (1, 3, 64, 64))
    assert not mapping.unmatched_mx and not mapping.unmatched_torch and not mapping.ok
    expected, p = [], net.prefix
    for stage in (2, 3, 4):
        expected += [f"MXNet Conv '{p}stage{stage}_conv0_weight' vs torch Conv "
                     f"'layer{stage}.0.conv1.weight': strides (2, 2) vs (1, 1)",
                     f"MXNet Conv '{p}stage{stage}_conv1_weight' vs torch Conv "
                     f"'layer{stage}.0.conv2.weight': strides (1, 1) vs (2, 2)"]
    assert sorted(mapping.differences) == sorted(expected)
    report = migrate.verify(net, model, mapping, (1, 3, 64, 64))
    assert not report.ok
    assert (report.first_divergence.mx_node, report.first_divergence.torch_node) == (
        f"{p}stage2_conv0_fwd", "layer2.0.conv1")


def test_mobilenet_v2_has_an_extra_expansion_conv():
    """model-zoo mobilenet_v2 expands the first bottleneck (t=1) with a 1x1 conv + BN that torchvision omits:
    exactly those five MXNet tensors are unmatched, everything else pairs."""
    net, model = _zoo("mobilenet_v2_1_0", (1, 3, 64, 64)), torchvision.models.mobilenet_v2()
    mapping = migrate.name_mapping(net, model, (1, 3, 64, 64))
    prefix = f"{net.prefix}features_linearbottleneck0_"
    assert sorted(mapping.unmatched_mx) == sorted(
        [f"{prefix}conv0_weight"] + [f"{prefix}batchnorm0_{s}" for s in ("gamma", "beta", "running_mean",
                                                                          "running_var")])
    assert mapping.unmatched_torch == []
    assert any(f"'{prefix}conv0_weight'" in d and "no counterpart in the torch model" in d
               for d in mapping.differences)
    assert mapping[f"{prefix}conv1_weight"] == "features.1.conv.0.0.weight"
