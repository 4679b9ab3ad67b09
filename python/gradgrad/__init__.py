"""gradgrad: fused softmax attention whose forward, backward and backward-over-backward are kernels.

``gradgrad.torch`` gives PyTorch users the attention as ``torch.library`` custom ops with exact
derivatives of every order (docs/python.md). ``gradgrad._C`` holds the primitives over DLPack
tensors, for any framework; importing ``gradgrad`` itself needs neither torch nor numpy.
"""

from . import _C

__version__ = "0.1.0"
__all__ = ["_C", "__version__"]
