/* The job-wide variables every rank shares: world size, root address and
 * job key. Shared by the local and the cluster launcher. */
#ifndef SWY_RUN_JOB_ENV_H
#define SWY_RUN_JOB_ENV_H

#include <stdbool.h>

#define SWY_RUN_JOB_KEY_HEX_LEN 64

/* Fills key_p with 64 lowercase hex characters (32 bytes from getrandom)
 * and a terminating NUL. */
bool swy_run_job_key_generate(char key_p[SWY_RUN_JOB_KEY_HEX_LEN + 1]);

/* Asks the kernel for a free TCP port on ip by binding port 0, then closes
 * the socket. Another process may take the port before rank 0 binds it;
 * on a single host that race is rare enough to accept. */
bool swy_run_free_port_find(const char *ip, int *port_p);

/* Sets SWY_WORLD_SIZE, SWY_LOCAL_WORLD_SIZE (the ranks of one host or
 * emulated node), and SWY_ROOT (root_ip:<free port>) and SWY_JOB_KEY
 * unless the caller's environment already has them, in swy-run's own
 * environment so every rank inherits them. Reports errors on stderr. */
bool swy_run_job_env_set(int world_size, int local_world_size,
                         const char *root_ip);

#endif
