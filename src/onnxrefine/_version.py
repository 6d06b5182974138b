"""The package version, in one place: pyproject.toml reads it (setuptools dynamic version),
`onnxrefine.__version__` and `onnxrefine --version` print it."""

__version__ = "0.1.0"
