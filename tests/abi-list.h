/*
 * The ABI facts tests/abi-t compares, as X-macros, included once per
 * translation unit after that unit's dlpack.h; entries depend on what the
 * header declares (DLPACK_VERSION 60 for 0.6 ... DLPACK_MAJOR_VERSION 1).
 *   SIZE(T)           sizeof(T)
 *   FIELD(T, f)       offsetof(T, f) and the size of the field
 *   VALUE(name)       an enumerator or macro value
 */
#if defined(DLPACK_MAJOR_VERSION)
#define CAI_ABI_V(major, minor)        \
    (DLPACK_MAJOR_VERSION > (major) || \
     (DLPACK_MAJOR_VERSION == (major) && DLPACK_MINOR_VERSION >= (minor)))
#elif defined(DLPACK_VERSION)
#define CAI_ABI_V(major, minor) ((major) == 0 && DLPACK_VERSION >= (minor)*10)
#else
#error "no DLPack version macro"
#endif

/* Present since 0.6 (Debian's libdlpack-dev). */
SIZE(DLDevice)
FIELD(DLDevice, device_type)
FIELD(DLDevice, device_id)
SIZE(DLDeviceType)
SIZE(DLDataType)
FIELD(DLDataType, code)
FIELD(DLDataType, bits)
FIELD(DLDataType, lanes)
SIZE(DLDataTypeCode)
SIZE(DLTensor)
FIELD(DLTensor, data)
FIELD(DLTensor, device)
FIELD(DLTensor, ndim)
FIELD(DLTensor, dtype)
FIELD(DLTensor, shape)
FIELD(DLTensor, strides)
FIELD(DLTensor, byte_offset)
SIZE(DLManagedTensor)
FIELD(DLManagedTensor, dl_tensor)
FIELD(DLManagedTensor, manager_ctx)
FIELD(DLManagedTensor, deleter)
VALUE(kDLCPU)
VALUE(kDLCUDA)
VALUE(kDLCUDAHost)
VALUE(kDLOpenCL)
VALUE(kDLVulkan)
VALUE(kDLMetal)
VALUE(kDLVPI)
VALUE(kDLROCM)
VALUE(kDLROCMHost)
VALUE(kDLExtDev)
VALUE(kDLCUDAManaged)
VALUE(kDLInt)
VALUE(kDLUInt)
VALUE(kDLFloat)
VALUE(kDLOpaqueHandle)
VALUE(kDLBfloat)
VALUE(kDLComplex)

#if CAI_ABI_V(0, 8)
VALUE(kDLOneAPI)
VALUE(kDLWebGPU)
VALUE(kDLHexagon)
VALUE(kDLBool)
#endif

#if CAI_ABI_V(1, 0)
VALUE(DLPACK_MAJOR_VERSION)
SIZE(DLPackVersion)
FIELD(DLPackVersion, major)
FIELD(DLPackVersion, minor)
SIZE(DLManagedTensorVersioned)
FIELD(DLManagedTensorVersioned, version)
FIELD(DLManagedTensorVersioned, manager_ctx)
FIELD(DLManagedTensorVersioned, deleter)
FIELD(DLManagedTensorVersioned, flags)
FIELD(DLManagedTensorVersioned, dl_tensor)
VALUE(DLPACK_FLAG_BITMASK_READ_ONLY)
VALUE(DLPACK_FLAG_BITMASK_IS_COPIED)
#endif

/* Compared only against a 1.3 or newer header (older 1.x headers lack
 * some of these; which minor added each is not asserted here). */
#if CAI_ABI_V(1, 3)
VALUE(kDLMAIA)
VALUE(kDLTrn)
VALUE(kDLFloat8_e3m4)
VALUE(kDLFloat8_e4m3)
VALUE(kDLFloat8_e4m3b11fnuz)
VALUE(kDLFloat8_e4m3fn)
VALUE(kDLFloat8_e4m3fnuz)
VALUE(kDLFloat8_e5m2)
VALUE(kDLFloat8_e5m2fnuz)
VALUE(kDLFloat8_e8m0fnu)
VALUE(kDLFloat6_e2m3fn)
VALUE(kDLFloat6_e3m2fn)
VALUE(kDLFloat4_e2m1fn)
VALUE(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)
SIZE(DLPackExchangeAPIHeader)
FIELD(DLPackExchangeAPIHeader, version)
FIELD(DLPackExchangeAPIHeader, prev_api)
SIZE(DLPackExchangeAPI)
FIELD(DLPackExchangeAPI, header)
FIELD(DLPackExchangeAPI, managed_tensor_allocator)
FIELD(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync)
FIELD(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync)
FIELD(DLPackExchangeAPI, dltensor_from_py_object_no_sync)
FIELD(DLPackExchangeAPI, current_work_stream)
SIZE(DLPackManagedTensorAllocator)
SIZE(DLPackManagedTensorFromPyObjectNoSync)
SIZE(DLPackManagedTensorToPyObjectNoSync)
SIZE(DLPackDLTensorFromPyObjectNoSync)
SIZE(DLPackCurrentWorkStream)
#endif

#undef CAI_ABI_V
