/* Every SWY_* variable, its default, its help, its type, (numbers) its
 * range and (text) the values it takes. Keep sorted by subsystem;
 * swy-info -c prints this table. Ranges keep a value from breaking what
 * reads it (a zero partition, an infinite deadline); config.h says what
 * happens outside them. */
#include "util/config_table.h"

const swy_config_entry_t swy_config_table[] = {
    /* util */
    {"SWY_LOG_LEVEL", "warn", "Log level: error, warn, info, debug, trace.",
     SWY_CONFIG_TEXT, 0, 0,
     "error,warn,info,debug,trace,warning,0,1,2,3,4,5"},
    {"SWY_LOG_SUBSYS", NULL,
     "Comma-separated subsystems to log (the values below); a leading ^ "
     "excludes the listed ones instead.",
     SWY_CONFIG_LIST, 0, 0,
     "api,boot,coll,load,moe,nccl,policy,run,sched,topo,transport,ucx,util"},
    {"SWY_LOG_FILE", NULL,
     "Write the log to this file instead of stderr; %h expands to the host "
     "name, %p to the process id.",
     SWY_CONFIG_PATH, 0, 0, NULL},
    {"SWY_CONFIG", NULL,
     "File of NAME=value lines (as written by swy-tune) read after the "
     "environment; the environment wins.",
     SWY_CONFIG_PATH, 0, 0, NULL},
    /* boot */
    {"SWY_RANK", NULL, "This process's rank (swy_comm_init_env).",
     SWY_CONFIG_INT, 0, 65534, NULL},
    {"SWY_WORLD_SIZE", NULL, "Number of ranks (swy_comm_init_env).",
     SWY_CONFIG_INT, 1, 65535, NULL},
    {"SWY_LOCAL_RANK", NULL,
     "Rank among the ranks of this host (set by swy-run; informational).",
     SWY_CONFIG_INT, 0, 65534, NULL},
    {"SWY_LOCAL_WORLD_SIZE", NULL,
     "Ranks on this host (set by swy-run; torchrun's LOCAL_WORLD_SIZE and "
     "Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE are read where it is unset): "
     "with the CPUs this process may use, it tells the ucx plugin whether "
     "the host is oversubscribed (SWY_UCX_SHM_SEG=auto).",
     SWY_CONFIG_INT, 1, 65535, NULL},
    {"SWY_NODE", NULL, "Emulated node index (set by swy-run --nodes).",
     SWY_CONFIG_INT, 0, 4095, NULL},
    {"SWY_NNODES", NULL, "Number of emulated nodes (set by swy-run --nodes).",
     SWY_CONFIG_INT, 1, 4096, NULL},
    {"SWY_ROOT", NULL,
     "host:port where rank 0 listens for the job's control plane; "
     "defaults to MASTER_ADDR:MASTER_PORT when those are set.",
     SWY_CONFIG_TEXT, 0, 0, NULL},
    {"SWY_JOB_KEY", NULL,
     "Job secret every rank must prove to the root (swy-run sets a random "
     "one). Unset: derived from the launcher's job id and the root address.",
     SWY_CONFIG_TEXT, 0, 0, NULL},
    {"SWY_TIMEOUT_S", "300",
     "Seconds an operation (or init/destroy) may wait for peers before it "
     "fails with SWY_ERR_TIMEOUT naming the silent peers.",
     SWY_CONFIG_DOUBLE, 0.1, 1e7, NULL},
    {"SWY_HEARTBEAT_S", "2",
     "Seconds between control-plane heartbeats (each side checks the "
     "other's silence at this period).",
     SWY_CONFIG_DOUBLE, 0.01, 3600, NULL},
    {"SWY_OUTAGE_S", "auto",
     "Seconds a peer's control connection may stay silent (a stopped "
     "process, a link or network outage) before every rank fails with "
     "SWY_ERR_TIMEOUT naming it; a shorter outage is survived. auto: "
     "SWY_TIMEOUT_S/10, at least 5 heartbeats; never more than "
     "SWY_TIMEOUT_S nor less than 2 heartbeats.",
     SWY_CONFIG_DOUBLE, 0.1, 1e7, NULL},
    /* topo */
    {"SWY_TOPO_XML", NULL,
     "Load the host topology from this hwloc XML file instead of "
     "discovering it.",
     SWY_CONFIG_PATH, 0, 0, NULL},
    {"SWY_TOPO_SYNTHETIC", NULL,
     "Use this hwloc synthetic description (e.g. \"pack:2 numa:1 core:4 "
     "pu:1\") instead of discovering the host.",
     SWY_CONFIG_TEXT, 0, 0, NULL},
    {"SWY_TOPO_FILE", NULL,
     "File overriding link bandwidths/latencies: lines \"CLASS GBps us\" "
     "(CLASS = self, same_numa, same_node, cross_node) or \"i j GBps us\".",
     SWY_CONFIG_PATH, 0, 0, NULL},
    {"SWY_TOPO_PROBE", "0",
     "1: measure every link at init (each pair alone, 4 MiB, best of 3) "
     "instead of the per-class defaults and SWY_TOPO_FILE; the automatic "
     "partition size follows. Costs W*(W-1) timed exchanges.",
     SWY_CONFIG_BOOL, 0, 0, NULL},
    /* transport */
    {"SWY_TRANSPORT", NULL,
     "Force this transport (by name) for every peer it can reach.",
     SWY_CONFIG_TEXT, 0, 0,
     "self,ucx,nccl,<plugin>"},
    {"SWY_TRANSPORT_PLUGINS", "ucx,nccl",
     "Transport plugins to load (swy-transport-<name>.so), in order.",
     SWY_CONFIG_LIST, 0, 0,
     "ucx,nccl,self,<plugin>"},
    {"SWY_PLUGIN_PATH", NULL,
     "Colon-separated directories searched for plugins before the "
     "install directory.",
     SWY_CONFIG_PATH, 0, 0, NULL},
    /* coll / sched */
    {"SWY_ALLREDUCE_ALGO", "auto", "Allreduce algorithm for host buffers: auto (by size and ranks), ring, rhd (halving/doubling, a power of two of ranks), direct (two steps, all peers at once) or shm (through the shared-memory channel; where there is none, auto); must be the same on every rank.",
     SWY_CONFIG_TEXT, 0, 0,
     "auto,ring,rhd,direct,shm"},
    {"SWY_COPY_THREADS", "auto",
     "Helper threads per process that share the copies and reductions of "
     "allreduce/shm (0 to 7). auto: the CPUs this process may run on, "
     "divided by the ranks of the communicator, less one, at most 3 (0 "
     "where ranks outnumber CPUs).",
     SWY_CONFIG_INT, 0, 7, NULL},
    {"SWY_ALLTOALLV_ALGO", "auto", "Alltoallv algorithm for host buffers: pairwise (through the transports; on one host large blocks go by one CMA copy), shm (through the shared-memory channel: two copies in user space; where there is none, pairwise), hier (ranks on several hosts: the blocks of up to 4 KiB that a host's ranks send one remote rank meet at one of its ranks and cross as one message; on one host, auto) or auto (shm where the CPUs all ranks may run on, together, are fewer than the ranks, else pairwise); must be the same on every rank.",
     SWY_CONFIG_TEXT, 0, 0,
     "auto,pairwise,shm,hier"},
    {"SWY_DEVICE_COLL", "auto",
     "Collectives on device buffers (all but the barrier) and sends and "
     "receives to other ranks: auto (where the nccl plugin runs "
     "collectives, each partition, send or receive is an NCCL call on the "
     "communicator and stream of its priority class, made with the "
     "communicator; else as staged) or staged (through the transports, on "
     "NCCL communicators per pair of ranks, reductions on the host "
     "through pinned copies). Must be the same on every rank.",
     SWY_CONFIG_TEXT, 0, 0, "auto,staged"},
    {"SWY_SHM_CHANNEL", "1",
     "1: a communicator whose ranks all share one host (2 to 32 ranks) "
     "maps two shared-memory segments (/dev/shm, about 10 MiB each for 4 "
     "ranks, 16 MiB at most), through which allreduce/shm moves data with "
     "one copy per byte and alltoallv/shm with two in user space; 0: "
     "none. Must be the same on every rank.",
     SWY_CONFIG_BOOL, 0, 0, NULL},
    {"SWY_SHM_PULL", "auto",
     "How alltoallv/shm moves blocks of 256 KiB and more: auto (rank 0 "
     "times the ops both ways, from every rank's times, takes mostly the "
     "faster one, and tells the others), never (copied through the sender's slots: two copies in "
     "user space) or always (every block read by the receiver straight "
     "from the sender's buffer with process_vm_readv: one copy in the "
     "kernel). Rank 0's setting counts. Pulls need the ranks to be "
     "allowed to read each other's memory (same user, one PID namespace; "
     "checked at init).",
     SWY_CONFIG_TEXT, 0, 0,
     "auto,never,always"},
    {"SWY_PARTITION_BYTES", "auto",
     "Micro-op size in bytes (K/M/G suffixes). auto: about 2 ms of the "
     "slowest flow's time (a flow to another host gets its share of the "
     "node uplink), between 64 KiB and 32 MiB; 256 KiB at most when all "
     "ranks share one host, where alltoallv is cut at 4 MiB instead (32 "
     "MiB for device memory).",
     SWY_CONFIG_SIZE, 4096, 1073741824, NULL},
    {"SWY_WINDOW_BYTES", "8M",
     "Upper bound of the bytes of micro-ops in flight per peer link "
     "(fifo; lina keeps its top priority to about 4 ms of the link, at "
     "least two partitions, within it).",
     SWY_CONFIG_SIZE, 4096, 1073741824, NULL},
    {"SWY_CREDIT_BYTES", "auto",
     "lina: bytes in flight per link of a priority that may be preempted; "
     "credit: bytes in flight per link of any priority. auto: one "
     "partition.",
     SWY_CONFIG_SIZE, 4096, 1073741824, NULL},
    {"SWY_POLICY", "lina",
     "Scheduling policy: fifo, fair, lina, credit, or a plugin name.",
     SWY_CONFIG_TEXT, 0, 0,
     "fifo,fair,lina,credit,<plugin>"},
    {"SWY_PROGRESS", "thread",
     "Progress: thread (one progress thread per process, shared by all "
     "its communicators, that sleeps on the transports' event fds when "
     "idle) or caller (progress only "
     "inside swy_test/swy_wait, as MPI).",
     SWY_CONFIG_TEXT, 0, 0,
     "thread,caller"},
    {"SWY_P2P_MATCH", "order",
     "How receives match sends (swy_recv_tagged): order (in posting order "
     "per ordered pair of ranks, as NCCL; a tag that differs is "
     "SWY_ERR_MISMATCH) or tag (as MPI and gloo: the first send from its "
     "source, or from any, that carries the receive's tag; the torch "
     "backend's setting). Only the receiving rank's setting counts.",
     SWY_CONFIG_TEXT, 0, 0,
     "order,tag"},
    {"SWY_SPIN_US", "200",
     "Microseconds a waiting rank polls before it sleeps on the "
     "transports' event file descriptors.",
     SWY_CONFIG_INT, 0, 1000000, NULL},
    {"SWY_POLICY_AGING_MS", "50",
     "Example policy plugin 'aging': a micro-op waiting longer than this "
     "goes regardless of priority.",
     SWY_CONFIG_INT, 0, 3600000, NULL},
    {"SWY_TRACE", NULL,
     "Write a Chrome trace JSON per rank to this path (%r: rank).",
     SWY_CONFIG_PATH, 0, 0, NULL},
    /* The ucx plugin's variables are in its own table (plugins/transport/
     * ucx/ucx.c), added to this one when it loads. */
    /* tools (read by the tools, not the library) */
    {"SWY_BENCH_MPI", NULL,
     "swy-bench coll: the Open MPI peer program that rank 0 runs after "
     "the job for the comparison (--compare). Unset: swy-bench-mpi beside "
     "swy-bench, or in the build tree's tools/swy-bench-mpi.",
     SWY_CONFIG_PATH, 0, 0, NULL},
    {"SWY_KC_EPILOGUES", "1",
     "CUDA kernels (swy-train --device cuda, swy-kbench): 1 fuses the "
     "biases, and in bf16 GELU and its gradient, into the expert and dense "
     "GEMMs as cuBLASLt epilogues (where cuBLASLt offers no algorithm for "
     "a GEMM, that one takes separate passes); 0 always takes the "
     "separate passes.",
     SWY_CONFIG_INT, 0, 1, NULL},
    {NULL, NULL, NULL, SWY_CONFIG_UNTYPED, 0, 0, NULL},
};
