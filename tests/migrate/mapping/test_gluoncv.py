"""GluonCV model-zoo networks (random init) against torchvision's: mapped, copied and compared, or differences named."""
import importlib.util
import sys
import types

import numpy as np
import pytest

import migrate

SHAPE = (1, 3, 64, 64)


@pytest.fixture(scope="module")
def model_zoo():
    """gluoncv.model_zoo without gluoncv/__init__.py: it refuses torch >= 2, and its data package imports scipy
    and portalocker (not installed, and not used by the model definitions), which are stubbed while importing."""
    spec = importlib.util.find_spec("gluoncv")
    if spec is None:
        pytest.skip("gluoncv is not installed (a test-only extra: pip install --no-deps gluoncv==0.10.5)")
    saved = sys.modules.get("gluoncv")
    pkg = types.ModuleType("gluoncv")
    pkg.__path__ = list(spec.submodule_search_locations)
    sys.modules["gluoncv"] = pkg
    stubs = [k for k in ("scipy", "scipy.io", "portalocker") if importlib.util.find_spec(k.split(".")[0]) is None]
    for name in stubs:
        sys.modules[name] = types.ModuleType(name)
    try:
        import gluoncv.model_zoo as zoo
    finally:
        for name in stubs:
            del sys.modules[name]
    yield zoo
    for k in [k for k in sys.modules if k == "gluoncv" or k.startswith("gluoncv.")]:
        del sys.modules[k]
    if saved is not None:
        sys.modules["gluoncv"] = saved


def _gluon(zoo, name):
    import mxnet as mx
    mx.random.seed(0)
    net = zoo.get_model(name, pretrained=False)
    net.initialize(mx.init.Xavier(rnd_type="gaussian", magnitude=2))
    net(mx.nd.zeros(SHAPE))
    rng = np.random.default_rng(0)
    for pname, p in net.collect_params().items():  # BatchNorm away from identity so a swapped pair would show
        if pname.endswith(("gamma", "running_var")):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
        elif pname.endswith(("beta", "running_mean")):
            p.set_data(mx.nd.array(rng.uniform(-0.2, 0.2, p.shape)))
    return net


def _torchvision(name):
    import torch
    import torchvision
    torch.manual_seed(0)
    return getattr(torchvision.models, name)()


@pytest.mark.parametrize("gluon_name,tv_name", [("resnet18_v1b", "resnet18"), ("mobilenetv2_1.0", "mobilenet_v2")])
def test_equivalent_pairs(model_zoo, gluon_name, tv_name):
    """Every tensor maps; the copied torchvision model gives GluonCV's logits within 1e-4 relative."""
    import mxnet as mx
    import torch
    net, model = _gluon(model_zoo, gluon_name), _torchvision(tv_name)
    mapping = migrate.name_mapping(net, model, SHAPE)
    assert mapping.ok, mapping.differences[:5]
    assert len(mapping) == len(list(net.collect_params()))
    model.load_state_dict(migrate.convert_weights({k: p.data() for k, p in net.collect_params().items()},
                                                  mapping, model))
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    want = net(mx.nd.array(x)).asnumpy()
    with torch.no_grad():
        got = model.eval()(torch.from_numpy(x)).numpy()
    scale = np.abs(want).max()
    assert scale > 0.1
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * scale)


def test_mobilenet_v3_small_differences_named(model_zoo):
    """GluonCV's hard-swish (x * relu6(x + 3) / 6) matches torchvision's Hardswish; what differs is named: BatchNorm
    eps/momentum (1e-5/0.9 vs 1e-3/0.99 in MXNet's convention) and the head (1280 vs 1024 hidden units)."""
    net, model = _gluon(model_zoo, "mobilenetv3_small"), _torchvision("mobilenet_v3_small")
    mapping = migrate.name_mapping(net, model, SHAPE)
    assert not mapping.ok
    bn = [d for d in mapping.differences if ": epsilon 1e-05 vs 0.001" in d or ": momentum 0.9 vs 0.99" in d]
    rest = [d for d in mapping.differences if d not in bn]
    n_bn = sum(1 for k in model.state_dict() if k.endswith("running_var"))
    assert len(bn) == 2 * n_bn
    assert rest == ["torch Gemm 'classifier.0.weight' ('linear', 1024, 576) has no counterpart in the MXNet model",
                    "torch Gemm 'classifier.3.weight' ('linear', 1000, 1024) has no counterpart in the MXNet model",
                    "MXNet Conv 'last-1x1-conv2-conv2d_weight' ('linear', 1280, 576) has no counterpart in the torch "
                    "model",
                    "MXNet Conv 'output_fc_weight' ('linear', 1000, 1280) has no counterpart in the torch model"]
    assert not any("activation" in d for d in mapping.differences)
