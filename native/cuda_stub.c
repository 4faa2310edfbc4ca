/* A stand-in for the CUDA driver (libcuda.so.1) on hosts that have none.
 *
 * Legate's wheels link libcuda.so.1 even for CPU-only runs. This library has that
 * SONAME, so once it is loaded (RTLD_GLOBAL) before Legate, the dynamic loader
 * resolves every later request for libcuda.so.1 to it. Every driver entry point
 * reports CUDA_ERROR_NO_DEVICE; cuInit must fail so that Realm decides to run
 * CPU-only (making it succeed with zero devices crashes Realm). It is loaded only
 * when no real driver can be found: see flexflow/bootstrap.py.
 */
#include <stddef.h>
#include <string.h>

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NO_DEVICE 100

typedef int CUresult;

/* The entry points the Legate, Legion, Realm, UCX and UCC libraries link directly. */
#define FLEXFLOW_CUDA_STUB_SYMBOLS(X) \
  X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxGetId) X(cuCtxPopCurrent_v2) \
  X(cuCtxPushCurrent_v2) X(cuCtxSynchronize) X(cuCtxSetCurrent) X(cuDeviceGet) \
  X(cuDeviceGetAttribute) X(cuDeviceGetCount) X(cuDeviceGetName) X(cuDeviceGetUuid) \
  X(cuDeviceGetUuid_v2) X(cuDevicePrimaryCtxGetState) X(cuDevicePrimaryCtxRelease_v2) \
  X(cuDevicePrimaryCtxRetain) X(cuDeviceTotalMem_v2) X(cuEventCreate) X(cuEventDestroy_v2) \
  X(cuEventQuery) X(cuEventRecord) X(cuEventSynchronize) X(cuFileDriverOpen) \
  X(cuFileDriverClose) X(cuFileHandleDeregister) X(cuFileHandleRegister) X(cuFileRead) \
  X(cuFileWrite) X(cuFlushGPUDirectRDMAWrites) X(cuIpcCloseMemHandle) X(cuIpcGetMemHandle) \
  X(cuIpcOpenMemHandle_v2) X(cuMemAddressFree) X(cuMemAddressReserve) X(cuMemAllocManaged) \
  X(cuMemAlloc_v2) X(cuMemAllocHost_v2) X(cuMemHostAlloc) X(cuMemCreate) \
  X(cuMemExportToShareableHandle) X(cuMemFreeHost) X(cuMemFree_v2) X(cuMemGetAddressRange_v2) \
  X(cuMemGetAllocationGranularity) X(cuMemGetAllocationPropertiesFromHandle) \
  X(cuMemGetInfo_v2) X(cuMemHostRegister_v2) X(cuMemHostUnregister) \
  X(cuMemImportFromShareableHandle) X(cuMemMap) X(cuMemPoolDestroy) X(cuMemPoolExportPointer) \
  X(cuMemPoolExportToShareableHandle) X(cuMemPoolImportFromShareableHandle) \
  X(cuMemPoolImportPointer) X(cuMemPoolSetAccess) X(cuMemRangeGetAttribute) X(cuMemRelease) \
  X(cuMemRetainAllocationHandle) X(cuMemSetAccess) X(cuMemUnmap) X(cuMemcpy) X(cuMemcpyAsync) \
  X(cuMemcpyDtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyHtoDAsync_v2) X(cuMemcpyHtoD_v2) \
  X(cuMemcpyDtoH_v2) X(cuMemsetD8_v2) X(cuMemsetD8Async) X(cuModuleLoadData) \
  X(cuModuleGetFunction) X(cuLaunchKernel) X(cuPointerGetAttribute) X(cuPointerGetAttributes) \
  X(cuPointerSetAttribute) X(cuStreamAddCallback) X(cuStreamCreate) X(cuStreamCreateWithPriority) \
  X(cuStreamDestroy_v2) X(cuStreamQuery) X(cuStreamSynchronize) X(cuStreamWaitEvent) \
  X(cuStreamWaitValue32_v2) X(cuStreamWriteValue32_v2) X(cuDriverGetVersion)

static CUresult flexflow_cuda_stub_no_device(void) { return CUDA_ERROR_NO_DEVICE; }

#define FLEXFLOW_DEFINE_STUB(name) \
  CUresult name(void) { return CUDA_ERROR_NO_DEVICE; }
FLEXFLOW_CUDA_STUB_SYMBOLS(FLEXFLOW_DEFINE_STUB)

/* Must fail: Realm then logs that it cannot discover CUDA resources and runs CPU-only. */
CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_ERROR_NO_DEVICE; }

static const char *flexflow_cuda_stub_name(CUresult error) {
  return error == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_NO_DEVICE";
}

CUresult cuGetErrorName(CUresult error, const char **name) {
  if (name != NULL) *name = flexflow_cuda_stub_name(error);
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  if (text != NULL)
    *text = error == CUDA_SUCCESS ? "no error"
                                  : "no CUDA-capable device (flexflow CUDA driver stand-in)";
  return CUDA_SUCCESS;
}

/* Realm looks most entry points up at run time and asserts the pointers are non-null:
 * hand back a real function for every name, the named ones where we have them. */
static void *flexflow_cuda_stub_lookup(const char *symbol) {
  if (symbol == NULL) return (void *)&flexflow_cuda_stub_no_device;
  if (strcmp(symbol, "cuGetErrorName") == 0) return (void *)&cuGetErrorName;
  if (strcmp(symbol, "cuGetErrorString") == 0) return (void *)&cuGetErrorString;
  if (strcmp(symbol, "cuInit") == 0) return (void *)&cuInit;
  return (void *)&flexflow_cuda_stub_no_device;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version,
                          unsigned long long flags) {
  (void)version; (void)flags;
  if (pfn == NULL) return CUDA_ERROR_NO_DEVICE;
  *pfn = flexflow_cuda_stub_lookup(symbol);
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                             unsigned long long flags, int *status) {
  if (status != NULL) *status = 0; /* CU_GET_PROC_ADDRESS_SUCCESS */
  return cuGetProcAddress(symbol, pfn, version, flags);
}
