"""Errors of the GPU kernels: a missing CUDA library, or a failed CUDA/cuBLAS/cuDNN/NVRTC call."""

from __future__ import annotations

from flexflow.errors import FlexFlowError, RuntimeSetupError


class MissingLibraryError(RuntimeSetupError):
    """A CUDA library a kernel needs cannot be loaded; the message names its pip package."""


class CudaCallError(FlexFlowError, RuntimeError):
    """A CUDA, cuBLAS, cuDNN or NVRTC call returned an error status."""


class UnsupportedTileError(FlexFlowError, ValueError):
    """A tile the GPU kernels cannot take (dtype, rank, strides); the message says what to change."""
