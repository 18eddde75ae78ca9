"""ONNX exporter mappings of operation families, one module each (``MAPPINGS``: operation
type -> ``nncert.drivers.onnxruntime.export.Mapping``), merged into the exporter's."""
