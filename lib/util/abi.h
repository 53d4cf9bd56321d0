/* The size of each boundary struct at its first release (0.1.0): the
 * smallest struct_size the library accepts for it. The struct_size rule
 * itself (swy_struct_import/export) is in switchyard/swy_common.h, shared
 * with the plugins. A field appended later never changes these; the
 * test tests/abi builds callers and plugins against exactly these
 * layouts. */
#ifndef SWY_UTIL_ABI_H
#define SWY_UTIL_ABI_H

#include "switchyard/load.h"
#include "switchyard/moe.h"
#include "switchyard/swy_common.h"
#include "switchyard/swy_devcoll_v1.h"
#include "switchyard/swy_device_v1.h"
#include "switchyard/swy_devmoe_v1.h"
#include "switchyard/swy_policy_v1.h"
#include "switchyard/swy_send_hints_v1.h"
#include "switchyard/swy_transport_v1.h"

/* The public API's (caller-owned) structs. */
#define SWY_OP_ATTR_SIZE_V1 SWY_STRUCT_END(swy_op_attr_t, name)
#define SWY_COMM_STATS_SIZE_V1 SWY_STRUCT_END(swy_comm_stats_t, headers_sent)
#define SWY_PEER_INFO_SIZE_V1 SWY_STRUCT_END(swy_peer_info_t, path)
#define SWY_MOE_CONFIG_SIZE_V1 SWY_STRUCT_END(swy_moe_config_t, stream)
#define SWY_MOE_LAYOUT_SIZE_V1 SWY_STRUCT_END(swy_moe_layout_t, slot_row)
#define SWY_LOAD_STATE_CONFIG_SIZE_V1                                         \
    SWY_STRUCT_END(swy_load_state_config_t, max_variance)
#define SWY_LOAD_PREDICTOR_CONFIG_SIZE_V1                                     \
    SWY_STRUCT_END(swy_load_predictor_config_t, lstm_seed)
#define SWY_LOAD_PLACEMENT_CONFIG_SIZE_V1                                     \
    SWY_STRUCT_END(swy_load_placement_config_t, move_bytes)
#define SWY_LOAD_PLACEMENT_SIZE_V1                                            \
    SWY_STRUCT_END(swy_load_placement_t, moves_kept_back)

/* The plugin ABI tables. */
#define SWY_TRANSPORT_V1_SIZE_V1 SWY_STRUCT_END(swy_transport_v1_t, finalize)
#define SWY_TRANSPORT_HOST_V1_SIZE_V1                                         \
    SWY_STRUCT_END(swy_transport_host_v1_t, size_parse)
#define SWY_SEND_HINTS_V1_SIZE_V1                                             \
    SWY_STRUCT_END(swy_send_hints_v1_t, isend_hinted)
#define SWY_DEVICE_V1_SIZE_V1                                                 \
    SWY_STRUCT_END(swy_device_v1_t, stream_capturing)
#define SWY_DEVCOLL_V1_SIZE_V1 SWY_STRUCT_END(swy_devcoll_v1_t, comm_split)
#define SWY_DEVMOE_V1_SIZE_V1 SWY_STRUCT_END(swy_devmoe_v1_t, error_string)
#define SWY_POLICY_V1_SIZE_V1 SWY_STRUCT_END(swy_policy_v1_t, finalize)
#define SWY_POLICY_HOST_V1_SIZE_V1                                            \
    SWY_STRUCT_END(swy_policy_host_v1_t, nranks)

#endif
