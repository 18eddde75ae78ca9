"""HalError: the one way a driver or the harness reports a failed HAL call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nncert.hal.types import ErrorStatus

if TYPE_CHECKING:
    from nncert.hal.model import OutputShape


class HalError(Exception):
    """A HAL call that returned a status other than NONE."""

    def __init__(self, status: ErrorStatus, message: str = "",
                 output_shapes: list[OutputShape] | None = None) -> None:
        self.status = ErrorStatus(status)
        self.message = message
        self.output_shapes = list(output_shapes or [])
        super().__init__(f"{self.status.name}: {message}" if message else self.status.name)


class ValidationError(HalError):
    """INVALID_ARGUMENT from validate_model / validate_request, naming the rule broken (VAL-1)."""

    def __init__(self, rule: str, where: str, detail: str) -> None:
        self.rule = rule
        self.where = where
        super().__init__(ErrorStatus.INVALID_ARGUMENT, f"{where}: [{rule}] {detail}")
