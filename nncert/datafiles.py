"""Data files nncert reads (docs/security.md): one JSON loader and one TOML loader, so that no
file can do more than fail with one line naming it and what is wrong.

A spec, plan, expectations file, report or cache may come from anyone. Parsed with the
standard library alone, such a file can raise RecursionError (nested 100,000 deep), ValueError
(an integer of 5,000 digits), UnicodeDecodeError, or hand back NaN, a bool where an int is
meant, or a lone surrogate that fails only when the text is written out later. Here every
such case is ``error(f"{where}: {reason}")``, the caller's own exception class, and what comes
back is plain data within these bounds:

- text is UTF-8;
- nesting is at most ``MAX_DEPTH`` arrays or objects (tables) deep;
- integers fit 64 bits (``INT_MIN`` .. ``INT_MAX``: int64 and uint64 both fit);
- floats are finite unless the caller allows NaN and infinities (tensor data may hold them);
- strings are valid Unicode (no lone surrogates).

Nothing here ever runs code: JSON and TOML are data only, and no other format (pickle,
YAML, marshal) is read by nncert. The ``integer`` / ``number`` / ``string`` helpers convert
one field with a type check, for the loaders that then read the data.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from typing import Any

#: Arrays / objects (TOML tables) nested deeper than this are refused.
MAX_DEPTH = 64
#: The integers a data file may hold: int64 and uint64 (a HAL timing of UINT64_MAX) both fit.
INT_MIN = -(1 << 63)
INT_MAX = (1 << 64) - 1
#: Digits of the longest integer literal in that range ("-9223372036854775808").
_INT_DIGITS = 20


class DataFileError(ValueError):
    """A data file that cannot be read (the default error of the loaders here)."""


class _OutOfBoundsError(Exception):
    """Raised from inside a parser hook; the loader turns it into the caller's error."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _INT_DIGITS:
        raise _OutOfBoundsError(f"integer {text[:24]}... ({len(text)} digits) does not fit 64 bits")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        raise _OutOfBoundsError(f"integer {value} does not fit 64 bits")
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _OutOfBoundsError(f"number {text[:24]} is not finite (NaN and infinities are refused here)")
    return value


def _no_constant(text: str) -> float:
    raise _OutOfBoundsError(f"{text} is not accepted here (only finite numbers)")


def _check_tree(value: Any, scalars: bool) -> None:
    """Nesting depth, without recursion; with ``scalars``, also every integer's range (TOML has
    no integer hook) and every string (a JSON ``\\ud800`` escape makes a lone surrogate)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= MAX_DEPTH:
            raise _OutOfBoundsError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            if scalars:
                for key in item:
                    _check_string(key)
            children = item.values()
        else:
            children = item
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
            elif not scalars:
                continue
            elif isinstance(child, str):
                _check_string(child)
            elif type(child) is int and not INT_MIN <= child <= INT_MAX:
                raise _OutOfBoundsError(f"integer {child} does not fit 64 bits")


#: Where a JSON text may encode a surrogate: only then are its strings checked one by one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _check_string(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _OutOfBoundsError(f"a string holds {text[e.start]!r}, a lone surrogate") from None


def _text(data: bytes | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _OutOfBoundsError(f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def _read(path: str | os.PathLike, error: type[Exception]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise error(f"{os.fspath(path)}: cannot read it: {e.strerror or e}") from None
    except MemoryError:
        raise error(f"{os.fspath(path)}: too large to read") from None


def parse_json(data: bytes | str, where: str, error: type[Exception] = DataFileError,
               allow_nonfinite: bool = False) -> Any:
    """The JSON document ``data`` within the bounds above; ``error`` naming ``where`` otherwise.
    ``allow_nonfinite`` accepts NaN, Infinity and -Infinity (as Python's json writes them)."""
    try:
        text = _text(data)
        value = json.loads(text, parse_int=_int,
                           parse_float=float if allow_nonfinite else _finite_float,
                           parse_constant=float if allow_nonfinite else _no_constant)
        if isinstance(value, dict | list):
            _check_tree(value, scalars=_SURROGATE_ESCAPE.search(text) is not None)
        elif isinstance(value, str):
            _check_string(value)
        return value
    except _OutOfBoundsError as e:
        raise error(f"{where}: {e}") from None
    except json.JSONDecodeError as e:
        raise error(f"{where}: not JSON: {e}") from None
    except RecursionError:
        raise error(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    except MemoryError:
        raise error(f"{where}: too large to parse") from None


def read_json(path: str | os.PathLike, error: type[Exception] = DataFileError,
              allow_nonfinite: bool = False) -> Any:
    """``parse_json`` of the file at ``path``, an unreadable file included in ``error``."""
    return parse_json(_read(path, error), os.fspath(path), error, allow_nonfinite)


def parse_toml(data: bytes | str, where: str, error: type[Exception] = DataFileError) -> dict[str, Any]:
    """The TOML document ``data`` within the bounds above (floats finite); ``error`` naming
    ``where`` otherwise."""
    try:
        value = tomllib.loads(_text(data), parse_float=_finite_float)
        _check_tree(value, scalars=True)
        return value
    except _OutOfBoundsError as e:
        raise error(f"{where}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{where}: not TOML: {e}") from None
    except ValueError:  # tomllib's int() of a literal past Python's 4,300-digit limit
        raise error(f"{where}: an integer does not fit 64 bits") from None
    except RecursionError:
        raise error(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    except MemoryError:
        raise error(f"{where}: too large to parse") from None


def read_toml(path: str | os.PathLike, error: type[Exception] = DataFileError) -> dict[str, Any]:
    """``parse_toml`` of the file at ``path``, an unreadable file included in ``error``."""
    return parse_toml(_read(path, error), os.fspath(path), error)


# -- one field, type-checked -------------------------------------------------------------------

def integer(value: Any, what: str, error: type[Exception] = DataFileError,
            lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """``value`` if it is an integer in [lo, hi] (a bool or a float such as 2.0 is not)."""
    if type(value) is not int:
        raise error(f"{what} must be an integer, not {_kind(value)}")
    if not lo <= value <= hi:
        raise error(f"{what} must be in [{lo}, {hi}], is {value}")
    return value


def number(value: Any, what: str, error: type[Exception] = DataFileError, finite: bool = True) -> float:
    """``value`` as a float if it is a number (not a bool nor a string), finite unless not
    ``finite``."""
    if type(value) not in (int, float):
        raise error(f"{what} must be a number, not {_kind(value)}")
    result = float(value)
    if finite and not math.isfinite(result):
        raise error(f"{what} must be a finite number, is {result}")
    return result


def string(value: Any, what: str, error: type[Exception] = DataFileError) -> str:
    if not isinstance(value, str):
        raise error(f"{what} must be a string, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    """How a JSON / TOML value is named in an error: its type and a short repr."""
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


__all__ = ["INT_MAX", "INT_MIN", "MAX_DEPTH", "DataFileError", "integer", "number", "parse_json",
           "parse_toml", "read_json", "read_toml", "string"]
