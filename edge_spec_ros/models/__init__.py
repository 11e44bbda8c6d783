"""The models: Qwen2-VL through HF transformers (drafter, verifier with exits, the decoder stack).

transformers imports torchao (the drafter's quantization, ``quantize.py``) whenever it is installed;
under a CPU build of torch torchao warns at import that its CUDA kernels do not load, and torch that
torchao registers two enums the old way. Neither matters to a decision, and a node's log should not
open with them: those records only are dropped here, before any module of this package imports
transformers (this package's ``__init__`` runs first on every import of one of its modules)."""

import logging


def _drop(logger: str, *needles: str) -> None:
    logging.getLogger(logger).addFilter(lambda r: not any(n in r.getMessage() for n in needles))


_drop("torchao", "Failed to load")  # an unloadable _C_*.so (CUDA kernels) under a CPU torch
_drop("torch.utils._pytree", "is an Enum subclass and is now natively supported")
