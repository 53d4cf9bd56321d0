/* Test double of a GPU for the CPU-only CI: swy-transport-nccl.so built
 * from tests/devdouble/devdouble.c. It stands in for the nccl plugin
 * where no GPU (and so no real part) can run, and says so: its device
 * services (swy_device_plugin_v1, name "devdouble") call "device memory"
 * what this header's allocator returns, which is host memory, and its
 * streams are threads; its transport (swy_transport_plugin_v1, name
 * "devdouble") moves that memory between the processes of one host over
 * Unix sockets, as the nccl plugin's transport does: between ranks under
 * SWY_DEVICE_COLL=staged only (or where the double has no device
 * collectives: first-release/), else only a rank's messages to itself; its MoE row kernels (swy_devmoe_plugin_v1) run on a
 * stream as lib/moe's host path computes. The library's device paths
 * (transport choice by memory type, staging through pinned host copies,
 * device chunks, the caller's stream) then run at several ranks on any
 * machine. Nothing here is fast
 * or a model of CUDA beyond what those paths rely on.
 *
 * A test opens the same file the library loads (SWY_PLUGIN_PATH puts its
 * directory first) with dlopen and finds these functions with dlsym;
 * dlopen returns the one copy already loaded. */
#ifndef SWY_TEST_DEVDOUBLE_H
#define SWY_TEST_DEVDOUBLE_H

#include <stddef.h>

/* "Device memory": filled with 0xA5 (not zeroed, as cudaMalloc), reported
 * as SWY_MEM_CUDA by mem_type until freed. NULL on failure. */
typedef void *(*swy_devdouble_alloc_fn)(size_t bytes);
typedef void (*swy_devdouble_free_fn)(void *ptr);
/* A stream: a thread that runs launched work in order; the library's
 * ops wait on it and hold it through the stream functions. */
typedef void *(*swy_devdouble_stream_create_fn)(void);
typedef void (*swy_devdouble_stream_destroy_fn)(void *stream);
/* Queue fn(arg) on stream (NULL: the default stream); returns 0, or -1
 * when out of memory. */
typedef int (*swy_devdouble_launch_fn)(void *stream, void (*fn)(void *),
                                       void *arg);
typedef void (*swy_devdouble_stream_capture_fn)(void *stream, int on);
typedef void (*swy_devdouble_traffic_fn)(unsigned long long *transport_sends,
                                         unsigned long long *launches);

/* The double's definitions (tests find them with dlsym, by these names). */
void *swy_devdouble_alloc(size_t bytes);
void swy_devdouble_free(void *ptr);
void *swy_devdouble_stream_create(void);
void swy_devdouble_stream_destroy(void *stream);
int swy_devdouble_launch(void *stream, void (*fn)(void *), void *arg);
/* Say that stream is (on = 1) or is not being captured into a graph
 * (its stream_capturing answer); nothing else changes. */
void swy_devdouble_stream_capture(void *stream, int on);
/* Counts in this process since it loaded the double: transport sends of
 * device memory (isend with SWY_MEM_CUDA, the per-pair path) and
 * launches of the device collectives (swy_devcoll_plugin_v1). */
void swy_devdouble_traffic(unsigned long long *transport_sends,
                           unsigned long long *launches);

#define SWY_DEVDOUBLE_ALLOC "swy_devdouble_alloc"
#define SWY_DEVDOUBLE_FREE "swy_devdouble_free"
#define SWY_DEVDOUBLE_STREAM_CREATE "swy_devdouble_stream_create"
#define SWY_DEVDOUBLE_STREAM_DESTROY "swy_devdouble_stream_destroy"
#define SWY_DEVDOUBLE_LAUNCH "swy_devdouble_launch"
#define SWY_DEVDOUBLE_STREAM_CAPTURE "swy_devdouble_stream_capture"
#define SWY_DEVDOUBLE_TRAFFIC "swy_devdouble_traffic"

#endif
