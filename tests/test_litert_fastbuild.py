"""The LiteRT exporter's FastBuilder writes what flatbuffers.Builder writes, byte for byte, on
one random graph of every cell of the CTS matrix (each operation alone, small and large
graphs of every type and rank) and on the control-flow models (IF, WHILE: several subgraphs)."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("ai_edge_litert")
import flatbuffers

import nncert.drivers.litert  # noqa: F401 - the package's ``export`` hides the module's name
from nncert.hal.transform import widen_float16
from nncert.testing import random_graphs as rg
from nncert.testing.control_flow_models import counting_while_model, doubling_while_model, if_model
from nncert.testing.graphs import matrix, seeded

export = sys.modules["nncert.drivers.litert.export"]


def _both(model):
    """The model exported by each builder (or what each raised)."""
    out = []
    for builder in (flatbuffers.Builder, export.FastBuilder):
        export.BUILDER = builder
        try:
            out.append(export.export(model))
        except Exception as e:  # an unmappable model: both must refuse it alike
            out.append(f"{type(e).__name__}: {e}")
    return out


def test_fast_builder_writes_the_same_bytes(monkeypatch):
    monkeypatch.setattr(export, "BUILDER", export.BUILDER)
    models = [widen_float16(seeded(c, rg.cell_seed(7, c), 0).model()[0]) for c in matrix()]
    models += [if_model(), counting_while_model(), counting_while_model(nested_if=True),
               doubling_while_model()]
    exported = 0
    for model in models:
        plain, fast = _both(model)
        assert fast == plain
        exported += isinstance(plain, bytes)
    assert exported > 200  # most of them map to TFLite


def test_a_value_out_of_its_fields_range_still_fails():
    b = export.FastBuilder(16)
    b.StartObject(1)
    with pytest.raises(Exception):  # noqa: B017 - struct.error here, TypeError in the base
        b.PrependInt8Slot(0, 300, 0)
