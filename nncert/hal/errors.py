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


class DriverFault(HalError):  # noqa: N818 - an outcome (CRASH/HANG), named as such
    """The driver process crashed or stopped responding, so the call could not complete.

    The status is DEVICE_UNAVAILABLE (the binder DEAD_OBJECT analogue); ``outcome`` says how
    the call ended for the MLTS-2 classification: ``"CRASH"`` (the driver died: ``detail``
    names its signal or exit code and the tail of its stderr) or ``"HANG"`` (it missed the
    call's deadline and was killed, or never signalled a fence it returned).
    """

    OUTCOMES = ("CRASH", "HANG")

    def __init__(self, outcome: str, message: str, detail: str = "") -> None:
        if outcome not in self.OUTCOMES:
            raise ValueError(f"DriverFault outcome {outcome!r} is not one of {self.OUTCOMES}")
        self.outcome = outcome
        self.reason = message
        self.detail = detail
        super().__init__(ErrorStatus.DEVICE_UNAVAILABLE, f"{outcome}: {message}")


def driver_fault_of(exc: BaseException | None) -> DriverFault | None:
    """The DriverFault behind ``exc`` (itself, or a cause or context of it), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, DriverFault):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def describe_exception(exc: BaseException) -> str:
    """``Type: first line of the message``: one line, whatever the message."""
    message = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
