"""Float64 kernels by operator family; importing a module registers its kernels in base.KERNELS
(the evaluator imports every one)."""
