"""The ML test suite (MLTS): real models on real data (MLTS-1) and the stress / crash tests
that run a driver hard and classify how it copes (MLTS-2, ``nncert.mlts.stress``)."""
