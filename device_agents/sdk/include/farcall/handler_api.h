/* farcall handler ABI: the C interface between a device agent and the
 * handlers it runs (built in, or loaded from plugins with --plugins).
 *
 * Layers:
 *   1. This header: a small, versioned C ABI. Every struct starts with
 *      `struct_size`, so either side can tell which fields the other knows.
 *   2. farcall/handler.h: a header-only C++ wrapper with no dependencies,
 *      which is what handler authors normally use.
 *   3. The agent: fills a FarcallCallFrame per call and owns every pointer
 *      in it; the handler borrows them for the duration of the call only.
 *
 * A handler reads its args, writes its results and returns NULL on success,
 * or an error made with FarcallApi.error_create. It never returns values.
 * An aliased result points at its input's memory: the handler updates it in
 * place. No exception may cross this ABI.
 *
 * Versioning: an agent loads a plugin only when the plugin's MAJOR equals
 * its own; a MINOR bump only appends fields at the end of structs.
 */
#ifndef FARCALL_HANDLER_API_H_
#define FARCALL_HANDLER_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FARCALL_API_MAJOR 1
#define FARCALL_API_MINOR 2 /* 1: FARCALL_TRAIT_WRITES_ALL_RESULTS; 2: FARCALL_TRAIT_QUICK */

/* Status codes: the same numbers as absl::StatusCode and grpc::StatusCode. */
typedef enum FarcallCode {
  FARCALL_CODE_OK = 0,
  FARCALL_CODE_CANCELLED = 1,
  FARCALL_CODE_UNKNOWN = 2,
  FARCALL_CODE_INVALID_ARGUMENT = 3,
  FARCALL_CODE_DEADLINE_EXCEEDED = 4,
  FARCALL_CODE_NOT_FOUND = 5,
  FARCALL_CODE_ALREADY_EXISTS = 6,
  FARCALL_CODE_PERMISSION_DENIED = 7,
  FARCALL_CODE_RESOURCE_EXHAUSTED = 8,
  FARCALL_CODE_FAILED_PRECONDITION = 9,
  FARCALL_CODE_ABORTED = 10,
  FARCALL_CODE_OUT_OF_RANGE = 11,
  FARCALL_CODE_UNIMPLEMENTED = 12,
  FARCALL_CODE_INTERNAL = 13,
  FARCALL_CODE_UNAVAILABLE = 14,
  FARCALL_CODE_DATA_LOSS = 15,
  FARCALL_CODE_UNAUTHENTICATED = 16
} FarcallCode;

/* Element types: the numbers are XLA's PrimitiveType, as on the wire. */
typedef enum FarcallDType {
  FARCALL_DTYPE_INVALID = 0,
  FARCALL_DTYPE_PRED = 1,
  FARCALL_DTYPE_S8 = 2,
  FARCALL_DTYPE_S16 = 3,
  FARCALL_DTYPE_S32 = 4,
  FARCALL_DTYPE_S64 = 5,
  FARCALL_DTYPE_U8 = 6,
  FARCALL_DTYPE_U16 = 7,
  FARCALL_DTYPE_U32 = 8,
  FARCALL_DTYPE_U64 = 9,
  FARCALL_DTYPE_F16 = 10,
  FARCALL_DTYPE_F32 = 11,
  FARCALL_DTYPE_F64 = 12,
  FARCALL_DTYPE_C64 = 15,
  FARCALL_DTYPE_BF16 = 16,
  FARCALL_DTYPE_C128 = 18,
  FARCALL_DTYPE_F8E5M2 = 19,
  FARCALL_DTYPE_F8E4M3FN = 20,
  FARCALL_DTYPE_F8E4M3B11FNUZ = 23,
  FARCALL_DTYPE_F8E5M2FNUZ = 24,
  FARCALL_DTYPE_F8E4M3FNUZ = 25
} FarcallDType;

/* Which native stream FarcallContext.stream holds. */
typedef enum FarcallStreamKind {
  FARCALL_STREAM_NONE = 0,  /* cpu: handlers run synchronously */
  FARCALL_STREAM_CUDA = 1,  /* cudaStream_t */
  FARCALL_STREAM_HIP = 2,   /* hipStream_t */
  FARCALL_STREAM_OPENCL = 3 /* cl_command_queue */
} FarcallStreamKind;

typedef struct FarcallApiVersion {
  size_t struct_size;
  uint32_t major;
  uint32_t minor;
} FarcallApiVersion;

/* Opaque error. Created by FarcallApi.error_create; ownership passes to the
 * agent when a handler returns it. */
typedef struct FarcallError FarcallError;

/* One tensor, dense and row-major. `dims` and `data` are owned by the agent
 * and valid until the handler returns. Args are read-only: a handler must not
 * write through an arg's `data`. On device platforms `data` is a device
 * pointer. */
typedef struct FarcallBuffer {
  size_t struct_size;
  int32_t dtype; /* FarcallDType */
  int64_t rank;
  const int64_t* dims;
  void* data;
  uint64_t size_bytes;
  /* Results only: the index of the arg this result aliases, or -1. When set,
   * `data` is that arg's memory, already holding the input. */
  int64_t aliased_arg;
} FarcallBuffer;

typedef enum FarcallAttrType {
  FARCALL_ATTR_I64 = 1,
  FARCALL_ATTR_F64 = 2,
  FARCALL_ATTR_BOOL = 3,
  FARCALL_ATTR_STR = 4
} FarcallAttrType;

/* A named attribute. Strings are not NUL-terminated; use the sizes. */
typedef struct FarcallAttribute {
  size_t struct_size;
  const char* name;
  size_t name_size;
  int32_t type; /* FarcallAttrType: which of the fields below is set */
  int64_t i64;
  double f64;
  int32_t b;
  const char* str;
  size_t str_size;
} FarcallAttribute;

/* Where the handler runs. */
typedef struct FarcallContext {
  size_t struct_size;
  const char* platform; /* "cpu", "cuda", "rocm" or "oneapi" */
  int32_t device_ordinal;
  int32_t stream_kind; /* FarcallStreamKind */
  void* stream;        /* the platform stream, or NULL on cpu */
  void* agent_state;   /* the agent's own; handlers must not touch it */
} FarcallContext;

/* Services the agent offers to handlers. All are thread-safe. */
typedef struct FarcallApi {
  size_t struct_size;
  FarcallApiVersion version;
  /* Makes an error with a code (FarcallCode, not OK) and a message that is
   * copied. The caller owns it until it returns it from a handler. */
  FarcallError* (*error_create)(int32_t code, const char* message, size_t message_size);
  /* 1 once the call was cancelled or its deadline passed, else 0. */
  int32_t (*is_cancelled)(const FarcallContext* ctx);
  /* Blocks up to timeout_ns; returns 1 as soon as the call is cancelled, or
   * 0 when the time ran out. */
  int32_t (*wait_cancelled)(const FarcallContext* ctx, int64_t timeout_ns);
} FarcallApi;

/* Everything one call passes to a handler. */
typedef struct FarcallCallFrame {
  size_t struct_size;
  const FarcallApi* api;
  const FarcallContext* ctx;
  size_t num_args;
  const FarcallBuffer* args;
  size_t num_results;
  const FarcallBuffer* results; /* the structs are read-only; the data is not */
  size_t num_attrs;
  const FarcallAttribute* attrs;
} FarcallCallFrame;

/* A handler: NULL on success, or an error from api->error_create. */
typedef FarcallError* (*FarcallHandlerFn)(const FarcallCallFrame* frame);

/* Handler traits (bit flags). */
#define FARCALL_TRAIT_COMMAND_BUFFER_COMPATIBLE 1u
/* The handler writes every byte of every result it does not alias. Without
 * it the agent zeroes those results before the handler runs, so that what a
 * handler leaves unwritten is never an earlier call's bytes. */
#define FARCALL_TRAIT_WRITES_ALL_RESULTS 2u
/* The handler's time is bounded by the bytes it touches: it never sleeps,
 * waits on anything, or takes a lock another call may hold long. A cpu agent
 * then runs a small unary call of it (--inline_call_bytes) on the thread the
 * call arrived on, without the hand-off to a worker and back that is most of
 * a small call's time. Other handlers always run on the workers. */
#define FARCALL_TRAIT_QUICK 4u

typedef struct FarcallHandlerDef {
  size_t struct_size;
  const char* name;     /* e.g. "axpy" */
  const char* platform; /* "cpu", "cuda", "rocm" or "oneapi" */
  uint32_t traits;
  FarcallHandlerFn fn;
} FarcallHandlerDef;

/* What a plugin exports. Static storage, owned by the plugin. */
typedef struct FarcallPlugin {
  size_t struct_size;
  FarcallApiVersion api_version; /* FARCALL_API_MAJOR/MINOR when built */
  const char* name;
  size_t num_handlers;
  const FarcallHandlerDef* handlers;
} FarcallPlugin;

/* Every plugin exports `const FarcallPlugin* FarcallPluginGet(void)`. */
#define FARCALL_PLUGIN_ENTRY_SYMBOL "FarcallPluginGet"
typedef const FarcallPlugin* (*FarcallPluginGetFn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FARCALL_HANDLER_API_H_ */
