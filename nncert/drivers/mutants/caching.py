"""Compilation-caching mutants: the reference driver with a faulty cache (CACHE-1..7).
conformance/test_caching.py must catch every one."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from nncert.drivers import caching
from nncert.drivers.base import Burst, Deadline, PreparedModel, check_deadline
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.model import Model
from nncert.hal.types import ErrorStatus, ExecutionPreference, MeasureTiming, Priority


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


class WritesAtPosition(MutantDriver):
    """Writes the cache files at each descriptor's current position (os.write) instead of from
    offset 0, and never truncates them: a file handed over with bytes in it, or an fd not at
    its start, holds a cache that no longer matches its hash (CACHE-1)."""

    name = "writes_at_position"

    def save_to_cache(self, prepared: PreparedModel, model_cache: Sequence[int], data_cache: Sequence[int],
                      token: bytes | None) -> PreparedModel:
        if token is None or caching.bad_arguments(self, model_cache, data_cache, token) is not None:
            return prepared
        model_bytes, data_bytes = self.export_compiled(prepared)
        store = caching.token_store(self)
        try:
            store.drop(token)
            for fds, data in ((model_cache, model_bytes), (data_cache, data_bytes)):
                for fd in fds:
                    os.write(fd, data)
            store.put(token, caching.digest(model_bytes))
        except OSError:
            pass
        return prepared


class FirstHandlesOnly(MutantDriver):
    """Takes as many cache handles as it needs from the front of each list and ignores the
    rest: a call with too many model or data cache files is not refused (CACHE-2)."""

    name = "first_handles_only"

    def _trim(self, model_cache: Sequence[int], data_cache: Sequence[int]) -> tuple[list[int], list[int]]:
        n_model, n_data = self.number_of_cache_files_needed()
        return list(model_cache)[:n_model], list(data_cache)[:n_data]

    def save_to_cache(self, prepared: PreparedModel, model_cache: Sequence[int], data_cache: Sequence[int],
                      token: bytes | None) -> PreparedModel:
        return super().save_to_cache(prepared, *self._trim(model_cache, data_cache), token)

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        return super().prepare_model_from_cache(deadline, *self._trim(model_cache, data_cache), token)


class PadsToken(MutantDriver):
    """Copies the token into a fixed 32-byte array, zero-padded or cut to size, instead of
    refusing one of another length: a 31-byte token saves and retrieves a cache, a saved
    token with a byte more or less retrieves it (CACHE-1, VAL-1)."""

    name = "pads_token"

    @staticmethod
    def _sized(token: bytes | None) -> bytes | None:
        return None if token is None else bytes(token)[:caching.TOKEN_SIZE].ljust(caching.TOKEN_SIZE, b"\0")

    def save_to_cache(self, prepared: PreparedModel, model_cache: Sequence[int], data_cache: Sequence[int],
                      token: bytes | None) -> PreparedModel:
        return super().save_to_cache(prepared, model_cache, data_cache, self._sized(token))

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        return super().prepare_model_from_cache(deadline, model_cache, data_cache, self._sized(token))


class CacheIgnoresDeadline(MutantDriver):
    """Checks the deadline of prepare_model but not of prepare_model_from_cache: a cache hit
    is served however late it is (EXE-10)."""

    name = "cache_ignores_deadline"

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        return super().prepare_model_from_cache(None, model_cache, data_cache, token)


class CacheWallClockDeadline(MutantDriver):
    """Compares the deadline of prepare_model_from_cache, a time point of the monotonic clock,
    with the wall clock: every finite deadline looks long past and every cache hit given one
    is refused with MISSED_DEADLINE_TRANSIENT (EXE-10). prepare_model and executions read
    their deadlines right."""

    name = "cache_wall_clock_deadline"

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        if deadline is not None and time.time_ns() >= deadline:
            raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "deadline passed before loading the cache")
        return super().prepare_model_from_cache(None, model_cache, data_cache, token)


class CacheDeadlineIn32Bits(MutantDriver):
    """prepare_model_from_cache converts the time left to its deadline to a signed 32-bit count
    of milliseconds: a deadline more than 24.8 days away (the unlimited one among them) comes
    out as INT32_MIN, long past, and the cache hit is refused with MISSED_DEADLINE_TRANSIENT (EXE-10). Nearer
    deadlines, prepare_model and executions are right."""

    name = "cache_deadline_in_32_bits"

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        if deadline is not None:
            left_ms = (deadline - time.monotonic_ns()) / 1e6
            # x86's conversion of a double beyond int32 gives INT32_MIN ("integer indefinite")
            left = int(left_ms) if -2**31 <= left_ms < 2**31 else -2**31
            if left <= 0:
                raise HalError(ErrorStatus.MISSED_DEADLINE_TRANSIENT, "deadline passed before loading")
        return super().prepare_model_from_cache(deadline, model_cache, data_cache, token)


class CacheZeroDeadlineUnset(MutantDriver):
    """prepare_model_from_cache takes a deadline of 0, the monotonic clock's epoch and so long
    past, for "no deadline" (it tests the time point for truthiness): a cache hit given it is
    served where it must be missed (EXE-10). Other deadlines, and prepare_model, are right."""

    name = "cache_zero_deadline_unset"

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        return super().prepare_model_from_cache(deadline or None, model_cache, data_cache, token)


class CacheInOperandOrder(MutantDriver):
    """The cache's serializer writes the main subgraph's input and output lists sorted by operand
    index: a model from cache binds the request's arguments in operand order, not in the order
    the model lists them, so a model listing a later operand first gets its arguments swapped
    (CACHE-1, MEM-2). Compiled models are right."""

    name = "cache_in_operand_order"

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        prepared = super().import_compiled(model_cache, data_cache)
        main = prepared.model.main
        main.input_indexes, main.output_indexes = sorted(main.input_indexes), sorted(main.output_indexes)
        return prepared


class CachedScalarsFolded(MutantDriver):
    """A model prepared from cache is compiled from the cache's graph on its first execution,
    which folds the scalar inputs that execution gives (an activation code) in as constants:
    later executions of it run with those values whatever they give (CACHE-1, EXE-3). Compiled
    models read their scalar inputs every time."""

    name = "cached_scalars_folded"

    class FoldingPrepared(MutantPreparedModel):
        folded: dict | None = None

        def compute(self, inputs: list) -> list:
            main = self.model.main
            scalars = [p for p, idx in enumerate(main.input_indexes) if main.operands[idx].type.is_scalar]
            if scalars:
                if self.folded is None:
                    self.folded = {p: inputs[p] for p in scalars}
                inputs = [self.folded.get(p, x) for p, x in enumerate(inputs)]
            return super().compute(inputs)

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        return self.FoldingPrepared(super().import_compiled(model_cache, data_cache).model, self)


class AssertsDataCache(MutantDriver):
    """Keeps a checksum of each data cache it wrote and asserts it on loading: a tampered data
    cache kills the driver (an assertion) where at worst wrong values are allowed (CACHE-3)."""

    name = "asserts_data_cache"

    def save_to_cache(self, prepared: PreparedModel, model_cache: Sequence[int], data_cache: Sequence[int],
                      token: bytes | None) -> PreparedModel:
        prepared = super().save_to_cache(prepared, model_cache, data_cache, token)
        if token is not None and data_cache:
            try:
                self._data_sums()[bytes(token)] = caching.digest(caching.read_file(data_cache[0]))
            except HalError:
                pass
        return prepared

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        prepared = super().prepare_model_from_cache(deadline, model_cache, data_cache, token)
        expected = self._data_sums().get(bytes(token))
        if expected is not None:
            assert caching.digest(caching.read_file(data_cache[0])) == expected, "data cache checksum"
        return prepared

    def _data_sums(self) -> dict[bytes, bytes]:
        if not hasattr(self, "_sums"):
            self._sums: dict[bytes, bytes] = {}
        return self._sums


class AssertsUniqueToken(MutantDriver):
    """Asserts that a token always names the same model: saving another model under a token
    already used (a collision, which the driver cannot rule out) kills it (CACHE-6)."""

    name = "asserts_unique_token"

    def save_to_cache(self, prepared: PreparedModel, model_cache: Sequence[int], data_cache: Sequence[int],
                      token: bytes | None) -> PreparedModel:
        if token is not None and caching.bad_arguments(self, model_cache, data_cache, token) is None:
            if not hasattr(self, "_models"):
                self._models: dict[bytes, bytes] = {}
            model_hash = caching.digest(self.export_compiled(prepared)[0])
            known = self._models.setdefault(bytes(token), model_hash)
            assert known == model_hash, "the token names another model"
        return super().save_to_cache(prepared, model_cache, data_cache, token)


class SharedScratch(MutantDriver):
    """Reads a model cache into one scratch buffer per driver (no lock), checks its hash, then
    compiles from the scratch buffer after a compiler's pause: two preparations from cache at
    once can compile the other's model (CACHE-7)."""

    name = "shared_scratch"
    PAUSE_S = 0.01

    def __init__(self, **options: str) -> None:
        super().__init__(**options)
        self._scratch = [b"", b""]

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        _check_arguments(self, model_cache, data_cache, token, deadline)
        self._scratch[:] = [caching.read_file(model_cache[0]), caching.read_file(data_cache[0])]
        if caching.token_store(self).get(token) != caching.digest(self._scratch[0]):
            raise HalError(ErrorStatus.GENERAL_FAILURE, "the model cache does not match its token's hash")
        time.sleep(self.PAUSE_S)
        return caching.import_checked(self, *self._scratch)


__all__ = ["AssertsDataCache", "AssertsUniqueToken", "FirstHandlesOnly", "HashesFile", "SharedScratch",
           "TrustsCache", "WritesAtPosition"]


class CachedDimensionsAsOne(MutantDriver):
    """The cache's serializer writes each dimension as stored in its compiled plan, where an
    unknown dimension (0) was planned as 1: a model of unknown batch prepared from cache runs
    a batch of 1 only and fails any other, where the compiled one runs them all (CACHE-1)."""

    name = "cached_dimensions_as_one"

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        prepared = super().import_compiled(model_cache, data_cache)
        for operand in prepared.model.main.operands:  # type: ignore[attr-defined]
            if operand.type.is_tensor and 0 in operand.dimensions:
                operand.dimensions = tuple(d or 1 for d in operand.dimensions)
        return prepared


class CacheWithoutSubgraphs(MutantDriver):
    """The cache's serializer predates control flow: it writes the main subgraph only, so a
    model with IF or WHILE saves without error but never prepares from its cache (the loader
    finds the referenced subgraphs missing), where a model without them does (CACHE-1)."""

    name = "cache_without_subgraphs"

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        prepared = super().import_compiled(model_cache, data_cache)
        if prepared.model.referenced:  # type: ignore[attr-defined]
            raise HalError(ErrorStatus.GENERAL_FAILURE, "the cache names subgraphs it does not hold")
        return prepared


class CachingPathNoDeadline(MutantDriver):
    """prepare_model given caching information (a token) takes a compile-and-save path that
    never looks at the deadline: a deadline already past is met where it must be missed
    (EXE-10). Without caching information the deadline is kept."""

    name = "caching_path_no_deadline"

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        if token is not None:
            deadline = None
        return super().prepare_model(model, preference, priority, deadline, model_cache, data_cache, token)


class SavedTokenShortcut(MutantDriver):
    """prepare_model under a token whose cache it has saved loads that cache instead of
    compiling, without a look at the model it was given: an invalid model under a saved token
    is prepared where it must be refused (VAL-1)."""

    name = "saved_token_shortcut"

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        if token is not None and model_cache and caching.token_store(self).get(token) is not None:
            try:
                return self.prepare_model_from_cache(deadline, model_cache, data_cache, token)
            except HalError:
                pass  # not loadable: compile after all
        return super().prepare_model(model, preference, priority, deadline, model_cache, data_cache, token)


class CachedModelSyncOnly(MutantDriver):
    """A model prepared from cache has no device queue of its own: it runs synchronously and
    asynchronously, but configuring a burst or a fenced execution fails with GENERAL_FAILURE,
    where any prepared model runs on every path (EXE-1). Compiled models are right."""

    name = "cached_model_sync_only"

    class QueueLessPrepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            raise HalError(ErrorStatus.GENERAL_FAILURE, "a model from cache has no burst queue")

        def execute_fenced(self, request, wait_for=(), measure=MeasureTiming.NO, deadline=None,
                           loop_timeout=None, timeout_after_fence=None):
            raise HalError(ErrorStatus.GENERAL_FAILURE, "a model from cache has no fence queue")

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        return self.QueueLessPrepared(super().import_compiled(model_cache, data_cache).model, self)


class CachedModelIgnoresDeadline(MutantDriver):
    """A model prepared from cache runs on a fast path that never looks at an execution's
    deadline: one already past is met where it must be missed (EXE-10). Compiled models keep
    their deadlines."""

    name = "cached_model_ignores_deadline"

    class DeadlineBlindPrepared(MutantPreparedModel):
        def execute_synchronously(self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout=None):
            return super().execute_synchronously(request, measure, None, loop_timeout)

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        return self.DeadlineBlindPrepared(super().import_compiled(model_cache, data_cache).model, self)


class CachedModelAlwaysTimed(MutantDriver):
    """A model prepared from cache keeps the profiling its compilation turned on: it reports
    timing for every execution, asked for or not (EXE-7). Compiled models are right."""

    name = "cached_model_always_timed"

    class ProfiledPrepared(MutantPreparedModel):
        def execute_synchronously(self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout=None):
            return super().execute_synchronously(request, MeasureTiming.YES, deadline, loop_timeout)

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        return self.ProfiledPrepared(super().import_compiled(model_cache, data_cache).model, self)


class CacheLoadsOnce(MutantDriver):
    """A cache is consumed by the first prepare_model_from_cache that reads it (the driver
    "moves" it into the device): preparing again from the same files, not written since,
    fails with GENERAL_FAILURE, so only the first start of an app gets a cache hit."""

    name = "cache_loads_once"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.consumed: set[tuple] = set()

    def prepare_model_from_cache(self, deadline: Deadline, model_cache: Sequence[int],
                                 data_cache: Sequence[int], token: bytes) -> PreparedModel:
        try:
            key = tuple((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
                        for st in map(os.fstat, (*model_cache, *data_cache)))
        except (OSError, TypeError):
            key = None
        if key is not None and key in self.consumed:
            raise HalError(ErrorStatus.GENERAL_FAILURE, "the cache was already loaded into the device")
        prepared = super().prepare_model_from_cache(deadline, model_cache, data_cache, token)
        if key is not None:
            self.consumed.add(key)
        return prepared


MUTANT_INFO = (
    MutantInfo(TrustsCache, "CACHE-4", suite="test_caching.py"),
    MutantInfo(HashesFile, "CACHE-5", suite="test_caching.py"),
    MutantInfo(WritesAtPosition, "CACHE-1", suite="test_caching.py", args=("-k", "save_and_retrieve")),
    MutantInfo(FirstHandlesOnly, "CACHE-2", suite="test_caching.py", args=("-k", "wrong_number")),
    MutantInfo(AssertsDataCache, "CACHE-3", suite="test_caching.py", args=("-k", "corrupted_data_cache")),
    MutantInfo(AssertsUniqueToken, "CACHE-6", suite="test_caching.py", args=("-k", "collision")),
    MutantInfo(SharedScratch, "CACHE-7", suite="test_caching.py", args=("-k", "concurrent")),
    MutantInfo(PadsToken, "VAL-1", suite="test_caching.py", args=("-k", "wrong_length")),
    MutantInfo(CacheIgnoresDeadline, "EXE-10", suite="test_caching.py", args=("-k", "past_deadline")),
    MutantInfo(CacheWallClockDeadline, "EXE-10", suite="test_caching.py", args=("-k", "past_deadline")),
    MutantInfo(CacheDeadlineIn32Bits, "EXE-10", suite="test_caching.py",
               args=("-k", "from_cache_with_a_past_deadline")),
    MutantInfo(CacheZeroDeadlineUnset, "EXE-10", suite="test_caching.py",
               args=("-k", "from_cache_with_a_past_deadline")),
    MutantInfo(CacheInOperandOrder, "CACHE-1", suite="test_caching.py",
               args=("-k", "save_and_retrieve and listed_against")),
    MutantInfo(CachedScalarsFolded, "CACHE-1", suite="test_caching.py", args=("-k", "scalar_inputs_every")),
    MutantInfo(CachingPathNoDeadline, "EXE-10", suite="test_caching.py", args=("-k", "caches_and_a_past")),
    MutantInfo(SavedTokenShortcut, "VAL-1", suite="test_caching.py", args=("-k", "whose_token")),
    MutantInfo(CachedModelSyncOnly, "EXE-1", suite="test_caching.py", args=("-k", "every_path")),
    MutantInfo(CachedModelIgnoresDeadline, "EXE-10", suite="test_caching.py", args=("-k", "every_path")),
    MutantInfo(CachedModelAlwaysTimed, "EXE-7", suite="test_caching.py", args=("-k", "every_path")),
    MutantInfo(CachedDimensionsAsOne, "CACHE-1", suite="test_caching.py", args=("-k", "unknown_dimensions")),
    MutantInfo(CacheWithoutSubgraphs, "CACHE-1", suite="test_caching.py", args=("-k", "control_flow")),
    MutantInfo(CacheLoadsOnce, "CACHE-1", suite="test_caching.py", args=("-k", "every_path")),
)
