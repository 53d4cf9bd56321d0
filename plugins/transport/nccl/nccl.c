/* swy-transport-nccl: two of the four exported tables.
 * swy_transport_plugin_v1 moves device memory between ranks
 * (nccl_connect.c, nccl_p2p.c); swy_device_plugin_v1 offers the device
 * services (nccl_device.c); swy_devcoll_plugin_v1, the third, is defined
 * in nccl_coll.c, and swy_devmoe_plugin_v1, the fourth, in nccl_moe.c.
 * Nothing else leaves the shared object (hidden visibility; the kernels'
 * static library is linked with its symbols hidden, meson.build). */
#include "nccl_plugin.h"

__attribute__((visibility("default"))) const swy_transport_v1_t
    swy_transport_plugin_v1 = {
        .abi_version = SWY_TRANSPORT_ABI_V1,
        .struct_size = sizeof(swy_transport_v1_t),
        .name = "nccl",
        .init = nccl_init,
        .query = nccl_query,
        .get_address = nccl_get_address,
        .connect = nccl_connect,
        .isend = nccl_isend,
        .irecv = nccl_irecv,
        .cancel = nccl_cancel,
        .progress = nccl_progress,
        .event_fd = nccl_event_fd,
        .arm = nccl_arm,
        .describe_peer = nccl_describe_peer,
        .finalize = nccl_finalize,
};

__attribute__((visibility("default"))) const swy_device_v1_t
    swy_device_plugin_v1 = {
        .abi_version = SWY_DEVICE_ABI_V1,
        .struct_size = sizeof(swy_device_v1_t),
        .name = "cuda",
        .device_count = nccl_device_count,
        .mem_type = nccl_device_mem_type,
        .stream_sync = nccl_device_stream_sync,
        .copy = nccl_device_copy,
        .host_alloc = nccl_device_host_alloc,
        .host_free = nccl_device_host_free,
        .error_string = nccl_device_error_string,
        .isend_prio = nccl_device_isend_prio,
        .stream_notify = nccl_device_stream_notify,
        .stream_gate = nccl_device_stream_gate,
        .gate_open = nccl_device_gate_open,
        .stream_capturing = nccl_device_stream_capturing,
};
