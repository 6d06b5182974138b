"""Pass families, one module each; each module declares its passes in `PASSES` (see registry.py)."""

from onnxrefine.passes import registry
from onnxrefine.passes import batchnorm
from onnxrefine.passes import noop
from onnxrefine.passes import folding
from onnxrefine.passes import shapes
from onnxrefine.passes import dim_reads
from onnxrefine.passes import fusion
from onnxrefine.passes import cleanup
from onnxrefine.passes import functions
from onnxrefine.passes import quantized
from onnxrefine.passes import precision
from onnxrefine.passes import transposes
from onnxrefine.passes import reshapes
from onnxrefine.passes import where
from onnxrefine.passes import sequences
from onnxrefine.passes import interface
from onnxrefine.passes import rearrange
from onnxrefine.passes import noop_shapes

# Every module that declares passes: the registry reads `PASSES` from each (a new module goes here).
PASS_MODULES = (batchnorm, noop, folding, shapes, dim_reads, fusion, cleanup, functions, quantized, precision, transposes,
                reshapes, where, sequences, interface, rearrange, noop_shapes)
registry.set_pass_modules(PASS_MODULES)
