"""``generate_torch``: write readable PyTorch source for an MXNet model and return it with the weights loaded.

The model is read through ``migrate.source`` (a Gluon block, symbol/params files with MXNet or without it), its graph
translated by ``generator.module_code``, the file checked by running it, written atomically and imported.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import types

from migrate.arguments import normalize_shapes
from migrate.errors import InputFileError
from migrate.generate.generator import module_code
from migrate.generate.names import identifier
from migrate.source.reading import model_source
from mxformats.atomic import write_text

__all__ = ["generate_torch"]


def generate_torch(mx_model, input_shapes, path: str | os.PathLike, *, input_dtypes=None) -> "torch.nn.Module":
    """Write a standalone PyTorch module for ``mx_model`` to ``path`` and return an instance with its weights.

    The file imports only torch and reads as a hand-written model: ``__init__`` builds the Gluon block tree from
    torch layers (``nn.Conv2d``, ``nn.Linear``, ``nn.Embedding``, ``nn.ReLU``, pooling, ``nn.Dropout``, and layers
    keeping MXNet's semantics and names: ``BatchNorm``, a torch ``_BatchNorm``; ``LayerNorm``, ``PReLU`` ...),
    ``Block`` containers for the blocks that hold others, and ``forward`` calls them in the MXNet graph's order
    (``x = self.features[0](data)``); ops torch has no layer for are function calls. The ``state_dict`` keys mirror
    the Gluon block tree (``features.3.conv.weight``; rebuilt from MXNet's name prefixes for symbol/params files).
    Training mode follows MXNet: BatchNorm uses batch statistics and updates its running statistics as MXNet does
    (``running = running * momentum + batch * (1 - momentum)`` with the biased batch variance), ``use_global_stats``
    and ``fix_gamma`` (gamma read as 1, with zero gradient) are kept, Dropout drops in ``train()`` mode. The class
    attribute ``MXNET_NAMES`` maps each MXNet name to its key: pass it as the ``mapping`` of ``torch_optimizer``,
    ``convert_optimizer_state`` and ``convert_weights``. The module compiles without graph breaks and exports
    (docs/migrate/generation.md); ``convert_sync_batchnorm`` syncs its BatchNorm layers keeping MXNet's statistics.

    Args:
        mx_model: an initialized Gluon ``HybridBlock``, a tuple ``(symbol_json_path, params_path)`` (Module
            checkpoints included: ``arg:``/``aux:`` prefixes are dropped) or an ``MxSource`` (``migrate.source``,
            read once and shared with matching). Files are read without MXNet where MXNet is not installed (or
            ``MIGRATE_WITHOUT_MXNET=1``): the node shapes then come from running each node's translation, and the
            file written is the same as with MXNet.
        input_shapes: one input shape tuple, or a list of them for several inputs.
        path: the Python file to write (its folder must exist). The class is named after the Gluon block's class
            (or the symbol file's stem).
        input_dtypes: None (float32), one dtype, or one per input.

    Returns:
        An instance of the generated class (in training mode, like a fresh torch module), MXNet's weights loaded.

    Raises:
        UnsupportedOpError: a graph node has no translation (names the op, the node and the nearest known ops);
            nothing is written.
        InputShapeError: the shapes do not fit the model, or the graph needs an input that was not given.
        InputFileError: a symbol/params file is missing or unreadable, or a parameter has no value.
        ModelTypeError: ``mx_model`` is of an unsupported type.

    Example:
        >>> net = mxnet.gluon.model_zoo.vision.mobilenet_v2_1_0(); net.initialize()  # doctest: +SKIP
        >>> model = generate_torch(net, (1, 3, 64, 64), "mobilenet.py")  # doctest: +SKIP
        >>> opt = migrate.torch_optimizer(model, "settings.json", model.MXNET_NAMES)  # doctest: +SKIP

    Note:
        A Module checkpoint's loss head and label input are cut, as for ``name_mapping``: the module returns what
        fed the head (``SoftmaxOutput``'s logits; train it with ``CrossEntropyLoss(reduction="sum")``). A loss
        head met in a graph otherwise becomes its forward op (softmax; identity; sigmoid for the logistic one).
        Detection ops keep MXNet's fixed output shapes (NMS writes the kept boxes first and -1 rows after them), and
        where MXNet gives an op no gradient (box_decode, box_iou, MultiBoxDetection, ROI coordinates) the module
        gives none either; see docs/zoo_report.md for the GluonCV/GluonNLP models that generate.
        MXNet updates BatchNorm's running statistics in the backward pass, the generated module in the forward pass:
        the same values after each training step, but a training-mode forward without a backward changes them here
        and not in MXNet. Dropout draws torch's random numbers, not MXNet's.
    """
    shapes, dtypes = normalize_shapes(input_shapes, input_dtypes)
    source = model_source(mx_model, shapes, dtypes)
    class_name, origin = _names(source)
    code, state = module_code(source, shapes, dtypes, class_name, origin, source.block)
    module = types.ModuleType("migrate_generated_check")
    exec(compile(code, str(path), "exec"), module.__dict__)  # the whole file runs before anything is written
    getattr(module, class_name)().load_state_dict(state)
    write_text(path, code, error=InputFileError)
    model = getattr(_import(path), class_name)()
    model.load_state_dict(state)
    return model


def _names(source) -> tuple[str, str]:
    """(the class name, what the file was generated from) of ``source``: its Gluon block's class, or its symbol file
    (the stem in CamelCase)."""
    if source.block is not None:
        return identifier(type(source.block).__name__), f"Gluon block {type(source.block).__name__}"
    if source.files is not None:
        stem = os.path.basename(str(source.files[0])).split(".")[0].replace("-symbol", "")
        name = identifier("".join(part.capitalize() for part in stem.split("_")) or "Generated")
        return name, f"symbol file {os.path.basename(str(source.files[0]))}"
    return identifier(type(source).__name__), "graph"


def _import(path):
    name = f"migrate_generated_{abs(hash(os.path.abspath(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
