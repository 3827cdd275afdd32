"""The op families of ``generate_torch``: each module holds the translators of its MXNet ops and the helper
functions and layer classes they emit into generated files (its ``__all__``). Importing this package fills the
translator registry.

Adding an op: a ``@register("op")`` translator in the module of its family (and, where torch has no one-line
equivalent, a helper in the same module, listed in its ``__all__``), and a row in
``tests/migrate/generate/test_generate_ops.py``.
"""
from migrate.generate.ops import (activations, control_flow, creation, detection, elementwise, indexing, layers,
                                  linalg, normalization, numpy_interface, quantized, quantized_rnn, recurrent,
                                  reduction, sampling, sequence, shape, vision)

__all__ = ["FAMILIES"]

FAMILIES = (layers, activations, normalization, elementwise, shape, reduction, linalg, indexing, creation, sequence,
            recurrent, vision, detection, numpy_interface, sampling, control_flow, quantized, quantized_rnn)
"""The op family modules, in the order their emitted objects are written into a file."""
