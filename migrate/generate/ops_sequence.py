"""Translators of MXNet's sequence and attention ops: ``SequenceMask``, ``SequenceReverse``, ``SequenceLast``, the
interleaved attention matmuls GluonNLP's BERT/RoBERTa use (``_contrib_interleaved_matmul_selfatt_qk``/``valatt``,
``..._encdec_qk``/``valatt``); the masked softmax (``softmax`` with ``use_length``) lives with ``softmax`` in
``ops``. Each translator is a pure function of the node and imports no MXNet.
"""
from __future__ import annotations

from migrate.generate.registry import OpNode, register

__all__ = []


def _length(node: OpNode):
    return node.optional_input(1) if node.attr("use_sequence_length", False) else None


def _axis(node: OpNode) -> int:
    axis = node.attr("axis", 0)
    if axis not in (0, 1):
        raise node.unsupported(f"axis={axis} (MXNet supports 0 and 1)")
    return axis


@register("SequenceMask")
def _sequence_mask(node: OpNode) -> str:
    length = _length(node)
    if length is None:
        return node.inputs[0]
    return node.call("_mx_sequence_mask", node.inputs[0], length, _axis(node), float(node.attr("value", 0.0)))


@register("SequenceReverse")
def _sequence_reverse(node: OpNode) -> str:
    if node.attr("axis", 0) != 0:
        raise node.unsupported(f"axis={node.attr('axis')} (MXNet supports 0)")
    length = _length(node)
    if length is None:
        return f"torch.flip({node.inputs[0]}, (0,))"
    return node.call("_mx_sequence_reverse", node.inputs[0], length)


@register("SequenceLast")
def _sequence_last(node: OpNode) -> str:
    return node.call("_mx_sequence_last", node.inputs[0], _length(node), _axis(node))


@register("_contrib_interleaved_matmul_selfatt_qk")
def _selfatt_qk(node: OpNode) -> str:
    return node.call("_mx_selfatt_qk", node.inputs[0], node.attr("heads"))


@register("_contrib_interleaved_matmul_selfatt_valatt")
def _selfatt_valatt(node: OpNode) -> str:
    return node.call("_mx_selfatt_valatt", *node.inputs[:2], node.attr("heads"))


@register("_contrib_interleaved_matmul_encdec_qk")
def _encdec_qk(node: OpNode) -> str:
    return node.call("_mx_encdec_qk", *node.inputs[:2], node.attr("heads"))


@register("_contrib_interleaved_matmul_encdec_valatt")
def _encdec_valatt(node: OpNode) -> str:
    return node.call("_mx_encdec_valatt", *node.inputs[:2], node.attr("heads"))
