"""onnxrefine: an ONNX optimizer whose rewrites never change what a model computes."""

__version__ = "0.1.0"
