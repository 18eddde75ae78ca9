"""Compilation-caching mutants: the reference driver with a faulty cache (CACHE-4, CACHE-5).
conformance/test_caching.py must catch both."""

from __future__ import annotations

import time
from collections.abc import Sequence

from nncert.drivers import caching
from nncert.drivers.base import Deadline, PreparedModel, check_deadline
from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.errors import HalError
from nncert.hal.types import ErrorStatus


def _check_arguments(driver: MutantDriver, model_cache: Sequence[int], data_cache: Sequence[int],
                     token: bytes, deadline: Deadline) -> None:
    reason = caching.bad_arguments(driver, model_cache, data_cache, token)
    if reason is not None:
        raise HalError(ErrorStatus.INVALID_ARGUMENT, reason)
    check_deadline(deadline, "preparation from cache")


class TrustsCache(MutantDriver):
    """Never checks the model cache's hash: prepares from any cache it can parse, under any
    token (CACHE-4)."""

    name = "trusts_cache"

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        _check_arguments(self, model_cache, data_cache, token, deadline)
        return caching.import_checked(self, caching.read_file(model_cache[0]),
                                      caching.read_file(data_cache[0]))


class HashesFile(MutantDriver):
    """Hashes the cache file instead of its own copy (TOCTOU, CACHE-5): on saving it writes,
    then hashes what it reads back; on preparing it hashes the file, then reads it again to
    compile from it, with a compiler's pause between the check and the use."""

    name = "hashes_file"
    #: Seconds between the check and the use (a compiler's work).
    PAUSE_S = 0.01

    def save_to_cache(self, prepared: PreparedModel, model_cache: Sequence[int], data_cache: Sequence[int],
                      token: bytes | None) -> PreparedModel:
        if token is None or caching.bad_arguments(self, model_cache, data_cache, token) is not None:
            return prepared
        model_bytes, data_bytes = self.export_compiled(prepared)
        store = caching.token_store(self)
        try:
            store.drop(token)
            caching.write_file(model_cache[0], model_bytes)
            caching.write_file(data_cache[0], data_bytes)
            time.sleep(self.PAUSE_S)
            store.put(token, caching.digest(caching.read_file(model_cache[0])))
        except (OSError, HalError):
            pass
        return prepared

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        _check_arguments(self, model_cache, data_cache, token, deadline)
        if caching.token_store(self).get(token) != caching.digest(caching.read_file(model_cache[0])):
            raise HalError(ErrorStatus.GENERAL_FAILURE, "the model cache does not match its token's hash")
        time.sleep(self.PAUSE_S)
        return caching.import_checked(self, caching.read_file(model_cache[0]),
                                      caching.read_file(data_cache[0]))


__all__ = ["HashesFile", "TrustsCache"]


MUTANT_INFO = (
    MutantInfo(TrustsCache, "CACHE-4", suite="test_caching.py"),
    MutantInfo(HashesFile, "CACHE-5", suite="test_caching.py"),
)
