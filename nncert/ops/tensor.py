"""Operation records of the tensor family (see nncert/ops/README.md)."""

from __future__ import annotations

from nncert.ops.base import OpRecord

RECORDS: list[OpRecord] = []
