"""Pass families, one module each. Importing this package registers every pass."""

from onnxrefine.passes import batchnorm  # noqa: F401
from onnxrefine.passes import noop  # noqa: F401
from onnxrefine.passes import folding  # noqa: F401
from onnxrefine.passes import shapes  # noqa: F401
from onnxrefine.passes import fusion  # noqa: F401
from onnxrefine.passes import cleanup  # noqa: F401
from onnxrefine.passes import functions  # noqa: F401
from onnxrefine.passes import quantized  # noqa: F401
from onnxrefine.passes import precision  # noqa: F401
from onnxrefine.passes import transposes  # noqa: F401
from onnxrefine.passes import reshapes  # noqa: F401
from onnxrefine.passes import where  # noqa: F401
from onnxrefine.passes import sequences  # noqa: F401
