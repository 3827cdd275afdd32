"""Seeded Gluon/torch model pairs and their mappings (built once per session): the pairs the mapping tests share."""
import numpy as np

from tests.migrate import models as M

# id -> (Gluon class, Gluon args, torch class, torch kwargs, input shape, input dtype)
PAIRS = {
    "residual-body-first": (M.MxResidual, (), M.TorchResidual, {}, (2, 3, 8, 8), None),
    "residual-same-order": (M.MxResidual, (), M.TorchResidual, {"body_first": False}, (2, 3, 8, 8), None),
    "concat-nesting": (M.MxConcat, (), M.TorchConcat, {}, (2, 3, 6, 6), None),
    "depthwise-bias-fold-1x1-vs-linear": (M.MxDepthwise, (), M.TorchDepthwise, {}, (2, 6, 5, 5), None),
    "dense-stack": (M.MxDenseStack, (), M.TorchDenseStack, {}, (3, 16), None),
    "embedding": (M.MxEmbedding, (), M.TorchEmbedding, {}, (2, 5), np.int64),
    "two-inputs": (M.MxTwoInputs, (), M.TorchTwoInputs, {}, [(2, 4), (2, 6)], None),
    "stride-moved": (M.MxResidual, (1, 2), M.TorchResidual, {}, (1, 3, 8, 8), None),
    "activation-differs": (M.MxDenseStack, (), M.TorchDenseStack, {"act": "sigmoid"}, (3, 16), None),
    "extra-layer": (M.MxExtraLayer, (), M.TorchExtraLayer, {}, (1, 3, 8, 8), None),
}
EQUIVALENT = [k for k in PAIRS if k not in ("stride-moved", "extra-layer", "activation-differs")]

_CACHE = {}


def build_pair(key):
    """Return (gluon net, torch model, shape, dtype, mapping) for ``PAIRS[key]``, cached for the session."""
    if key not in _CACHE:
        import torch

        import migrate
        mx_cls, mx_args, t_cls, t_kw, shape, dtype = PAIRS[key]
        net = M.gluon(mx_cls, *mx_args)
        torch.manual_seed(0)
        model = t_cls(**t_kw)
        _CACHE[key] = (net, model, shape, dtype, migrate.name_mapping(net, model, shape, input_dtypes=dtype))
    return _CACHE[key]
