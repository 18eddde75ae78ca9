"""A flatbuffers Builder that writes the same bytes in fewer Python steps.

The schema's object API (``ModelT.Pack``) writes a .tflite through ``flatbuffers.Builder`` one
scalar at a time, each through several layers of checks and calls (``PrependInt32Slot`` ->
``PrependSlot`` -> ``enforce_number`` -> ``Prepend`` -> ``Prep`` -> ``Place`` -> ``encode.Write``),
and a table's vtable one field at a time: about three quarters of exporting a small model.
``FastBuilder`` overrides the methods the generated code calls with ones that align, grow and
write in one step each, and writes a vtable as one block. The layout is the base class's,
byte for byte (tests/test_litert_fastbuild.py compares both on every model the per-operation
suite and a slice of the random-graph matrix export). A value outside its field's range
raises struct.error where the base raised TypeError: the exporter fails either way.
"""

from __future__ import annotations

import struct
from typing import Any

import flatbuffers
from flatbuffers.builder import VtableMetadataFields

_U8, _I8 = struct.Struct("<B"), struct.Struct("<b")
_U16, _I16 = struct.Struct("<H"), struct.Struct("<h")
_U32, _I32 = struct.Struct("<I"), struct.Struct("<i")
_U64, _I64 = struct.Struct("<Q"), struct.Struct("<q")
_F32, _F64 = struct.Struct("<f"), struct.Struct("<d")
_BOOL = struct.Struct("<?")


class FastBuilder(flatbuffers.Builder):
    """``flatbuffers.Builder`` with its hot paths inlined; the same output."""

    def _put(self, packer: struct.Struct, x: Any) -> None:
        """Prep(width, 0) then Place(x): align for and write one scalar before the head."""
        width = packer.size
        head = self.head
        if width > self.minalign:
            self.minalign = width
        pad = -(len(self.Bytes) - head) & (width - 1)
        if head < pad + width:
            self.Prep(width, 0)  # grows the buffer (and pads)
            head, pad = self.head, 0
        elif pad:
            self.Bytes[head - pad:head] = bytes(pad)
        head -= pad + width
        packer.pack_into(self.Bytes, head, x)
        self.head = head

    def _slot(self, packer: struct.Struct, o: int, x: Any, d: Any) -> None:
        if x != d or (self.forceDefaults and d is not None):
            self._put(packer, x)
            self.current_vtable[o] = len(self.Bytes) - self.head

    def Prep(self, size, additionalBytes):  # noqa: N802, N803
        """The base's: pad so that ``size`` is aligned after ``additionalBytes``, growing the
        buffer when it must (the base does that part)."""
        if size > self.minalign:
            self.minalign = size
        head = self.head
        pad = -(len(self.Bytes) - head + additionalBytes) & (size - 1)
        if head < pad + size + additionalBytes:
            super().Prep(size, additionalBytes)
        elif pad:
            self.Bytes[head - pad:head] = bytes(pad)
            self.head = head - pad

    def StartVector(self, elemSize, numElems, alignment):  # noqa: N802, N803
        self.assertNotNested()
        self.nested = True
        self.vectorNumElems = numElems
        self.Prep(4, elemSize * numElems)
        self.Prep(alignment, elemSize * numElems)
        return len(self.Bytes) - self.head

    def EndVector(self, numElems=None):  # noqa: N802, N803
        if numElems is not None:  # the base's deprecated argument: its checks
            return super().EndVector(numElems)
        self.assertNested()
        self.nested = False
        head = self.head - 4  # room was made by StartVector
        _U32.pack_into(self.Bytes, head, self.vectorNumElems)
        self.head = head
        self.vectorNumElems = None
        return len(self.Bytes) - head

    # -- scalars into the current table --
    def PrependBoolSlot(self, o, x, d):  # noqa: N802 - the base's names
        self._slot(_BOOL, o, x, d)

    def PrependByteSlot(self, o, x, d):  # noqa: N802
        self._slot(_U8, o, x, d)

    def PrependUint8Slot(self, o, x, d):  # noqa: N802
        self._slot(_U8, o, x, d)

    def PrependUint16Slot(self, o, x, d):  # noqa: N802
        self._slot(_U16, o, x, d)

    def PrependUint32Slot(self, o, x, d):  # noqa: N802
        self._slot(_U32, o, x, d)

    def PrependUint64Slot(self, o, x, d):  # noqa: N802
        self._slot(_U64, o, x, d)

    def PrependInt8Slot(self, o, x, d):  # noqa: N802
        self._slot(_I8, o, x, d)

    def PrependInt16Slot(self, o, x, d):  # noqa: N802
        self._slot(_I16, o, x, d)

    def PrependInt32Slot(self, o, x, d):  # noqa: N802
        self._slot(_I32, o, x, d)

    def PrependInt64Slot(self, o, x, d):  # noqa: N802
        self._slot(_I64, o, x, d)

    def PrependFloat32Slot(self, o, x, d):  # noqa: N802
        self._slot(_F32, o, x, d)

    def PrependFloat64Slot(self, o, x, d):  # noqa: N802
        self._slot(_F64, o, x, d)

    def PrependUOffsetTRelativeSlot(self, o, x, d):  # noqa: N802
        if x != d or self.forceDefaults:
            self.PrependUOffsetTRelative(x)
            self.current_vtable[o] = len(self.Bytes) - self.head

    # -- scalars into a vector --
    def PrependUOffsetTRelative(self, off):  # noqa: N802
        # Prep(4, 0) first: the offset is relative to where it is written, after alignment.
        width = 4
        head = self.head
        if width > self.minalign:
            self.minalign = width
        pad = -(len(self.Bytes) - head) & 3
        if head < pad + width:
            self.Prep(width, 0)
            head, pad = self.head, 0
        elif pad:
            self.Bytes[head - pad:head] = bytes(pad)
        head -= pad
        offset = len(self.Bytes) - head
        if off > offset:
            raise flatbuffers.builder.OffsetArithmeticError("flatbuffers: Offset arithmetic error.")
        head -= width
        _U32.pack_into(self.Bytes, head, offset - off + width)
        self.head = head

    def PrependBool(self, x):  # noqa: N802
        self._put(_BOOL, x)

    def PrependByte(self, x):  # noqa: N802
        self._put(_U8, x)

    def PrependUint8(self, x):  # noqa: N802
        self._put(_U8, x)

    def PrependInt8(self, x):  # noqa: N802
        self._put(_I8, x)

    def PrependInt16(self, x):  # noqa: N802
        self._put(_I16, x)

    def PrependInt32(self, x):  # noqa: N802
        self._put(_I32, x)

    def PrependInt64(self, x):  # noqa: N802
        self._put(_I64, x)

    def PrependUint16(self, x):  # noqa: N802
        self._put(_U16, x)

    def PrependUint32(self, x):  # noqa: N802
        self._put(_U32, x)

    def PrependUint64(self, x):  # noqa: N802
        self._put(_U64, x)

    def PrependFloat32(self, x):  # noqa: N802
        self._put(_F32, x)

    def PrependFloat64(self, x):  # noqa: N802
        self._put(_F64, x)

    # -- tables --
    def WriteVtable(self):  # noqa: N802
        """The base's: the object's soffset, then its vtable (unless an equal one was written
        before, which it then points to), the vtable's fields written as one block."""
        self._put(_I32, 0)  # the object's soffset, written below once its vtable is known
        buf_len = len(self.Bytes)
        object_offset = buf_len - self.head
        fields = self.current_vtable
        kept = len(fields)
        while kept and fields[kept - 1] == 0:
            kept -= 1
        offsets = [object_offset - e if e else 0 for e in fields[:kept]]
        object_size = object_offset - self.objectEnd
        key = (*reversed(offsets), object_size)
        existing = self.vtables.get(key)
        object_start = buf_len - object_offset
        if existing is None:
            block = struct.pack(f"<{2 + kept}H", (kept + VtableMetadataFields) * 2, object_size, *offsets)
            head = self.head
            if head < len(block):
                self.Prep(2, len(block) - 2)  # grows the buffer; no padding (2-aligned already)
                head = self.head
                buf_len = len(self.Bytes)
                object_start = buf_len - object_offset
            head -= len(block)
            self.Bytes[head:head + len(block)] = block
            self.head = head
            _I32.pack_into(self.Bytes, object_start, (buf_len - head) - object_offset)
            self.vtables[key] = buf_len - head
        else:
            self.head = object_start
            _I32.pack_into(self.Bytes, object_start, existing - object_offset)
        self.current_vtable = None
        return object_offset


# -- the model's most numerous tables, packed as the schema's object API packs them --
#
# ``pack_model(builder, model)`` makes the builder calls ``ModelT.Pack`` makes, in the same
# order (so the same bytes), for the tables an export is mostly made of (subgraphs, tensors,
# operators, buffers) without the generated code's per-field wrappers, and writes vectors of
# integers and of offsets in one pass. A table with a field these leave out (sparsity, variant
# tensors, custom options, metadata, ...) is packed by its own ``Pack``.


def _ints(b: FastBuilder, values: Any) -> int:
    """A vector of int32 (``StartVector(4, n, 4)``, then each element prepended)."""
    n = len(values)
    b.StartVector(4, n, 4)
    head = b.head - 4 * n
    struct.pack_into(f"<{n}i", b.Bytes, head, *values)
    b.head = head
    return b.EndVector()


def _offsets(b: FastBuilder, offsets: list[int]) -> int:
    """A vector of offsets to tables already written (each ``PrependUOffsetTRelative``)."""
    b.StartVector(4, len(offsets), 4)
    data, end, head = b.Bytes, len(b.Bytes), b.head
    for off in reversed(offsets):
        head -= 4
        _U32.pack_into(data, head, end - head - off)
    b.head = head
    return b.EndVector()


def _tensor(b: FastBuilder, t: Any) -> int:
    if t.sparsity is not None or t.variantTensors is not None or \
            (t.shape is not None and not isinstance(t.shape, list)) or \
            (t.shapeSignature is not None and not isinstance(t.shapeSignature, list)):
        return t.Pack(b)
    shape = _ints(b, t.shape) if t.shape is not None else None
    name = b.CreateString(t.name) if t.name is not None else None
    quantization = t.quantization.Pack(b) if t.quantization is not None else None
    signature = _ints(b, t.shapeSignature) if t.shapeSignature is not None else None
    b.StartObject(11)
    if shape is not None:
        b.PrependUOffsetTRelativeSlot(0, shape, 0)
    b._slot(_I8, 1, t.type, 0)
    b._slot(_U32, 2, t.buffer, 0)
    if name is not None:
        b.PrependUOffsetTRelativeSlot(3, name, 0)
    if quantization is not None:
        b.PrependUOffsetTRelativeSlot(4, quantization, 0)
    b._slot(_BOOL, 5, t.isVariable, 0)
    if signature is not None:
        b.PrependUOffsetTRelativeSlot(7, signature, 0)
    b._slot(_BOOL, 8, t.hasRank, 0)
    b._slot(_U32, 10, t.externalBuffer, 0)
    return b.EndObject()


def _operator(b: FastBuilder, o: Any) -> int:
    rare = (o.customOptions, o.mutatingVariableInputs, o.intermediates, o.builtinOptions2)
    if any(x is not None for x in rare) or not isinstance(o.inputs, list) or not isinstance(o.outputs, list):
        return o.Pack(b)
    inputs = _ints(b, o.inputs)
    outputs = _ints(b, o.outputs)
    options = o.builtinOptions.Pack(b) if o.builtinOptions is not None else None
    b.StartObject(14)
    b._slot(_U32, 0, o.opcodeIndex, 0)
    b.PrependUOffsetTRelativeSlot(1, inputs, 0)
    b.PrependUOffsetTRelativeSlot(2, outputs, 0)
    b._slot(_U8, 3, o.builtinOptionsType, 0)
    if options is not None:
        b.PrependUOffsetTRelativeSlot(4, options, 0)
    b._slot(_I8, 6, o.customOptionsFormat, 0)
    b._slot(_U64, 9, o.largeCustomOptionsOffset, 0)
    b._slot(_U64, 10, o.largeCustomOptionsSize, 0)
    b._slot(_U8, 11, o.builtinOptions2Type, 0)
    b._slot(_I32, 13, o.debugMetadataIndex, -1)
    return b.EndObject()


def _buffer(b: FastBuilder, buf: Any) -> int:
    return buf.Pack(b)  # its data is a numpy vector already: one copy


def _subgraph(b: FastBuilder, sg: Any) -> int:
    fields = (sg.tensors, sg.inputs, sg.outputs, sg.operators)
    if any(x is not None and not isinstance(x, list) for x in fields):
        return sg.Pack(b)
    tensors = _offsets(b, [_tensor(b, t) for t in sg.tensors]) if sg.tensors is not None else None
    inputs = _ints(b, sg.inputs) if sg.inputs is not None else None
    outputs = _ints(b, sg.outputs) if sg.outputs is not None else None
    operators = _offsets(b, [_operator(b, o) for o in sg.operators]) if sg.operators is not None else None
    name = b.CreateString(sg.name) if sg.name is not None else None
    b.StartObject(6)
    for slot, value in enumerate((tensors, inputs, outputs, operators, name)):
        if value is not None:
            b.PrependUOffsetTRelativeSlot(slot, value, 0)
    b._slot(_I32, 5, sg.debugMetadataIndex, -1)
    return b.EndObject()


def pack_model(b: FastBuilder, m: Any) -> int:
    """``m.Pack(b)`` (a ModelT), the same bytes."""
    if any(x is not None for x in (m.metadataBuffer, m.metadata, m.signatureDefs, m.externalBufferGroups,
                                   m.externalBuffers)) or \
            any(x is not None and not isinstance(x, list) for x in (m.operatorCodes, m.subgraphs, m.buffers)):
        return m.Pack(b)
    codes = _offsets(b, [c.Pack(b) for c in m.operatorCodes]) if m.operatorCodes is not None else None
    subgraphs = _offsets(b, [_subgraph(b, sg) for sg in m.subgraphs]) if m.subgraphs is not None else None
    description = b.CreateString(m.description) if m.description is not None else None
    buffers = _offsets(b, [_buffer(b, buf) for buf in m.buffers]) if m.buffers is not None else None
    b.StartObject(10)
    b._slot(_U32, 0, m.version, 0)
    for slot, value in ((1, codes), (2, subgraphs), (3, description), (4, buffers)):
        if value is not None:
            b.PrependUOffsetTRelativeSlot(slot, value, 0)
    return b.EndObject()
