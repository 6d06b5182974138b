"""The package version, in one place: pyproject.toml reads it (setuptools dynamic version),
onnxrefine.__version__, `onnxrefine --version` and the version written into every optimized
model all read it."""

__version__ = "0.1.0"
