"""Memory-domain mutants (MEM-4): test_memory_domains.py must catch them."""

from __future__ import annotations

from nncert.drivers.memory_domain import MemoryDomain
from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.drivers.reference import ReferenceDriver


class IgnoresRoles(MutantDriver):
    """Accepts a driver-managed buffer in any role: an input-only buffer as an output, a
    buffer allocated for another prepared model, an input or output it was not allocated for."""

    name = "ignores_roles"
    memory_domain = MemoryDomain(ReferenceDriver.memory_domain.model_of, check_roles=False)


MUTANT_INFO = (MutantInfo(IgnoresRoles, "MEM-4", suite="test_memory_domains.py"),)
