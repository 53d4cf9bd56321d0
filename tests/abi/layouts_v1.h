/* Every struct that crosses the library boundary as its first release
 * (0.1.0) laid it out, copied here once and never edited: a caller and
 * plugins built against these must keep working with every later
 * library (tests/abi/meson.build). When a field is appended to a public
 * struct, this file stays as it is. Function pointer parameters keep the
 * library's type names: a pointer is a pointer. */
#ifndef SWY_TEST_ABI_LAYOUTS_V1_H
#define SWY_TEST_ABI_LAYOUTS_V1_H

#include <stddef.h>
#include <stdint.h>

#include "switchyard/load.h"
#include "switchyard/moe.h"
#include "switchyard/swy_devcoll_v1.h"
#include "switchyard/swy_device_v1.h"
#include "switchyard/swy_devmoe_v1.h"
#include "switchyard/swy_policy_v1.h"
#include "switchyard/swy_send_hints_v1.h"
#include "switchyard/swy_transport_v1.h"

typedef struct {
    size_t struct_size;
    int priority;
    int64_t order;
    void *stream;
    const char *name;
} abi_v1_op_attr_t;

typedef struct {
    size_t struct_size;
    uint64_t ops_posted;
    uint64_t ops_completed;
    uint64_t bytes_sent;
    uint64_t bytes_received;
    uint64_t micro_ops_sent;
    uint64_t micro_ops_received;
    uint64_t preemptions;
    double high_wait_s;
    uint64_t headers_sent;
} abi_v1_comm_stats_t;

typedef struct {
    size_t struct_size;
    char hostname[64];
    int node;
    int numa;
    char link_class[16];
    double bandwidth;
    double latency;
    char transport[32];
    char path[192];
} abi_v1_peer_info_t;

typedef struct {
    size_t struct_size;
    int experts_per_rank;
    int hidden;
    swy_dtype_t dtype;
    int top_k;
    double capacity_factor;
    int pipeline_degree;
    int packing_factor;
    int rows_mem;
    void *stream;
} abi_v1_moe_config_t;

typedef struct {
    size_t struct_size;
    int nranks;
    int num_local_experts;
    int num_experts;
    int first_expert;
    int pipeline_degree;
    int hidden;
    int num_tokens;
    int top_k;
    int64_t send_rows;
    int64_t recv_rows;
    const int64_t *expert_offset;
    const int64_t *chunk_offset;
    const int64_t *block_offset;
    const int64_t *slot_row;
} abi_v1_moe_layout_t;

typedef struct {
    size_t struct_size;
    int window;
    int consecutive;
    int smooth;
    double max_range;
    double max_variance;
} abi_v1_load_state_config_t;

typedef struct {
    size_t struct_size;
    swy_load_predictor_kind_t kind;
    int normalize;
    int window;
    double theta;
    int p, d, q;
    int lstm_hidden;
    int lstm_epochs;
    double lstm_learning_rate;
    int lstm_lookback;
    int lstm_block;
    uint64_t lstm_seed;
} abi_v1_load_predictor_config_t;

typedef struct {
    size_t struct_size;
    int n_ranks;
    int experts_per_rank;
    int hidden;
    int ffn;
    int bytes_per_param;
    double link_bandwidth;
    double flops;
    int max_shadow;
    double cold_fraction;
    double pack_slack;
    int fixed_slots;
    const int *current_rank;
    int horizon_steps;
    double move_bytes;
} abi_v1_load_placement_config_t;

typedef struct {
    size_t struct_size;
    int *shadow;
    int *home;
    int *cold;
    int n_shadowed;
    int n_cold;
    int n_moved;
    double busiest_before;
    double busiest_after;
    double latency_before_s;
    double latency_shadow_s;
    double latency_after_s;
    double move_cost_s;
    double move_gain_s;
    int moves_kept_back;
} abi_v1_load_placement_t;

typedef struct {
    uint32_t abi_version;
    uint32_t struct_size;
    void (*log)(swy_log_level_t level, const char *subsys, const char *fmt,
                ...) __attribute__((format(printf, 3, 4)));
    const char *(*config_get)(const char *name);
    void *(*alloc)(size_t bytes);
    void (*free)(void *ptr);
    int rank;
    int nranks;
    int (*size_parse)(const char *text, size_t *value_p);
} abi_v1_transport_host_v1_t;

typedef struct {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    const swy_config_var_v1_t *config;
    uint32_t config_count;
    uint32_t config_var_size;
    swy_status_t (*init)(const swy_transport_host_v1_t *host, void **ctx_p);
    swy_status_t (*query)(void *ctx, swy_transport_caps_v1_t *caps);
    swy_status_t (*get_address)(void *ctx, void *addr, size_t *len_p);
    swy_status_t (*connect)(void *ctx, const void *const *addrs,
                            const size_t *lens, const uint8_t *reachable);
    swy_status_t (*isend)(void *ctx, int peer, uint64_t tag, const void *buf,
                          size_t len, swy_mem_type_t mem,
                          swy_transport_complete_cb_v1_t cb, void *cb_arg,
                          void **handle_p);
    swy_status_t (*irecv)(void *ctx, int peer, uint64_t tag, void *buf,
                          size_t len, swy_mem_type_t mem,
                          swy_transport_complete_cb_v1_t cb, void *cb_arg,
                          void **handle_p);
    void (*cancel)(void *ctx, void *handle);
    int (*progress)(void *ctx);
    int (*event_fd)(void *ctx);
    swy_status_t (*arm)(void *ctx);
    swy_status_t (*describe_peer)(void *ctx, int peer, char *buf,
                                  size_t len);
    void (*finalize)(void *ctx);
} abi_v1_transport_v1_t;

typedef struct {
    uint32_t abi_version;
    uint32_t struct_size;
    swy_status_t (*isend_hinted)(void *ctx, int peer, uint64_t tag,
                                 const void *buf, size_t len,
                                 swy_mem_type_t mem, uint32_t hints,
                                 swy_transport_complete_cb_v1_t cb,
                                 void *cb_arg, void **handle_p);
} abi_v1_send_hints_v1_t;

typedef struct {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    int (*device_count)(void);
    swy_mem_type_t (*mem_type)(const void *ptr);
    swy_status_t (*stream_sync)(void *stream);
    swy_status_t (*copy)(void *dst, const void *src, size_t bytes);
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *ptr);
    const char *(*error_string)(void);
    swy_status_t (*isend_prio)(void *ctx, int peer, uint64_t tag,
                               const void *buf, size_t len,
                               swy_mem_type_t mem, int priority,
                               swy_transport_complete_cb_v1_t cb,
                               void *cb_arg, void **handle_p);
    swy_status_t (*stream_notify)(void *stream, void (*done)(void *arg),
                                  void *arg);
    swy_status_t (*stream_gate)(void *stream, void **gate_p);
    void (*gate_open)(void *gate);
    int (*stream_capturing)(void *stream);
} abi_v1_device_v1_t;

typedef struct {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    size_t id_bytes;
    swy_status_t (*unique_id)(void *id);
    swy_status_t (*comm_init)(const void *id, int nranks, int rank,
                              int priority, double timeout_s, void **comm_p);
    void (*comm_destroy)(void *comm);
    void (*comm_abort)(void *comm);
    swy_status_t (*launch)(void *comm, const swy_devcoll_call_v1_t *calls,
                           int ncalls, swy_devcoll_done_cb_v1_t done,
                           void *arg);
    const char *(*error_string)(void);
    swy_status_t (*comm_split)(void *parent, int color, int key,
                               int priority, double timeout_s,
                               void **comm_p);
} abi_v1_devcoll_v1_t;

typedef struct {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    void *(*alloc)(size_t bytes);
    void (*free_mem)(void *ptr);
    swy_status_t (*upload)(void *stream, void *dst, const void *src,
                           size_t bytes);
    swy_status_t (*download)(void *stream, void *dst, const void *src,
                             size_t bytes);
    swy_status_t (*pack)(void *stream, swy_dtype_t dtype, const void *x,
                         const int32_t *row_of_slot, int S, int k, int H,
                         void *send);
    swy_status_t (*pack_bwd)(void *stream, swy_dtype_t dtype,
                             const void *dsend, const int32_t *row_of_slot,
                             int S, int k, int H, void *dx);
    swy_status_t (*gather_rows)(void *stream, swy_dtype_t dtype,
                                const void *src, const int32_t *src_row,
                                int n, int H, void *dst);
    swy_status_t (*combine_fwd)(void *stream, swy_dtype_t dtype,
                                const void *rows, const int32_t *row_of_slot,
                                const float *topk_w, int S, int k, int H,
                                void *out);
    swy_status_t (*combine_bwd)(void *stream, swy_dtype_t dtype,
                                const void *rows, const int32_t *row_of_slot,
                                const float *topk_w, const void *dout, int S,
                                int k, int H, void *drows, float *dtopk_w);
    const char *(*error_string)(void);
} abi_v1_devmoe_v1_t;

typedef struct {
    uint32_t abi_version;
    uint32_t struct_size;
    void (*log)(swy_log_level_t level, const char *subsys, const char *fmt,
                ...) __attribute__((format(printf, 3, 4)));
    const char *(*config_get)(const char *name);
    int rank, nranks;
} abi_v1_policy_host_v1_t;

typedef struct {
    uint32_t abi_version;
    uint32_t struct_size;
    const char *name;
    const char *description;
    swy_status_t (*init)(const swy_policy_host_v1_t *host, void **ctx_p);
    int (*compare)(void *ctx, const swy_policy_uop_v1_t *a,
                   const swy_policy_uop_v1_t *b);
    int (*admit)(void *ctx, const swy_policy_link_v1_t *link,
                 const swy_policy_uop_v1_t *uop);
    void (*finalize)(void *ctx);
} abi_v1_policy_v1_t;

#endif
