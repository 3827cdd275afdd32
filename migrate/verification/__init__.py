"""A torch model compared with the MXNet model node by node: ``verify`` (eval mode: the weights copied by the
mapping, both run on one seeded input, each matched node and the final outputs within a tolerance), ``nodes`` (which
MXNet op pairs with which torch module, the seeded inputs, how two outputs differ; ``migrate.check`` reads them too)
and ``input_transforms`` (an input scaling only one model has, named as the likely cause of a first divergence).

The MXNet side is the source's (``MxSource.node_outputs``): MXNet itself, or the graph's torch translation where the
files were read without MXNet.
"""
from migrate.verification.input_transforms import input_transform_cause
from migrate.verification.verify import NodeCheck, VerifyReport, verify

__all__ = ["NodeCheck", "VerifyReport", "input_transform_cause", "verify"]
