"""The conformance suites run against ``--driver`` (default: reference)."""
