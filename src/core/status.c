/* SPDX-License-Identifier: Apache-2.0 */
/* Version, status names and the error messages (per thread: one per context, one without). */
#include "core/internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char thread_error[FCL_ERROR_MAX];

/* The calling thread's last messages on contexts, by context id (0: a free slot); a failure on a
 * context without a slot takes the slot claimed longest ago. */
#define FCL_ERROR_SLOTS 8
typedef struct error_slot {
    uint64_t ctx_id;
    char msg[FCL_ERROR_MAX];
} error_slot;
static _Thread_local error_slot error_slots[FCL_ERROR_SLOTS];
static _Thread_local unsigned error_next;

static error_slot *find_slot(fcl_context ctx)
{
    for (int i = 0; i < FCL_ERROR_SLOTS; i++)
        if (error_slots[i].ctx_id == ctx->id)
            return &error_slots[i];
    return NULL;
}

const char *fcl_version_string(void) { return FCL_VERSION_STRING; }

unsigned fcl_version_number(void) { return FCL_VERSION_NUMBER; }

const char *fcl_status_string(fcl_status status)
{
    switch (status) {
    case FCL_SUCCESS: return "FCL_SUCCESS";
    case FCL_ERR_INVALID_ARGUMENT: return "FCL_ERR_INVALID_ARGUMENT";
    case FCL_ERR_SHAPE: return "FCL_ERR_SHAPE";
    case FCL_ERR_DTYPE: return "FCL_ERR_DTYPE";
    case FCL_ERR_LAYOUT: return "FCL_ERR_LAYOUT";
    case FCL_ERR_UNSUPPORTED: return "FCL_ERR_UNSUPPORTED";
    case FCL_ERR_NO_DEVICE: return "FCL_ERR_NO_DEVICE";
    case FCL_ERR_OPENCL: return "FCL_ERR_OPENCL";
    case FCL_ERR_BUILD: return "FCL_ERR_BUILD";
    case FCL_ERR_OUT_OF_MEMORY: return "FCL_ERR_OUT_OF_MEMORY";
    }
    return "FCL_ERR_UNKNOWN_STATUS";
}

fcl_status fcl_fail(fcl_context ctx, fcl_status status, const char *fmt, ...)
{
    char *dst = thread_error;
    if (ctx) {
        error_slot *slot = find_slot(ctx);
        if (!slot) {
            slot = &error_slots[error_next++ % FCL_ERROR_SLOTS];
            slot->ctx_id = ctx->id;
        }
        dst = slot->msg;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, FCL_ERROR_MAX, fmt, ap);
    va_end(ap);
    return status;
}

void fcl_clear_error(fcl_context ctx)
{
    error_slot *slot = ctx ? find_slot(ctx) : NULL;
    if (slot)
        slot->msg[0] = '\0';
}

const char *fcl_last_error(fcl_context ctx)
{
    if (!ctx)
        return thread_error;
    const error_slot *slot = find_slot(ctx);
    return slot ? slot->msg : "";
}

const char *fcl_cl_error_name(cl_int err)
{
    switch (err) {
#define NAME(e) case e: return #e
    NAME(CL_SUCCESS); NAME(CL_DEVICE_NOT_FOUND); NAME(CL_DEVICE_NOT_AVAILABLE);
    NAME(CL_COMPILER_NOT_AVAILABLE); NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE);
    NAME(CL_OUT_OF_RESOURCES); NAME(CL_OUT_OF_HOST_MEMORY); NAME(CL_BUILD_PROGRAM_FAILURE);
    NAME(CL_INVALID_VALUE); NAME(CL_INVALID_DEVICE); NAME(CL_INVALID_CONTEXT);
    NAME(CL_INVALID_COMMAND_QUEUE); NAME(CL_INVALID_MEM_OBJECT); NAME(CL_INVALID_BINARY);
    NAME(CL_INVALID_BUILD_OPTIONS); NAME(CL_INVALID_PROGRAM); NAME(CL_INVALID_KERNEL_NAME);
    NAME(CL_INVALID_KERNEL); NAME(CL_INVALID_ARG_INDEX); NAME(CL_INVALID_ARG_VALUE);
    NAME(CL_INVALID_ARG_SIZE); NAME(CL_INVALID_KERNEL_ARGS); NAME(CL_INVALID_WORK_DIMENSION);
    NAME(CL_INVALID_WORK_GROUP_SIZE); NAME(CL_INVALID_WORK_ITEM_SIZE);
    NAME(CL_INVALID_GLOBAL_OFFSET); NAME(CL_INVALID_EVENT_WAIT_LIST); NAME(CL_INVALID_EVENT);
    NAME(CL_INVALID_OPERATION); NAME(CL_INVALID_BUFFER_SIZE); NAME(CL_INVALID_GLOBAL_WORK_SIZE);
    NAME(CL_INVALID_PLATFORM); NAME(CL_INVALID_DEVICE_TYPE); NAME(CL_INVALID_QUEUE_PROPERTIES);
    NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET); NAME(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
#undef NAME
    }
    return "CL_UNKNOWN_ERROR";
}

fcl_status fcl_fail_cl(fcl_context ctx, cl_int err, const char *what)
{
    fcl_status s = (err == CL_OUT_OF_HOST_MEMORY || err == CL_MEM_OBJECT_ALLOCATION_FAILURE)
                       ? FCL_ERR_OUT_OF_MEMORY : FCL_ERR_OPENCL;
    return fcl_fail(ctx, s, "%s failed: %s (%d)", what, fcl_cl_error_name(err), (int)err);
}
