"""The encoder as an ONNX Runtime graph: the export from the installed model (fp32, int8) and
the encoder that runs it."""
