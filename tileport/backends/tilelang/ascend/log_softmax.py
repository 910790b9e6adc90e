"""log_softmax as TileLang Ascend kernels: softmax's with ``log`` set (``ascend/softmax.py``)."""

from .. import softmax_device
from .softmax import RUNNER, bucket, build_backward, build_forward

lowered, forward, backward = softmax_device.entries(
    build_forward, build_backward, bucket, RUNNER, "an Ascend 950 NPU (torch_npu tensors)", log=True
)
