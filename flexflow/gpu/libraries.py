"""Finds and opens the CUDA libraries (cudart, driver, cuBLAS, NVRTC, cuDNN) with cffi's ABI mode.

No CUDA headers or compiler are needed: each library is opened with `ffi.dlopen` and declared by
the few functions the kernels call (`CDEFS`). Libraries come from the NVIDIA pip wheels
(`site-packages/nvidia/<wheel>/lib`), else from the system loader path. The driver comes with
the NVIDIA driver; on a host without one, `import flexflow` has loaded a stand-in `libcuda.so.1`
whose `cuInit` fails, and `gpu_available()` answers False.

Two CUDA releases are understood: 12 (what Legate's and cuPyNumeric's wheels bring, one wheel
directory per library) and 13 (the `nvidia-*` wheels of CUDA 13, all under `nvidia/cu13/lib`).
A process uses one (`cuda_release`: the first whose runtime, cuBLAS and NVRTC all open), and opens
each of those three from that release only, so no process mixes the two.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cffi import FFI

from flexflow.gpu.errors import CudaCallError, MissingLibraryError

RELEASES: tuple[int, ...] = (12, 13)
"""CUDA major releases whose libraries the kernels call, in order of preference (12 first: a
Legate process has CUDA 12's runtime loaded already)."""


@dataclass(frozen=True, slots=True)
class LibraryFile:
    """One release's build of a library: its soname and the wheel that provides it."""

    release: int | None  # CUDA major release; None: any (the driver, cuDNN 9)
    soname: str
    wheel_dir: str | None  # site-packages/nvidia/<wheel_dir>/lib; None: only the system loader
    package: str  # what to install when it is missing


@dataclass(frozen=True, slots=True)
class LibrarySpec:
    """Where one CUDA library lives, per CUDA release."""

    key: str
    files: tuple[LibraryFile, ...]
    preload: tuple[str, ...] = ()  # sibling libraries opened first, RTLD_GLOBAL (cuDNN 9's parts)
    built_for: str | None = None
    """The function answering which CUDA runtime a build was made for, where the builds of two
    releases share one soname (cuDNN 9's): the one found is checked against the process's."""

    @property
    def bound(self) -> bool:
        """Whether the process's CUDA release decides which build opens (all but the driver)."""
        return any(f.release is not None for f in self.files)

    def files_for(self, release: int) -> tuple[LibraryFile, ...]:
        """The builds a process on CUDA `release` may open, in order."""
        return tuple(f for f in self.files if f.release in (None, release))


def _toolkit_library(key: str, stem: str, wheel_12: str, package: str) -> LibrarySpec:
    """A toolkit library: its own wheel directory in CUDA 12, `cu13` in CUDA 13."""
    return LibrarySpec(
        key,
        (
            LibraryFile(12, f"{stem}.so.12", wheel_12, f"{package}-cu12"),
            LibraryFile(13, f"{stem}.so.13", "cu13", package),
        ),
    )


LIBRARIES: dict[str, LibrarySpec] = {
    spec.key: spec
    for spec in (
        LibrarySpec(
            "driver", (LibraryFile(None, "libcuda.so.1", None, "the NVIDIA driver (a GPU host)"),)
        ),
        _toolkit_library("cudart", "libcudart", "cuda_runtime", "nvidia-cuda-runtime"),
        _toolkit_library("cublas", "libcublas", "cublas", "nvidia-cublas"),
        _toolkit_library("nvrtc", "libnvrtc", "cuda_nvrtc", "nvidia-cuda-nvrtc"),
        LibrarySpec(
            "cudnn",
            tuple(
                LibraryFile(release, "libcudnn.so.9", "cudnn", f"nvidia-cudnn-cu{release}")
                for release in RELEASES
            ),
            # cuDNN 9's libcudnn.so.9 is a shim that opens these on first use
            preload=(
                "libcudnn_graph.so.9",
                "libcudnn_engines_precompiled.so.9",
                "libcudnn_engines_runtime_compiled.so.9",
                "libcudnn_heuristic.so.9",
                "libcudnn_ops.so.9",
                "libcudnn_cnn.so.9",
            ),
            built_for="cudnnGetCudartVersion",
        ),
    )
}

CDEFS: dict[str, str] = {
    "driver": """
        typedef int CUresult;
        typedef struct CUmod_st *CUmodule;
        typedef struct CUfunc_st *CUfunction;
        CUresult cuInit(unsigned int flags);
        CUresult cuDeviceGetCount(int *count);
        CUresult cuDriverGetVersion(int *version);
        CUresult cuDeviceGetName(char *name, int length, int device);
        CUresult cuGetErrorName(CUresult error, const char **name);
        CUresult cuModuleLoadData(CUmodule *module, const void *image);
        CUresult cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name);
        CUresult cuLaunchKernel(CUfunction f, unsigned int gridX, unsigned int gridY,
            unsigned int gridZ, unsigned int blockX, unsigned int blockY, unsigned int blockZ,
            unsigned int sharedMemBytes, void *stream, void **kernelParams, void **extra);
    """,
    "cudart": """
        typedef int cudaError_t;
        typedef struct CUevent_st *cudaEvent_t;
        cudaError_t cudaGetDeviceCount(int *count);
        cudaError_t cudaGetDevice(int *device);
        cudaError_t cudaSetDevice(int device);
        cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device);
        cudaError_t cudaRuntimeGetVersion(int *version);
        cudaError_t cudaMallocAsync(void **ptr, size_t size, void *stream);
        cudaError_t cudaFreeAsync(void *ptr, void *stream);
        cudaError_t cudaFree(void *ptr);
        cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind,
            void *stream);
        cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, void *stream);
        cudaError_t cudaStreamSynchronize(void *stream);
        cudaError_t cudaEventCreate(cudaEvent_t *event);
        cudaError_t cudaEventRecord(cudaEvent_t event, void *stream);
        cudaError_t cudaEventSynchronize(cudaEvent_t event);
        cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
        cudaError_t cudaEventDestroy(cudaEvent_t event);
        const char *cudaGetErrorName(cudaError_t error);
        const char *cudaGetErrorString(cudaError_t error);
    """,
    "cublas": """
        typedef int cublasStatus_t;
        typedef struct cublasContext *cublasHandle_t;
        cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
        cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, void *stream);
        cublasStatus_t cublasSetMathMode(cublasHandle_t handle, int mode);
        const char *cublasGetStatusString(cublasStatus_t status);
        cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, int transa, int transb,
            int m, int n, int k, const float *alpha, const float *A, int lda, long long strideA,
            const float *B, int ldb, long long strideB, const float *beta, float *C, int ldc,
            long long strideC, int batchCount);
        cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, int transa, int transb, int m,
            int n, int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
            const float *beta, float *C, int ldc);
    """,
    "nvrtc": """
        typedef int nvrtcResult;
        typedef struct _nvrtcProgram *nvrtcProgram;
        const char *nvrtcGetErrorString(nvrtcResult result);
        nvrtcResult nvrtcVersion(int *major, int *minor);
        nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
            int numHeaders, const char * const *headers, const char * const *includeNames);
        nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
        nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions,
            const char * const *options);
        nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size);
        nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
        nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size);
        nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);
    """,
    "cudnn": """
        typedef int cudnnStatus_t;
        typedef struct cudnnContext *cudnnHandle_t;
        typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
        typedef struct cudnnFilterStruct *cudnnFilterDescriptor_t;
        typedef struct cudnnConvolutionStruct *cudnnConvolutionDescriptor_t;
        typedef struct cudnnPoolingStruct *cudnnPoolingDescriptor_t;
        typedef struct {
            int algo; cudnnStatus_t status; float time; size_t memory;
            int determinism; int mathType; int reserved[3];
        } cudnnConvolutionAlgoPerf_t;
        size_t cudnnGetVersion(void);
        size_t cudnnGetCudartVersion(void);
        const char *cudnnGetErrorString(cudnnStatus_t status);
        cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
        cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, void *stream);
        cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *desc);
        cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, int format,
            int dataType, int n, int c, int h, int w);
        cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc);
        cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *desc);
        cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t desc, int dataType,
            int format, int k, int c, int h, int w);
        cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc);
        cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *desc);
        cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t desc,
            int pad_h, int pad_w, int u, int v, int dilation_h, int dilation_w, int mode,
            int computeType);
        cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t desc,
            int groupCount);
        cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t desc,
            int mathType);
        cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc);
        cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(cudnnConvolutionDescriptor_t conv,
            cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w, int *n, int *c, int *h,
            int *w_);
        cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle,
            cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
            cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, int requested,
            int *returned, cudnnConvolutionAlgoPerf_t *results);
        cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle,
            cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
            cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t y, int algo,
            size_t *size);
        cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
            cudnnTensorDescriptor_t xDesc, const void *x, cudnnFilterDescriptor_t wDesc,
            const void *w, cudnnConvolutionDescriptor_t conv, int algo, void *workspace,
            size_t workspaceBytes, const void *beta, cudnnTensorDescriptor_t yDesc, void *y);
        cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
            cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
            cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx, int requested,
            int *returned, cudnnConvolutionAlgoPerf_t *results);
        cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle,
            cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
            cudnnConvolutionDescriptor_t conv, cudnnTensorDescriptor_t dx, int algo,
            size_t *size);
        cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
            cudnnFilterDescriptor_t wDesc, const void *w, cudnnTensorDescriptor_t dyDesc,
            const void *dy, cudnnConvolutionDescriptor_t conv, int algo, void *workspace,
            size_t workspaceBytes, const void *beta, cudnnTensorDescriptor_t dxDesc, void *dx);
        cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle,
            cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
            cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw, int requested,
            int *returned, cudnnConvolutionAlgoPerf_t *results);
        cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle,
            cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
            cudnnConvolutionDescriptor_t conv, cudnnFilterDescriptor_t dw, int algo,
            size_t *size);
        cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
            cudnnTensorDescriptor_t xDesc, const void *x, cudnnTensorDescriptor_t dyDesc,
            const void *dy, cudnnConvolutionDescriptor_t conv, int algo, void *workspace,
            size_t workspaceBytes, const void *beta, cudnnFilterDescriptor_t dwDesc, void *dw);
        cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t *desc);
        cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t desc, int mode,
            int nanOpt, int windowH, int windowW, int padH, int padW, int strideH, int strideW);
        cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t desc);
        cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, cudnnPoolingDescriptor_t pool,
            const void *alpha, cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
            cudnnTensorDescriptor_t yDesc, void *y);
        cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t handle, cudnnPoolingDescriptor_t pool,
            const void *alpha, cudnnTensorDescriptor_t yDesc, const void *y,
            cudnnTensorDescriptor_t dyDesc, const void *dy, cudnnTensorDescriptor_t xDesc,
            const void *x, const void *beta, cudnnTensorDescriptor_t dxDesc, void *dx);
        cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t handle, int algo, int mode,
            const void *alpha, cudnnTensorDescriptor_t xDesc, const void *x, const void *beta,
            cudnnTensorDescriptor_t yDesc, void *y);
        cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t handle, int algo, int mode,
            const void *alpha, cudnnTensorDescriptor_t yDesc, const void *y,
            cudnnTensorDescriptor_t dyDesc, const void *dy, const void *beta,
            cudnnTensorDescriptor_t dxDesc, void *dx);
    """,
}
"""Only the functions the kernels call, per library, as the CUDA 12 and 13 / cuDNN 9 headers declare them
(enums as int, opaque handles as struct pointers, streams as void *)."""

ffi = FFI()
for _key in LIBRARIES:
    ffi.cdef(CDEFS[_key])

_OPENED: dict[str, Any] = {}
"""Cache of opened libraries by key (a library is opened once per process)."""


def _wheel_directories(file: LibraryFile) -> list[Path]:
    if file.wheel_dir is None:
        return []
    found = []
    for entry in sys.path:
        lib_dir = Path(entry or ".") / "nvidia" / file.wheel_dir / "lib"
        if (lib_dir / file.soname).is_file() and lib_dir not in found:
            found.append(lib_dir)
    return found


def wheel_directories(key: str, release: int | None = None) -> list[Path]:
    """The `nvidia/<wheel>/lib` directories on `sys.path` that hold library `key` of `release`
    (this process's CUDA release by default)."""
    spec = LIBRARIES[key]
    files = spec.files_for(cuda_release() if release is None else release)
    return [d for f in files for d in _wheel_directories(f)]


def _candidates(files: tuple[LibraryFile, ...]) -> list[str]:
    return [str(d / f.soname) for f in files for d in _wheel_directories(f)] + [
        f.soname for f in files
    ]


def candidate_paths(key: str, release: int | None = None) -> list[str]:
    """Where `open_library` looks, in order: the wheel directories, then the system loader."""
    spec = LIBRARIES[key]
    return _candidates(spec.files_for(cuda_release() if release is None else release))


def _preload(directory: Path, names: tuple[str, ...]) -> None:
    for name in names:
        path = directory / name
        if path.is_file():
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass  # the shim reports the missing part itself, with its name, when it is used


def _open_first(spec: LibrarySpec, paths: list[str], errors: list[str]) -> Any | None:
    sonames = {f.soname for f in spec.files}
    for path in paths:
        if spec.preload and path not in sonames:
            _preload(Path(path).parent, spec.preload)
        try:
            library = ffi.dlopen(path)
        except OSError as error:
            errors.append(f"{path}: {error}")
            continue
        mismatch = _release_mismatch(spec, library)
        if mismatch:
            errors.append(f"{path}: {mismatch}")
            continue
        return library
    return None


def _release_mismatch(spec: LibrarySpec, library: Any) -> str | None:
    """Why this build cannot serve this process, if it cannot: one made for the other CUDA
    release under the same soname would load that release's libraries beside ours."""
    if spec.built_for is None:
        return None
    built_for = int(getattr(library, spec.built_for)()) // 1000
    release = cuda_release()
    if built_for == release:
        return None
    return (
        f"built for CUDA {built_for}, and this process uses CUDA {release} (the runtime's): "
        f"{spec.files_for(release)[0].package} is the one to install"
    )


_TOOLKIT = ("cudart", "cublas", "nvrtc")
"""The libraries that come in one build per CUDA release."""


@functools.cache
def cuda_release() -> int:
    """The CUDA major release this process calls: the first of `RELEASES` whose runtime, cuBLAS
    and NVRTC all open (from wheels or the system loader), else the first whose runtime opens
    (`open_library` then names what to install for it), else the first of `RELEASES`."""
    partial: tuple[int, dict[str, Any]] | None = None
    for release in RELEASES:
        opened = {}
        for key in _TOOLKIT:
            spec = LIBRARIES[key]
            library = _open_first(spec, _candidates(spec.files_for(release)), [])
            if library is None:
                break
            opened[key] = library
        if len(opened) == len(_TOOLKIT):
            _remember(opened)
            return release
        if opened and partial is None:  # the runtime opened, something after it did not
            partial = (release, opened)
    if partial is None:
        return RELEASES[0]
    _remember(partial[1])
    return partial[0]


def _remember(opened: dict[str, Any]) -> None:
    """Cache what `cuda_release` opened, keeping what was opened (or put there) before."""
    for key, library in opened.items():
        _OPENED.setdefault(key, library)


def open_library(key: str) -> Any:
    """The cffi library object for `key`, opened once; MissingLibraryError names what to install."""
    if key in _OPENED:
        return _OPENED[key]
    spec = LIBRARIES[key]
    release = cuda_release() if spec.bound else None  # the driver asks nothing of the toolkit
    # the runtime picks the release, so a missing runtime is missing from every release
    files = spec.files if key == "cudart" or release is None else spec.files_for(release)
    errors: list[str] = []
    library = _open_first(spec, _candidates(files), errors)
    if library is not None:
        _OPENED[key] = library
        return library
    packages = " or ".join(dict.fromkeys(f.package for f in files))
    sonames = " or ".join(f.soname for f in files)
    of_release = f" (CUDA {release}, the runtime's)" if spec.bound and key != "cudart" else ""
    raise MissingLibraryError(
        f"GPU kernels: cannot load {sonames} ({key}){of_release}; tried {'; '.join(errors)}. "
        f"Install {packages}, or put {sonames} on the loader path (LD_LIBRARY_PATH)."
    )


def missing_libraries() -> dict[str, str]:
    """Libraries that cannot be opened, by key, with the reason (for the check script's report)."""
    missing = {}
    for key in LIBRARIES:
        try:
            open_library(key)
        except MissingLibraryError as error:
            missing[key] = str(error)
    return missing


@functools.cache
def gpu_available() -> bool:
    """True when a CUDA driver initializes and reports at least one GPU; never raises.

    Only the driver is touched, so on a host with the stand-in driver (whose `cuInit` fails) the
    CUDA runtime is never asked anything.
    """
    try:
        driver = open_library("driver")
        if driver.cuInit(0) != 0:
            return False
        count = ffi.new("int *")
        return driver.cuDeviceGetCount(count) == 0 and count[0] > 0
    except Exception:  # a broken or partial driver means "no GPU", not a crash
        return False


def _status_text(key: str, status: int) -> str:
    library = _OPENED.get(key)
    try:
        if key == "cudart":
            name = ffi.string(library.cudaGetErrorName(status)).decode()
            return f"{name} ({ffi.string(library.cudaGetErrorString(status)).decode()})"
        if key == "driver":
            name_ptr = ffi.new("const char **")
            library.cuGetErrorName(status, name_ptr)
            return ffi.string(name_ptr[0]).decode()
        text = {
            "cublas": lambda: library.cublasGetStatusString(status),
            "cudnn": lambda: library.cudnnGetErrorString(status),
            "nvrtc": lambda: library.nvrtcGetErrorString(status),
        }[key]()
        return ffi.string(text).decode()
    except Exception:
        return "an unknown status"


def check(key: str, status: int, call: str) -> None:
    """Raise CudaCallError naming `call` and its status unless `status` is 0 (success)."""
    if status != 0:
        raise CudaCallError(
            f"{call} failed with status {status}: {_status_text(key, status)}; check that the "
            "GPU has free memory and that the shapes and pointers passed are valid."
        )


def summary() -> str:
    """One line for `flexflow info`: whether a GPU answers, the CUDA release the GPU kernels use,
    and which of their libraries open (a missing one with what to install)."""
    gpu = "a GPU" if gpu_available() else "no GPU"
    release = cuda_release()
    missing = [key for key in missing_libraries() if key != "driver"]
    opened = [key for key in LIBRARIES if key not in missing and key != "driver"]
    text = f"{gpu}; CUDA {release}: {', '.join(opened) or 'nothing'} open"
    for key in missing:
        text += f"; {key} missing (pip install {LIBRARIES[key].files_for(release)[0].package})"
    return text
