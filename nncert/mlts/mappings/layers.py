"""TFLite importer mappings of the layers family: POW. (SPLIT stays in
``nncert.mlts.tflite_mappings``, beside SPLIT_V, whose slices it shares; CHANNEL_SHUFFLE and
INSTANCE_NORMALIZATION are no TFLite builtins.)"""

from __future__ import annotations

from collections.abc import Callable

from nncert.hal.types import OperationType as Op
from nncert.mlts.tflite_graph import Node


def _pow(n: Node) -> None:
    n.emit(Op.POW, [n.x(0), n.x(1)])


MAPPINGS: dict[str, Callable[[Node], None]] = {"POW": _pow}
