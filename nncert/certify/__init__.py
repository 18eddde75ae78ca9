"""Certification (``nncert certify``): a plan of suites run against one driver, each suite a
pytest run in a child process with a deadline, every outcome journaled as it ends; the report
(JSON with a versioned schema, HTML, JUnit, CSV, a SHA-256 manifest) built from the journal;
``verify`` and ``diff`` over reports. docs/certification.md describes it all."""
