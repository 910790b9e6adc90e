"""log_softmax as TileLang CUDA kernels: softmax's with ``log`` set (``cuda/softmax.py``)."""

from .. import softmax_device
from .softmax import RUNNER, bucket, build_backward, build_forward

lowered, forward, backward = softmax_device.entries(build_forward, build_backward, bucket, RUNNER, "the GPU", log=True)
