"""The package version, in one place: onnxrefine.__version__, `onnxrefine --version` and the
version written into every optimized model all read it."""

__version__ = "0.1.0"
