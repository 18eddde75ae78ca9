"""Operation records of the quantized_lstm family (see nncert/ops/README.md)."""

from __future__ import annotations

from nncert.ops.base import OpRecord

RECORDS: list[OpRecord] = []
