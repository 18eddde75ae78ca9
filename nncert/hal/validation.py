"""validate_model / validate_request: the validity rules of VAL-1 (work in progress)."""

from __future__ import annotations

from nncert.hal.errors import ValidationError
from nncert.hal.model import Model
from nncert.hal.types import LATEST, OperandLifeTime, Version
from nncert.ops import get
from nncert.ops.base import ShapeError, Unknown
from nncert.ops.evaluate import bind, output_shapes
from nncert.ops.base import match, to_real


def validate_model(model: Model, version: Version = LATEST) -> None:
    sg = model.main
    for n, op in enumerate(sg.operations):
        record = get(op.type)
        where = f"operation {n} ({op.type.name})"
        if record is None:
            raise ValidationError("operation-type", where, "not in the catalogue")
        ins = [None if sg.operands[i].lifetime is OperandLifeTime.NO_VALUE else sg.operands[i]
               for i in op.inputs]
        outs = [sg.operands[i] for i in op.outputs]
        try:
            m = match(record, [None if o is None else o.type for o in ins], [o.type for o in outs])
            values = []
            for o in ins:
                v = None if o is None else model.constant_value(o)
                values.append(None if v is None else to_real(v, o) if record.dequantize else
                              (v.item() if o.type.is_scalar else v))
            shapes = output_shapes(record, ins, values, outs, m)
            if record.check:
                try:
                    record.check(bind(record, ins, values, outs, m))
                except Unknown:
                    pass
        except ShapeError as e:
            raise ValidationError("operation-signature", where, str(e)) from None
        if shapes:
            for i, (want, o) in enumerate(zip(shapes, outs, strict=True)):
                if o.dimensions and (len(o.dimensions) != len(want) or
                                     any(d and d != w for d, w in zip(o.dimensions, want, strict=True))):
                    raise ValidationError("operation-output-shape", where,
                                          f"output {i} declared {list(o.dimensions)}, computes to {list(want)}")
