"""GPU kernels of every op's tasks: cuBLAS, cuDNN and NVRTC-compiled CUDA through cffi (issue 7).

`tiles.GPU_TILES` holds each op kind's GPU forward and backward tile, with the numpy references'
semantics; `training` holds the optimizer updates and losses; `variant.run_tile_gpu` is the GPU
body of the runtime's op-tile task. Nothing here imports Legate (only `variant` is handed Legate
objects), so `scripts/gpu_check.py` checks the kernels on a GPU machine without it.
"""

from flexflow.gpu.libraries import gpu_available

__all__ = ["gpu_available"]
