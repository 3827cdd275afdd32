"""Generated modules under torch.compile and torch.export: no graph breaks (train and eval mode) in generated
resnet50_v1, mobilenetv2_1.0, GluonCV's mobilenetv3_large, a GluonNLP BERT and a GluonNLP transformer decoder;
``torch.compile(fullgraph=True)`` trains them (backend "aot_eager": it traces the forward and the backward as inductor
would, without compiling kernels, which 2 CPU cores cannot afford in a test) to the numbers of the eager step; and
``torch.export.export`` with a dynamic batch dimension exports the classifiers and BERT, whose exported program runs
another batch size as the module does.

Before these layers (one Tensor.item() per BatchNorm for its float32 momentum), dynamo found 61 graph breaks in
resnet50_v1, 62 in mobilenetv2_1.0 and 55 in mobilenetv3_large, in both modes.
"""
import mxnet as mx
import numpy as np
import pytest
import torch
from mxnet.gluon.model_zoo import vision

from migrate.generate import generate_torch
from tests.migrate.generate.test_generate_zoo import small_bert, transformer_decoder
from tests.migrate.mapping.test_gluoncv import model_zoo  # noqa: F401  (fixture: gluoncv's zoo next to torch >= 2)

pytestmark = pytest.mark.slow
TOL = 1e-5


def _image(seed=0):
    return np.random.RandomState(seed).randn(2, 3, 32, 32).astype(np.float32)


_MODELS = {"resnet50_v1": lambda zoo: (vision.resnet50_v1(classes=10), [_image()]),
           "mobilenetv2_1.0": lambda zoo: (vision.mobilenet_v2_1_0(classes=10), [_image()]),
           "mobilenetv3_large": lambda zoo: (zoo.get_model("mobilenetv3_large", pretrained=False, classes=10),
                                             [_image()]),
           "bert": lambda zoo: small_bert(dropout=0.1), "transformer_decoder": lambda zoo: transformer_decoder(0.1)}


@pytest.fixture(scope="module")
def generated(model_zoo, tmp_path_factory):  # noqa: F811
    """name -> (generated module, torch inputs) for each model of ``_MODELS`` (random weights, seeded)."""
    folder = tmp_path_factory.mktemp("compile")
    out = {}
    for name, make in _MODELS.items():
        net, inputs = make(model_zoo)
        mx.random.seed(0)
        net.initialize(mx.init.Xavier(magnitude=2.0))
        net(*[mx.nd.array(x) for x in inputs])
        model = generate_torch(net, [x.shape for x in inputs], folder / f"{name.replace('.', '_')}.py")
        out[name] = (model, [torch.from_numpy(x) for x in inputs])
    return out


def _listed(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", list(_MODELS))
def test_no_graph_breaks(generated, name, train):
    """torch._dynamo.explain traces the whole forward as one graph."""
    model, inputs = generated[name]
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model.train(train))(*inputs)
    assert explained.graph_break_count == 0, [str(r.reason)[:200] for r in explained.break_reasons]
    assert explained.graph_count == 1


@pytest.mark.parametrize("name", ["mobilenetv3_large", "bert", "transformer_decoder"])
def test_fullgraph_training_step(generated, name):
    """One SGD step through torch.compile(fullgraph=True, backend="aot_eager") gives the eager step's loss,
    running statistics and weights (Dropout off: p=0 is set on a copy, as random masks differ)."""
    model, inputs = generated[name]
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        copy = type(model)()
        copy.load_state_dict(model.state_dict())
        for layer in copy.modules():
            if isinstance(layer, torch.nn.Dropout):
                layer.p = 0.0
        optimizer = torch.optim.SGD(copy.parameters(), lr=0.1)
        torch._dynamo.reset()
        run = torch.compile(copy, fullgraph=True, backend="aot_eager") if compiled else copy
        loss = sum(o.float().pow(2).mean() for o in _listed(run(*inputs)))
        loss.backward()
        optimizer.step()
        results.append((float(loss.detach()), {k: v.detach().clone() for k, v in copy.state_dict().items()}))
    (eager_loss, eager_state), (compiled_loss, compiled_state) = results
    assert abs(compiled_loss - eager_loss) <= TOL * max(1.0, abs(eager_loss))
    for key, value in eager_state.items():
        diff = float((compiled_state[key].double() - value.double()).abs().max()) if value.numel() else 0.0
        assert diff <= TOL * max(1.0, float(value.double().abs().max())), f"{key}: differs by {diff:.3g}"


@pytest.mark.parametrize("name", ["resnet50_v1", "mobilenetv3_large", "bert"])
def test_export_with_dynamic_batch(generated, name):
    """torch.export.export with a dynamic batch dimension; the exported program, run on a batch of 4 (exported at
    2), gives the module's eval outputs."""
    model, inputs = generated[name]
    model.eval()
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(model, tuple(inputs), dynamic_shapes=tuple({0: batch} for _ in inputs))
    bigger = [torch.cat([x, x.flip(0)]) for x in inputs]
    with torch.no_grad():
        want, got = _listed(model(*bigger)), _listed(program.module()(*bigger))
    assert len(got) == len(want) and got[0].shape[0] == 4
    for w, g in zip(want, got):
        assert float((w - g).abs().max()) <= TOL * max(1.0, float(w.abs().max()))
