"""LiteRT exporter mappings of operation families, one module each (``MAPPINGS``: operation
type -> function of a ``nncert.drivers.litert.export.Node``), merged into the exporter's."""
