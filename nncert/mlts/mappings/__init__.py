"""TFLite importer mappings of operation families, one module each (``MAPPINGS``: TFLite
builtin name, or custom code, -> function of a ``nncert.mlts.tflite_graph.Node``), merged
into ``nncert.mlts.tflite_mappings.MAPPINGS``."""
