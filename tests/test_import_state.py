"""The TFLite importer's recurrent state (nncert/mlts/mappings/state.py): a variable state
tensor that nothing writes before the operator (the converter's form) becomes streaming
state, and executions that feed the state back match LiteRT's invocations of the file."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.types import OperationType as Op
from nncert.ops import get
from nncert.testing.cases import sample_case

#: operation, seed of a float32 case LiteRT runs (activation neither sigmoid, which TFLite
#: lacks, nor NONE for the bidirectional one, LiteRT's known defect), the HAL outputs that
#: are not state, the TFLite operators the exporter writes for it.
_CASES = [("LSTM", 0, [3], {"LSTM"}),
          ("UNIDIRECTIONAL_SEQUENCE_LSTM", 0, [0], {"UNIDIRECTIONAL_SEQUENCE_LSTM"}),
          ("BIDIRECTIONAL_SEQUENCE_LSTM", 27, [0, 1], {"BIDIRECTIONAL_SEQUENCE_LSTM"}),
          ("BIDIRECTIONAL_SEQUENCE_LSTM", 1, [0, 1], {"UNIDIRECTIONAL_SEQUENCE_LSTM", "REVERSE_V2"})]


def _converter_form(data: bytes, keep_in: list[int], keep_out: list[int]) -> bytes:
    """The exported file with only inputs ``keep_in`` and outputs ``keep_out`` of the main
    subgraph: the state variables, no longer model inputs, are TFLite's own (reset to zero
    when the interpreter is allocated, overwritten by every invocation)."""
    import flatbuffers

    from nncert.drivers.litert.export import fb

    m = fb.ModelT.InitFromPackedBuf(data, 0)
    sg = m.subgraphs[0]
    sg.inputs = [int(sg.inputs[k]) for k in keep_in]
    sg.outputs = [int(sg.outputs[k]) for k in keep_out]
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@pytest.mark.parametrize(("name", "seed", "outputs", "tflite_ops"), _CASES,
                         ids=[f"{c[0]}-{'+'.join(sorted(c[3]))}" for c in _CASES])
def test_variable_lstm_state_streams_as_litert_runs(name, seed, outputs, tflite_ops):
    """Imported, the file's variable states are state inputs (initial value zeros) and state
    outputs; three executions, each given the last one's state, match three LiteRT
    invocations of the same file; the state carries something (the third execution from
    the initial state gives other outputs)."""
    pytest.importorskip("ai_edge_litert")
    from ai_edge_litert.interpreter import Interpreter

    from nncert.drivers.litert.export import export
    from nncert.mlts.tflite_import import import_report, import_tflite
    from nncert.ops.interpreter import run_model

    record = get(getattr(Op, name))
    var = next(v for v in record.variants if v.label == "float32")
    case = sample_case(record, record.signatures[0], var, seed=seed)
    model, feeds = case.model()
    names = [ci.arg.name for ci in case.inputs if ci.operand is not None and not ci.const]
    x_pos = [k for k, arg in enumerate(names) if "state" not in arg]  # the input, aux_input
    n_states = len(names) - len(x_pos)
    assert n_states == (4 if name.startswith("BI") else 2), names
    data = _converter_form(export(model), x_pos, outputs)

    report = import_report(data)
    assert report.importable, report.message()
    assert {o.code for o in report.operators} >= tflite_ops, "the exporter writes another form: pick a seed"
    state = sorted(report.state, key=lambda s: s.input_index)
    assert [(s.input_index, s.output_index) for s in state] == \
        [(len(x_pos) + k, len(outputs) + k) for k in range(n_states)]
    assert all(not s.initial.any() for s in state)
    back = import_tflite(data)
    it = Interpreter(model_content=data)
    it.allocate_tensors()
    rng = np.random.default_rng(seed)
    carried = [s.initial for s in state]
    for step in range(3):
        xs = [feeds[k] if step == 0 else rng.uniform(-1, 1, feeds[k].shape).astype(np.float32) for k in x_pos]
        for d, x in zip(it.get_input_details(), xs, strict=True):
            it.set_tensor(d["index"], x)
        it.invoke()
        want = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        got = run_model(back, [*xs, *carried])
        for k, w in enumerate(want):
            np.testing.assert_allclose(got[k].reshape(w.shape), w, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{name} execution {step} output {k}")
        carried = [got[s.output_index] for s in state]
    fresh = run_model(back, [*xs, *(s.initial for s in state)])
    assert not all(np.allclose(f, w, rtol=1e-4, atol=1e-5) for f, w in zip(fresh, want, strict=False)), \
        "the state changes nothing: the test cannot tell streaming from a reset"
